package testutil

// Markdown, for the tests of kurma's documentation (test/e2e's docs_test.go
// and TestReadmePodmanSnippet): the examples a document shows are run, and
// its links resolve. Fenced blocks say what they are in their info string,
// after the language:
//
//	```json kurmad-config [FILE]   a kurmad config, loaded by pkg/netconfig
//	```json conflist [FILE]        a CNI conflist, loaded by libcni
//	```sh podman-snippet           README's podman snippet, run with podman
//
// With FILE (a path from the repository's root), the block must also be
// that file's content, byte for byte, so an example file and its copy in a
// document cannot drift apart.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Block is a fenced code block of a Markdown file.
type Block struct {
	File string // the Markdown file
	Line int    // the line of its opening fence, from 1
	Lang string // the info string's first word ("json", "sh")
	Kind string // its second word ("kurmad-config", "conflist", ...), "" when none
	Of   string // its third word: the repository file it copies, "" when none
	Text string // its content, every line ending in "\n"
}

func (b Block) String() string { return fmt.Sprintf("%s:%d (%s %s)", b.File, b.Line, b.Lang, b.Kind) }

// Blocks returns the fenced blocks (```) of the Markdown file path, in
// order. A fence left open is an error.
func Blocks(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Block
	var cur *Block
	var text strings.Builder
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
			cur = &Block{File: path, Line: i + 1}
			for j, f := range info {
				switch j {
				case 0:
					cur.Lang = f
				case 1:
					cur.Kind = f
				case 2:
					cur.Of = f
				}
			}
			text.Reset()
		case cur != nil && trimmed == "```":
			cur.Text = text.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			text.WriteString(line + "\n")
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a fenced block is never closed", path, cur.Line)
	}
	return out, nil
}

// Link is a relative link of a Markdown file: [text](Target#Anchor).
type Link struct {
	File   string // the Markdown file
	Line   int
	Target string // a path relative to File's directory; "" for File itself
	Anchor string // "" when none
}

func (l Link) String() string {
	s := l.Target
	if l.Anchor != "" {
		s += "#" + l.Anchor
	}
	return fmt.Sprintf("%s:%d: %s", l.File, l.Line, s)
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^()\s]*)(?:\s+"[^"]*")?\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// Links returns the relative links of the Markdown file path, outside code
// blocks and code spans; links with a scheme (https:, mailto:) are left
// out.
func Links(path string) ([]Link, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Link
	inBlock := false
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(inlineCodeRE.ReplaceAllString(line, "``"), -1) {
			target := m[1]
			if target == "" || schemeRE.MatchString(target) {
				continue
			}
			l := Link{File: path, Line: i + 1}
			l.Target, l.Anchor, _ = strings.Cut(target, "#")
			out = append(out, l)
		}
	}
	return out, nil
}

// Anchors returns the anchors of the headings of the Markdown file path,
// as GitHub makes them: lowercase, punctuation dropped, spaces turned into
// hyphens, "-1", "-2", ... added to repeats.
func Anchors(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	seen := map[string]int{}
	inBlock := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		s := Slug(heading)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out, nil
}

// Slug is GitHub's anchor for a heading's text.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// MarkdownFiles returns the Markdown files of the repository, relative to
// its root; build output and dependencies are left out.
func MarkdownFiles() ([]string, error) {
	root := RepoRoot()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch {
			case rel != "." && strings.HasPrefix(d.Name(), "."), rel == "images/out", rel == "test/k8s/out",
				d.Name() == "node_modules", d.Name() == "vendor", d.Name() == "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}
