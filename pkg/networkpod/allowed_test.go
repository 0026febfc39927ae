package networkpod

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAllowedSockDestroy: by design (docs/security.md, "What a plugin can
// do"), a plugin closes a TCP connection of the host with sock_diag's
// SOCK_DESTROY: the test's own connection over lo is aborted under it.
func TestAllowedSockDestroy(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "kthdestroy", Image: hostileImage(t, "sockdestroy")})
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server := <-accepted
	defer server.Close()
	stdin, _ := json.Marshal(map[string]string{"src": c.LocalAddr().String(), "dst": c.RemoteAddr().String()})
	ns := newNetns(t, p.NetnsDir(), "kth-destroy")
	out, stderr, err := p.Exec(context.Background(), testCall("kthdestroy", 0, "/opt/network/add", []string{ns, "0badeeee-0000-4000-8000-000000000000", "eth0"}, stdin))
	if err != nil {
		t.Fatalf("add: %v\n%s", err, stderr)
	}
	var r map[string]string
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("add printed %q: %v", out, err)
	}
	if r["SOCK_DESTROY"] != "ok" {
		t.Fatalf("SOCK_DESTROY: %v; by design a plugin may close the host's connections", r)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNABORTED) {
		t.Errorf("the destroyed connection reads %v, want ECONNABORTED", err)
	}
}

// TestAllowedReach: by design (docs/security.md, "What a plugin can do"),
// a plugin connects to a host daemon's abstract unix socket and to a TCP
// port of the host, and what it sends arrives: they are its network
// namespace's, the host's.
func TestAllowedReach(t *testing.T) {
	p := newTestHost(t, nil)
	startGenerations(t, p, Spec{Network: "kthreach", Image: hostileImage(t, "reach")})
	abstract := fmt.Sprintf("kurma-test-reach-%d", os.Getpid())
	ul, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	got := make(chan string, 2)
	for _, l := range []net.Listener{ul, tl} {
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			line, _ := bufio.NewReader(c).ReadString('\n')
			got <- l.Addr().Network() + " " + line
		}()
	}
	stdin, _ := json.Marshal(map[string]string{"abstract": abstract, "tcp": tl.Addr().String()})
	ns := newNetns(t, p.NetnsDir(), "kth-reach")
	out, stderr, err := p.Exec(context.Background(), testCall("kthreach", 0, "/opt/network/add", []string{ns, "0badffff-0000-4000-8000-000000000000", "eth0"}, stdin))
	if err != nil {
		t.Fatalf("add: %v\n%s", err, stderr)
	}
	var r map[string]string
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("add printed %q: %v", out, err)
	}
	for k, v := range r {
		if v != "ok" {
			t.Errorf("%s: %s; by design a plugin reaches them", k, v)
		}
	}
	for range 2 {
		select {
		case line := <-got:
			if !strings.HasSuffix(line, "hostile\n") {
				t.Errorf("a listener read %q", line)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a listener heard nothing from the plugin")
		}
	}
}
