package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// helpCommand is one command as kurmactl's --help shows it: its path and
// the flags its "Flags:" and "Global Flags:" list.
type helpCommand struct {
	path          []string
	flags, global []string
}

var flagLineRE = regexp.MustCompile(`^\s+(?:-\w, )?--([\w-]+)`)

// helpCommands walks `kurmactl [path] --help` from the root down its
// "Available Commands:", as a user finds them.
func helpCommands(t *testing.T, path []string) []helpCommand {
	t.Helper()
	out := mustRun(t, "", append(slices.Clone(path), "--help")...)
	hc := helpCommand{path: path}
	var subs []string
	section := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == "":
			section = ""
		case !strings.HasPrefix(line, " "):
			section = line
		case section == "Available Commands:":
			// help has no page (as cobra/doc): it is --help.
			if name := strings.Fields(line)[0]; name != "help" {
				subs = append(subs, name)
			}
		case section == "Flags:":
			if m := flagLineRE.FindStringSubmatch(line); m != nil {
				hc.flags = append(hc.flags, m[1])
			}
		case section == "Global Flags:":
			if m := flagLineRE.FindStringSubmatch(line); m != nil {
				hc.global = append(hc.global, m[1])
			}
		}
	}
	cmds := []helpCommand{hc}
	for _, s := range subs {
		cmds = append(cmds, helpCommands(t, append(slices.Clone(path), s))...)
	}
	return cmds
}

// roffSections splits a page's source into its .SH sections, roff's
// escapes for '-' and the font changes taken out.
func roffSections(src string) map[string]string {
	plain := strings.NewReplacer(`\-`, "-", `\fB`, "", `\fR`, "").Replace(src)
	secs := map[string]string{}
	name := ""
	for _, line := range strings.Split(plain, "\n") {
		if h, ok := strings.CutPrefix(line, ".SH "); ok {
			name = strings.Trim(h, `"`)
			continue
		}
		secs[name] += line + "\n"
	}
	return secs
}

// renderedSections splits man's rendering (groff -man) into its sections:
// a heading is a line at the margin.
func renderedSections(text string) map[string]string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	secs := map[string]string{}
	name := ""
	for _, line := range lines[1 : len(lines)-1] { // the header and footer lines
		if line != "" && !strings.HasPrefix(line, " ") {
			name = line
			continue
		}
		secs[name] += strings.TrimSpace(line) + "\n"
	}
	return secs
}

// groffRender renders a page as man would on a terminal, failing on any
// groff warning; "" when groff is not installed.
func groffRender(t *testing.T, page string) string {
	t.Helper()
	if _, err := exec.LookPath("groff"); err != nil {
		return ""
	}
	var out, errb bytes.Buffer
	cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-P-cbou", page)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || errb.Len() > 0 {
		t.Errorf("groff -man %s: %v\n%s", filepath.Base(page), err, errb.String())
	}
	return out.String()
}

// TestManPages: `kurmactl man DIR` writes one page per command --help
// lists, and nothing else; each page is a man page (groff renders it
// without a warning) whose NAME names the command and whose OPTIONS list
// every flag --help lists for it.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if out := mustRun(t, "", "man", dir); !strings.Contains(out, dir) {
		t.Errorf("man: %q does not say where", out)
	}
	if _, err := exec.LookPath("groff"); err != nil {
		t.Log("groff is not installed: pages checked as source only")
	}
	var want []string
	for _, hc := range helpCommands(t, nil) {
		dashed := strings.Join(append([]string{"kurmactl"}, hc.path...), "-")
		page := dashed + ".1"
		want = append(want, page)
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("kurmactl %s has no man page: %v", strings.Join(hc.path, " "), err)
			continue
		}
		src := string(b)
		if th := `.TH "` + strings.ToUpper(dashed) + `" 1 "`; !strings.Contains(strings.ReplaceAll(src, `\-`, "-"), "\n"+th) {
			t.Errorf("%s: no %s line:\n%.300s", page, th, src)
		}
		secs := roffSections(src)
		if !strings.HasPrefix(secs["NAME"], dashed+" - ") {
			t.Errorf("%s: NAME is %q, want %q first", page, secs["NAME"], dashed)
		}
		for _, s := range []string{"SYNOPSIS", "DESCRIPTION"} {
			if strings.TrimSpace(secs[s]) == "" {
				t.Errorf("%s: no %s", page, s)
			}
		}
		if len(hc.path) > 0 && !strings.Contains(secs["SEE ALSO"], strings.Join(append([]string{"kurmactl"}, hc.path[:len(hc.path)-1]...), "-")+" (1)") {
			t.Errorf("%s: SEE ALSO %q does not name its parent", page, secs["SEE ALSO"])
		}
		checkFlags := func(secs map[string]string, how string) {
			for _, f := range hc.flags {
				if !regexp.MustCompile(`(?m)^(-\w, )?--` + f + `\[?=`).MatchString(secs["OPTIONS"]) {
					t.Errorf("%s (%s): --%s is not under OPTIONS:\n%s", page, how, f, secs["OPTIONS"])
				}
			}
			for _, f := range hc.global {
				if !regexp.MustCompile(`(?m)^(-\w, )?--` + f + `\[?=`).MatchString(secs["OPTIONS INHERITED FROM PARENT COMMANDS"]) {
					t.Errorf("%s (%s): --%s is not under the inherited options", page, how, f)
				}
			}
		}
		checkFlags(secs, "source")
		if text := groffRender(t, filepath.Join(dir, page)); text != "" {
			rs := renderedSections(text)
			checkFlags(rs, "rendered")
			if !strings.HasPrefix(strings.Join(strings.Fields(rs["NAME"]), " "), dashed+" - ") {
				t.Errorf("%s rendered: NAME is %q", page, rs["NAME"])
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("pages %v, want one per command: %v", got, want)
	}
}

// TestManEscapes: text that roff would read as a request or an escape
// (a line starting with '.' or ', a backslash) reads in the rendered page
// as written.
func TestManEscapes(t *testing.T) {
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff is not installed") // TestManPages checks the pages' source without it
	}
	texts := []string{
		`.TH a line that looks like a request`,
		`'br another one`,
		`a path C:\fB\n\\x and \e with backslashes`,
		`an "quoted" arg, 50% and ĉu ne?`,
	}
	cmd := &cobra.Command{Use: "kurmactl", Short: `'s \fIshort`, Long: strings.Join(texts, "\n"),
		Example: ".  kurmactl x --y 'z'\n  kurmactl \\w"}
	cmd.Flags().String("flag", `.a\b`, ".usage with a dot")
	dir := t.TempDir()
	if err := writeManTree(cmd, dir, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	text := groffRender(t, filepath.Join(dir, "kurmactl.1"))
	flat := strings.Join(strings.Fields(text), " ")
	for _, want := range append(texts, `kurmactl - 's \fIshort`, `.  kurmactl x --y 'z'`, `kurmactl \w`,
		`--flag=".a\\b"`, ".usage with a dot") {
		if !strings.Contains(flat, strings.Join(strings.Fields(want), " ")) {
			t.Errorf("rendered page lacks %q:\n%s", want, text)
		}
	}
}
