package testutil

import (
	"net"
	"testing"

	"github.com/kurma-project/kurma/pkg/netnsfile"
)

// ListenIn listens on a TCP address in the network namespace at path (a
// socket stays in the namespace it was made in), so that a server of the
// test's answers there, e.g. on that namespace's loopback.
func ListenIn(t testing.TB, path, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	err := netnsfile.Do(path, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
