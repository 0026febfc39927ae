package netconfig

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

const testUUID = "0123abcd-4567-4890-9abc-def012345678"

func TestInterfaceNamerRender(t *testing.T) {
	tests := []struct {
		tmpl string
		num  int // networks named before this one
		want string
	}{
		{"eth0", 0, "eth0"},
		{"eth{{num}}", 0, "eth0"},
		{"eth{{num}}", 3, "eth3"},
		{"veth{{shortuuid}}", 0, "veth0123abcd"},
		{"v{{shortuuid}}{{num}}", 2, "v0123abcd2"},
		{`{{printf "%.6s" uuid}}x`, 0, "0123abx"},
		{`{{if eq num 0}}eth0{{else}}net{{num}}{{end}}`, 1, "net1"},
		{`{{/* comment */}}e{{num}}`, 0, "e0"},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl, func(t *testing.T) {
			n := &Network{Name: "a", ContainerInterface: tt.tmpl}
			r := NewInterfaceNamer(testUUID)
			for i := 0; i < tt.num; i++ {
				if _, err := r.Name(&Network{Name: fmt.Sprintf("plain%d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := r.Name(n)
			if err != nil || got != tt.want {
				t.Errorf("Name = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestInterfaceNamerRandom(t *testing.T) {
	n := mustNetwork(t, `{"name": "a", "image": "file:///x", "containerInterface": "e{{random 8}}"}`)
	r := NewInterfaceNamer(testUUID)
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		name, err := r.Name(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(name) != 9 || !strings.HasPrefix(name, "e") || strings.Trim(name[1:], randomAlphabet) != "" || seen[name] {
			t.Fatalf("Name = %q (seen before: %v)", name, seen[name])
		}
		seen[name] = true
	}
}

// withRandom makes r's random N pick characters from seq, cycling.
func withRandom(r *InterfaceNamer, seq ...int) {
	i := 0
	r.randIntN = func(int) int {
		v := seq[i%len(seq)]
		i++
		return v
	}
}

func TestInterfaceNamerRandomCollisionRerenders(t *testing.T) {
	n := mustNetwork(t, `{"name": "r", "image": "file:///x", "containerInterface": "e{{random 1}}"}`)
	r := NewInterfaceNamer(testUUID)
	withRandom(r, 0, 0, 0, 1) // "a", "a" (taken: render again), "a" again, then "b"
	r.SetLinks([]string{"lo", "ea"})
	if name, err := r.Name(n); err != nil || name != "eb" {
		t.Fatalf("Name = %q, %v; want eb", name, err)
	}
}

func TestInterfaceNamerRandomCollisionGivesUp(t *testing.T) {
	a := mustNetwork(t, `{"name": "a", "image": "file:///x", "containerInterface": "ea"}`)
	b := mustNetwork(t, `{"name": "b", "image": "file:///x", "containerInterface": "e{{random 1}}"}`)
	r := NewInterfaceNamer(testUUID)
	withRandom(r, 0) // always "a"
	if _, err := r.Name(a); err != nil {
		t.Fatal(err)
	}
	_, err := r.Name(b)
	if !errors.Is(err, ErrInterfaceConflict) || !strings.Contains(err.Error(), `pod_networks "b": interface "ea" is already used by network "a"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestInterfaceNamerFixedCollision(t *testing.T) {
	a := mustNetwork(t, `{"name": "a", "image": "file:///x", "containerInterface": "eth0"}`)
	b := mustNetwork(t, `{"name": "b", "image": "file:///x", "containerInterface": "eth0"}`)
	r := NewInterfaceNamer(testUUID)
	if name, err := r.Name(a); err != nil || name != "eth0" {
		t.Fatalf("Name(a) = %q, %v", name, err)
	}
	_, err := r.Name(b)
	const want = `pod_networks "b": interface "eth0" is already used by network "a"; give the networks containerInterface templates that differ (e.g. "eth{{num}}")`
	if !errors.Is(err, ErrInterfaceConflict) || err.Error() != want {
		t.Fatalf("err = %v; want %s", err, want)
	}
	// A failed name does not count for num.
	c := mustNetwork(t, `{"name": "c", "image": "file:///x", "containerInterface": "net{{num}}"}`)
	if name, err := r.Name(c); err != nil || name != "net1" {
		t.Errorf("Name(c) = %q, %v; want net1", name, err)
	}
}

func TestInterfaceNamerUUIDCollision(t *testing.T) {
	// uuid is the same for every render in a pod: rendering again cannot help.
	a := mustNetwork(t, `{"name": "a", "image": "file:///x", "containerInterface": "v{{shortuuid}}"}`)
	b := mustNetwork(t, `{"name": "b", "image": "file:///x", "containerInterface": "v{{shortuuid}}"}`)
	r := NewInterfaceNamer(testUUID)
	if _, err := r.Name(a); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Name(b); !errors.Is(err, ErrInterfaceConflict) || !strings.Contains(err.Error(), `used by network "a"`) {
		t.Fatalf("err = %v", err)
	}
}

// TestInterfaceNamerLinks: the links of the pod's netns are taken, lo
// included, whoever made them: a network without template gets the first
// free ethN, a random template renders again, a fixed name fails naming
// the link. SetLinks replaces the last set.
func TestInterfaceNamerLinks(t *testing.T) {
	plain := mustNetwork(t, `{"name": "p", "image": "file:///x"}`)
	random := mustNetwork(t, `{"name": "r", "image": "file:///x", "containerInterface": "g{{random 1}}"}`)
	r := NewInterfaceNamer(testUUID)
	withRandom(r, 0, 1) // "a" (a link: render again), then "b"
	r.SetLinks([]string{"lo", "eth0", "ga"})
	if name, err := r.Name(plain); err != nil || name != "eth1" {
		t.Errorf("Name(no template) = %q, %v; want eth1, the first free ethN", name, err)
	}
	if name, err := r.Name(random); err != nil || name != "gb" {
		t.Errorf("Name(random) = %q, %v; want gb", name, err)
	}
	for _, fixed := range []string{"eth0", "lo"} {
		n := mustNetwork(t, `{"name": "f", "image": "file:///x", "containerInterface": "`+fixed+`"}`)
		_, err := r.Name(n)
		want := fmt.Sprintf(`pod_networks "f": interface %q is taken: the pod's network namespace already has a link %q, which kurma did not name; `+
			`use a containerInterface that renders a free name (e.g. "eth{{num}}", or one with {{random N}})`, fixed, fixed)
		if !errors.Is(err, ErrInterfaceConflict) || err.Error() != want {
			t.Errorf("Name(fixed %s) = %v; want %s", fixed, err, want)
		}
	}
	// eth1 was given to p: once it is a link too, p is named as its owner.
	r.SetLinks([]string{"lo", "eth1"})
	n := mustNetwork(t, `{"name": "f", "image": "file:///x", "containerInterface": "eth1"}`)
	if _, err := r.Name(n); err == nil || !strings.Contains(err.Error(), `already used by network "p"`) {
		t.Errorf("Name(eth1) = %v; want used by network p", err)
	}
	// eth0 is no longer a link: free again.
	n = mustNetwork(t, `{"name": "f", "image": "file:///x", "containerInterface": "eth0"}`)
	if name, err := r.Name(n); err != nil || name != "eth0" {
		t.Errorf("Name(eth0) = %q, %v; want eth0", name, err)
	}
}

// TestInterfaceNamerNoTemplate: networks without a template get eth0,
// eth1, ... past the names other networks took, and count for num.
func TestInterfaceNamerNoTemplate(t *testing.T) {
	plain := func(name string) *Network { return mustNetwork(t, `{"name": "`+name+`", "image": "file:///x"}`) }
	fixed := mustNetwork(t, `{"name": "f", "image": "file:///x", "containerInterface": "eth1"}`)
	numbered := mustNetwork(t, `{"name": "n", "image": "file:///x", "containerInterface": "net{{num}}"}`)
	r := NewInterfaceNamer(testUUID)
	var got []string
	for _, n := range []*Network{plain("a"), fixed, plain("b"), numbered} {
		name, err := r.Name(n)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, name)
	}
	if want := []string{"eth0", "eth1", "eth2", "net3"}; !slices.Equal(got, want) {
		t.Errorf("names = %v; want %v", got, want)
	}
}

func TestInterfaceNamerRuntimeErrors(t *testing.T) {
	// Valid for the sample render (num 0), too long once num reaches 10.
	n := mustNetwork(t, `{"name": "long", "image": "file:///x", "containerInterface": "abcdefghijklmn{{num}}"}`)
	r := NewInterfaceNamer(testUUID)
	for i := 0; i < 10; i++ {
		if _, err := r.Name(&Network{Name: "plain"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.Name(n)
	if err == nil || !strings.Contains(err.Error(), `pod_networks "long": containerInterface renders to an unusable interface name: "abcdefghijklmn10" is 16 bytes long`) {
		t.Errorf("err = %v", err)
	}
	// A hand-built network with a broken template.
	_, err = NewInterfaceNamer(testUUID).Name(&Network{Name: "h", ContainerInterface: "{{"})
	if err == nil || !strings.Contains(err.Error(), `pod_networks "h": containerInterface: template error`) {
		t.Errorf("err = %v", err)
	}
}

func TestInterfaceNamerConcurrent(t *testing.T) {
	n := mustNetwork(t, `{"name": "a", "image": "file:///x", "containerInterface": "e{{num}}x{{random 4}}"}`)
	r := NewInterfaceNamer(testUUID)
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		wg   sync.WaitGroup
	)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, err := r.Name(n)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || seen[name] {
				t.Errorf("Name = %q, %v (dup %v)", name, err, seen[name])
			}
			seen[name] = true
		}()
	}
	wg.Wait()
	for i := 0; i < 20; i++ {
		if !seen[fmt.Sprintf("e%dx", i)+nameSuffix(seen, i)] {
			t.Errorf("no name with num %d: %v", i, seen)
		}
	}
}

// nameSuffix finds the random part of the name rendered with num i.
func nameSuffix(seen map[string]bool, i int) string {
	p := fmt.Sprintf("e%dx", i)
	for s := range seen {
		if strings.HasPrefix(s, p) && len(s) == len(p)+4 {
			return s[len(p):]
		}
	}
	return "?"
}

func TestCheckInterfaceName(t *testing.T) {
	for _, ok := range []string{"e", "eth0", "abcdefghijklmno", "veth-1_x.y", "é"} {
		if msg := checkInterfaceName(ok); msg != "" {
			t.Errorf("%q: %s", ok, msg)
		}
	}
	for _, bad := range []string{"", ".", "..", "abcdefghijklmnop", "a/b", "a:b", "a b", "a\tb", "a\nb", "a\x00b", "a\x7fb"} {
		if checkInterfaceName(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}
