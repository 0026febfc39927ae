package netconfig

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"text/template"
	"text/template/parse"
)

// MaxInterfaceLen is the longest Linux interface name (IFNAMSIZ - 1).
const MaxInterfaceLen = 15

// maxRenderAttempts bounds re-rendering a template that uses random when
// its result collides with a name already used in the pod.
const maxRenderAttempts = 16

// sampleUUID is used to test-render templates at load time.
const sampleUUID = "6f1c1e2a-9b7d-4c3e-8f00-123456789abc"

const randomAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

const templateHint = `the template may use {{uuid}}, {{shortuuid}}, {{num}}, {{random N}} (1-15), printf and if/else, e.g. "eth{{num}}"`

// placeholderFuncs are the containerInterface template functions. The real
// ones are bound per render; these stand-ins let Parse check names.
var placeholderFuncs = template.FuncMap{
	"uuid":      func() string { return "" },
	"shortuuid": func() string { return "" },
	"num":       func() int { return 0 },
	"random":    func(int) (string, error) { return "", nil },
}

// parseInterfaceTemplate parses a containerInterface template and
// test-renders it, returning a message when it can never give a usable name.
func parseInterfaceTemplate(src string) (*template.Template, string) {
	if src == "" {
		return nil, `must not be empty; remove the key to let the plugin pick the interface name (the first free ethN), or write a template such as "eth{{num}}"`
	}
	t, err := template.New("containerInterface").Funcs(placeholderFuncs).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, fmt.Sprintf("template error: %v; %s", strings.TrimPrefix(err.Error(), "template: "), templateHint)
	}
	if len(t.Templates()) > 1 {
		return nil, "templates may not define other templates; " + templateHint
	}
	if msg := checkTemplateNodes(t.Tree.Root); msg != "" {
		return nil, msg + "; " + templateHint
	}
	name, _, err := render(t, sampleUUID, 0, rand.IntN)
	if err != nil {
		return nil, fmt.Sprintf("%v; %s", err, templateHint)
	}
	if msg := checkInterfaceName(name); msg != "" {
		return nil, fmt.Sprintf("renders (for a sample pod) to an unusable interface name: %s", msg)
	}
	return t, ""
}

// checkTemplateNodes allows text, actions and if/else only: a name is a
// short string, and loops or nested templates would let a config stall or
// blow up pod creation.
func checkTemplateNodes(n parse.Node) string {
	switch n := n.(type) {
	case nil:
		return ""
	case *parse.ListNode:
		if n == nil {
			return ""
		}
		for _, c := range n.Nodes {
			if msg := checkTemplateNodes(c); msg != "" {
				return msg
			}
		}
		return ""
	case *parse.TextNode, *parse.ActionNode, *parse.CommentNode:
		return ""
	case *parse.IfNode:
		if msg := checkTemplateNodes(n.List); msg != "" {
			return msg
		}
		return checkTemplateNodes(n.ElseList)
	default:
		return fmt.Sprintf("%q is not allowed in an interface name template", n.String())
	}
}

// errOutputTooLong stops a template whose output is already too long to be
// an interface name.
var errOutputTooLong = errors.New("output too long")

type limitedBuilder struct{ strings.Builder }

func (b *limitedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > 4*MaxInterfaceLen {
		return 0, errOutputTooLong
	}
	return b.Builder.Write(p)
}

