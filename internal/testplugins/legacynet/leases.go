package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// leaseSocket is where main serves the leases: the container's /run, a
// tmpfs its calls share and that goes with the container.
const leaseSocket = "/run/legacynet.sock"

// leases are main's, in its memory alone: a main started again has none,
// and hands out the pool's first address again.
type leases struct {
	mu     sync.Mutex
	prefix netip.Prefix
	next   netip.Addr
	byPod  map[string]string
}

// serveLeases listens on leaseSocket and answers each connection's one
// line, "lease <pod>" (the pod's address, a new one when it has none: the
// pool's next, never one handed out before) or "release <pod>" (an error
// when main holds no lease for the pod).
func serveLeases(pool string) error {
	prefix, err := netip.ParsePrefix(pool)
	if err != nil || !prefix.Addr().Is4() {
		return fmt.Errorf("pool %q: an IPv4 prefix, like 10.0.0.0/24", pool)
	}
	prefix = prefix.Masked()
	l, err := net.Listen("unix", leaseSocket)
	if err != nil {
		return err
	}
	ls := &leases{prefix: prefix, next: prefix.Addr().Next().Next(), byPod: map[string]string{}}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go ls.serve(c)
		}
	}()
	return nil
}

func (ls *leases) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	verb, pod, _ := strings.Cut(strings.TrimSpace(line), " ")
	answer, err := ls.do(verb, pod)
	if err != nil {
		answer = "error " + err.Error()
	}
	fmt.Fprintln(c, answer)
}

func (ls *leases) do(verb, pod string) (string, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch verb {
	case "lease":
		if a, ok := ls.byPod[pod]; ok {
			return a, nil
		}
		if !ls.prefix.Contains(ls.next) {
			return "", fmt.Errorf("pool %s exhausted", ls.prefix)
		}
		a := netip.PrefixFrom(ls.next, ls.prefix.Bits()).String()
		ls.next = ls.next.Next()
		ls.byPod[pod] = a
		fmt.Fprintf(os.Stderr, "legacynet: leased %s to pod %s\n", a, pod)
		return a, nil
	case "release":
		a, ok := ls.byPod[pod]
		if !ok {
			return "", fmt.Errorf("no lease for pod %s", pod)
		}
		delete(ls.byPod, pod)
		fmt.Fprintf(os.Stderr, "legacynet: released %s of pod %s\n", a, pod)
		return a, nil
	}
	return "", fmt.Errorf("unknown request %q", verb)
}

// askMain sends main one request and returns its answer.
func askMain(verb, pod string) (string, error) {
	c, err := net.DialTimeout("unix", leaseSocket, 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("main's leases: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "%s %s\n", verb, pod); err != nil {
		return "", fmt.Errorf("main's leases: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("main's leases: %w", err)
	}
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return "", errors.New(msg)
	}
	return line, nil
}
