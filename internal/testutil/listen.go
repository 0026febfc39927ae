package testutil

import (
	"net"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// ListenIn listens on a TCP address in the network namespace at path (a
// socket stays in the namespace it was made in), so that a server of the
// test's answers there, e.g. on that namespace's loopback.
func ListenIn(t testing.TB, path, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	l, lerr := net.Listen("tcp", addr)
	if err := netns.Set(orig); err != nil {
		// This thread is in the wrong namespace: it must not run
		// anything else (LockOSThread without Unlock ends it).
		runtime.LockOSThread()
		t.Fatalf("back to the test's network namespace: %v", err)
	}
	if lerr != nil {
		t.Fatal(lerr)
	}
	return l
}
