package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newManCmd writes kurmactl's man pages, one per command, generated from
// the commands themselves (make man; README's install).
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "man DIR",
		Short: "Write kurmactl's man pages (section 1) into DIR",
		Args:  cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			date, err := manDate()
			if err != nil {
				return err
			}
			if err := writeManTree(cmd.Root(), args[0], date); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "man pages written to %s\n", args[0])
			return nil
		}),
	}
}

// manCommands is every command that gets a page: the ones --help lists
// (not hidden, not deprecated, not help), depth first from root.
func manCommands(root *cobra.Command) []*cobra.Command {
	cmds := []*cobra.Command{root}
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() && !c.IsAdditionalHelpTopicCommand() {
			cmds = append(cmds, manCommands(c)...)
		}
	}
	return cmds
}

// manPageName is a command's page file, as cobra/doc named them:
// kurmactl-pod-create.1.
func manPageName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
}

// manDate is the pages' date: now, or SOURCE_DATE_EPOCH for a reproducible
// build.
func manDate() (time.Time, error) {
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		return time.Now(), nil
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// writeManTree writes one section-1 page per command of root's tree into
// dir. It is a small roff writer of our own rather than cobra/doc, which
// links a markdown renderer and a YAML parser into every kurmactl start
// (about 4 ms of package init) for this one hidden command.
func writeManTree(root *cobra.Command, dir string, date time.Time) error {
	for _, c := range manCommands(root) {
		path := filepath.Join(dir, manPageName(c))
		if err := os.WriteFile(path, manPage(c, date), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// manPage renders c's page: NAME, SYNOPSIS, DESCRIPTION, OPTIONS, OPTIONS
// INHERITED FROM PARENT COMMANDS, EXAMPLE and SEE ALSO.
func manPage(c *cobra.Command, date time.Time) []byte {
	// As cobra does when it runs a command: -h and --version are flags
	// of every page that has them.
	c.InitDefaultHelpFlag()
	c.InitDefaultVersionFlag()
	var b bytes.Buffer
	dashed := strings.ReplaceAll(c.CommandPath(), " ", "-")
	b.WriteString(".nh\n")
	fmt.Fprintf(&b, ".TH %s 1 %s %s %s\n", roffArg(strings.ToUpper(dashed)), roffArg(date.Format("Jan 2006")),
		roffArg("kurma "+version), roffArg("kurma"))
	b.WriteString(".SH NAME\n")
	fmt.Fprintf(&b, "%s \\- %s\n", roffText(dashed), roffText(c.Short))
	b.WriteString(".SH SYNOPSIS\n")
	fmt.Fprintf(&b, "\\fB%s\\fR\n", roffText(c.UseLine()))
	b.WriteString(".SH DESCRIPTION\n")
	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	manBlocks(&b, desc)
	manFlags(&b, "OPTIONS", c.NonInheritedFlags())
	manFlags(&b, "OPTIONS INHERITED FROM PARENT COMMANDS", c.InheritedFlags())
	if c.Example != "" {
		b.WriteString(".SH EXAMPLE\n")
		manLiteral(&b, strings.Split(strings.Trim(c.Example, "\n"), "\n"))
	}
	var see []string
	if c.HasParent() {
		see = append(see, strings.ReplaceAll(c.Parent().CommandPath(), " ", "-"))
	}
	children := slices.Clone(c.Commands())
	slices.SortFunc(children, func(a, b *cobra.Command) int { return strings.Compare(a.Name(), b.Name()) })
	for _, sub := range children {
		if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
			see = append(see, dashed+"-"+sub.Name())
		}
	}
	if len(see) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range see {
			sep := ","
			if i == len(see)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, ".BR %s (1)%s\n", roffText(s), sep)
		}
	}
	return b.Bytes()
}

// manFlags writes a section listing flags (none: no section), each as
// "-s, --name=DEFAULT" over its usage, as cobra/doc formatted them.
func manFlags(b *bytes.Buffer, title string, flags *pflag.FlagSet) {
	var items []string
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		head := `\fB` + roffText("--"+f.Name) + `\fR`
		if f.Shorthand != "" && f.ShorthandDeprecated == "" {
			head = `\fB` + roffText("-"+f.Shorthand) + `\fR, ` + head
		}
		def := f.DefValue
		if f.Value.Type() == "string" {
			def = strconv.Quote(def)
		}
		if f.NoOptDefVal != "" {
			def = "[=" + def + "]"
		} else {
			def = "=" + def
		}
		item := ".TP\n" + head + roffText(def) + "\n"
		if f.Usage != "" {
			item += roffText(f.Usage) + "\n"
		}
		items = append(items, item)
	})
	if len(items) == 0 {
		return
	}
	b.WriteString(".SH " + title + "\n")
	for _, it := range items {
		b.WriteString(it)
	}
}

// manBlocks writes plain text: paragraphs split at blank lines, runs of
// indented lines (commands) as literal blocks. A line of markdown's
// heading marks (cobra's completion help has "#### Linux:") is set bold
// without them.
func manBlocks(b *bytes.Buffer, text string) {
	for _, para := range strings.Split(strings.Trim(text, "\n"), "\n\n") {
		if strings.TrimSpace(para) == "" {
			continue
		}
		lines := strings.Split(strings.Trim(para, "\n"), "\n")
		b.WriteString(".PP\n")
		for i := 0; i < len(lines); {
			if !indented(lines[i]) {
				line := strings.TrimSpace(lines[i])
				if h := strings.TrimLeft(line, "#"); h != line && strings.HasPrefix(h, " ") {
					b.WriteString(`\fB` + roffText(strings.TrimSpace(h)) + `\fR` + "\n")
				} else {
					b.WriteString(roffText(line) + "\n")
				}
				i++
				continue
			}
			j := i
			for j < len(lines) && indented(lines[j]) {
				j++
			}
			manLiteral(b, lines[i:j])
			i = j
		}
	}
}

// manLiteral writes lines as typed (commands, examples), indented, less
// the indentation they share.
func manLiteral(b *bytes.Buffer, lines []string) {
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " \t")); common < 0 || n < common {
			common = n
		}
	}
	b.WriteString(".RS 4\n.nf\n")
	for _, l := range lines {
		if len(l) >= common && common > 0 {
			l = l[common:]
		}
		b.WriteString(roffText(l) + "\n")
	}
	b.WriteString(".fi\n.RE\n")
}

func indented(line string) bool {
	return strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")
}

// roffText escapes plain text for roff, to be read as written: a
// backslash becomes \e, a hyphen \- (an ASCII hyphen-minus that copies and
// pastes as typed), a tab spaces, a character beyond ASCII \[uXXXX] so
// that groff reads it whatever the locale, and text that starts with a
// control character ('.' or ') gets \& in front so that it is not read as
// a request. Font changes (\fB) are the callers', around escaped text.
func roffText(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString("\\e")
		case r == '-':
			b.WriteString("\\-")
		case r == '\t':
			b.WriteString("        ")
		case r > 0x7e:
			fmt.Fprintf(&b, "\\[u%04X]", r)
		default:
			b.WriteRune(r)
		}
	}
	out := b.String()
	if strings.HasPrefix(out, ".") || strings.HasPrefix(out, "'") {
		out = "\\&" + out
	}
	return out
}

// roffArg is s as one argument of a request: quoted, its quotes doubled.
func roffArg(s string) string {
	return `"` + strings.ReplaceAll(roffText(s), `"`, `""`) + `"`
}