// render executes t for a pod, random N picking its characters with
// randIntN; usedRandom tells whether rendering again may give another name.
func render(t *template.Template, podUUID string, num int, randIntN func(int) int) (name string, usedRandom bool, err error) {
	c, err := t.Clone()
	if err != nil {
		return "", false, err
	}
	c.Funcs(template.FuncMap{
		"uuid": func() string { return podUUID },
		"shortuuid": func() string {
			if len(podUUID) > 8 {
				return podUUID[:8]
			}
			return podUUID
		},
		"num": func() int { return num },
		"random": func(n int) (string, error) {
			if n < 1 || n > MaxInterfaceLen {
				return "", fmt.Errorf("random %d: N must be between 1 and %d", n, MaxInterfaceLen)
			}
			usedRandom = true
			b := make([]byte, n)
			for i := range b {
				b[i] = randomAlphabet[randIntN(len(randomAlphabet))]
			}
			return string(b), nil
		},
	})
	var out limitedBuilder
	if err := c.Execute(&out, nil); err != nil {
		if errors.Is(err, errOutputTooLong) {
			return "", usedRandom, fmt.Errorf("renders to more than %d bytes; interface names are at most %d", 4*MaxInterfaceLen, MaxInterfaceLen)
		}
		return "", usedRandom, fmt.Errorf("template error: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	return out.String(), usedRandom, nil
}

// CheckInterfaceName says why name cannot be a Linux interface name, or
// "" when it can: for an interface name a request gives, checked before
// anything is made.
func CheckInterfaceName(name string) string { return checkInterfaceName(name) }

// checkInterfaceName says why name cannot be a Linux interface name, or ""
// when it can (the kernel's dev_valid_name, plus no control characters).
func checkInterfaceName(name string) string {
	switch {
	case name == "":
		return "the name is empty"
	case len(name) > MaxInterfaceLen:
		return fmt.Sprintf("%q is %d bytes long; interface names are at most %d (use shortuuid or random N rather than uuid)", name, len(name), MaxInterfaceLen)
	case name == "." || name == "..":
		return fmt.Sprintf("%q is not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '/' || c == ':':
			return fmt.Sprintf("%q contains %q, which interface names may not", name, c)
		case c <= ' ' || c == 0x7f:
			return fmt.Sprintf("%q contains whitespace or a control character", name)
		}
	}
	return ""
}

// InterfaceNamer gives the networks of one pod their container interface
// names: it renders each network's containerInterface template, or picks
// the first free ethN for a network without one, and keeps the names
// unique within the pod, counting as taken both the names it gave and the
// links the pod's network namespace already holds (SetLinks). It is safe
// for concurrent use.
type InterfaceNamer struct {
	mu      sync.Mutex
	podUUID string
	count   int               // networks named so far: the template's num
	used    map[string]string // interface name → network it was given to
	links   map[string]bool   // links in the pod's netns, as last set
	// randIntN picks the characters of random N: rand.IntN, or in a test
	// of this package a sequence that forces collisions.
	randIntN func(int) int
}

// NewInterfaceNamer returns the namer for the pod with the given UUID.
func NewInterfaceNamer(podUUID string) *InterfaceNamer {
	return &InterfaceNamer{podUUID: podUUID, used: map[string]string{}, links: map[string]bool{}, randIntN: rand.IntN}
}

// SetLinks records the links the pod's network namespace holds now, lo
// included: Name treats each as taken, whoever made it (a plugin's extra
// link, a runtime that made the namespace). Each call replaces the last.
func (r *InterfaceNamer) SetLinks(links []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.links)
	for _, l := range links {
		r.links[l] = true
	}
}

// conflictError is an interface name already taken in the pod: given to
// network owner, or (owner "") a link of the pod's netns.
type conflictError struct {
	network, ifname, owner string
	fixed                  bool // the name was the caller's (Claim), not a template's
}

func (e *conflictError) Error() string {
	if e.fixed {
		who := fmt.Sprintf("a link %q already in the network namespace", e.ifname)
		if e.owner != "" {
			who = fmt.Sprintf("network %q", e.owner)
		}
		return fmt.Sprintf("pod_networks %q: interface %q is taken by %s; ask for another interface name", e.network, e.ifname, who)
	}
	if e.owner == "" {
		return fmt.Sprintf("pod_networks %q: interface %q is taken: the pod's network namespace already has a link %q, which kurma did not name; use a containerInterface that renders a free name (e.g. \"eth{{num}}\", or one with {{random N}})",
			e.network, e.ifname, e.ifname)
	}
	return fmt.Sprintf("pod_networks %q: interface %q is already used by network %q; give the networks containerInterface templates that differ (e.g. \"eth{{num}}\")",
		e.network, e.ifname, e.owner)
}

func (e *conflictError) Is(target error) bool { return target == ErrInterfaceConflict }

// Name returns the interface name for n in this pod: its containerInterface
// rendered, or without one the first ethN that is free. Every call that
// succeeds counts as one more attachment for num. A rendered name that is
// taken is rendered again when the template uses random; otherwise the
// error names the network or the link that has it and matches
// ErrInterfaceConflict.
func (r *InterfaceNamer) Name(n *Network) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := n.tmpl
	if t == nil && n.ContainerInterface != "" {
		// A Network built by hand rather than parsed.
		var msg string
		if t, msg = parseInterfaceTemplate(n.ContainerInterface); msg != "" {
			return "", fmt.Errorf("pod_networks %q: containerInterface: %s", n.Name, msg)
		}
	}
	if t == nil {
		if !n.MakesInterface() {
			// loopback: it sets up lo, whatever name it is given, and
			// leaves the next network its ethN (and num).
			return LoopbackInterface, nil
		}
		return r.take(n, r.freeEthN()), nil
	}
	for attempt := 1; ; attempt++ {
		name, usedRandom, err := render(t, r.podUUID, r.count, r.randIntN)
		if err != nil {
			return "", fmt.Errorf("pod_networks %q: containerInterface: %w", n.Name, err)
		}
		if msg := checkInterfaceName(name); msg != "" {
			return "", fmt.Errorf("pod_networks %q: containerInterface renders to an unusable interface name: %s", n.Name, msg)
		}
		owner, taken := r.used[name]
		if !taken && !r.links[name] {
			return r.take(n, name), nil
		}
		if !usedRandom || attempt >= maxRenderAttempts {
			return "", &conflictError{network: n.Name, ifname: name, owner: owner}
		}
	}
}

// LoopbackInterface is the interface name of a network that makes none
// (see MakesInterface) and has no containerInterface: the loopback plugin
// sets up lo, whatever CNI_IFNAME says.
const LoopbackInterface = "lo"

// Claim gives n the fixed interface name ifname, one a caller chose (a
// container runtime's CNI_IFNAME), rather than one n's template renders:
// it must be a valid interface name and free in the pod, like any other,
// else the error names what has it and matches ErrInterfaceConflict.
func (r *InterfaceNamer) Claim(n *Network, ifname string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if msg := checkInterfaceName(ifname); msg != "" {
		return "", fmt.Errorf("pod_networks %q: interface name: %s", n.Name, msg)
	}
	if owner, taken := r.used[ifname]; taken || r.links[ifname] {
		return "", &conflictError{network: n.Name, ifname: ifname, owner: owner, fixed: true}
	}
	return r.take(n, ifname), nil
}

// take gives name to n and counts the attachment.
func (r *InterfaceNamer) take(n *Network, name string) string {
	r.used[name] = n.Name
	r.count++
	return name
}

// freeEthN is the first ethN neither given nor a link.
func (r *InterfaceNamer) freeEthN() string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("eth%d", i)
		if _, taken := r.used[name]; !taken && !r.links[name] {
			return name
		}
	}
}
