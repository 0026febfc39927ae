//go:build kurma_failpoints

package podnet

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// failpointsBuilt tells the tests whether failpoints fire in this build.
const failpointsBuilt = true

// failpoint kills the process (failpointDie) when FailpointEnv names the
// failpoint name, for any network or for this network.
func failpoint(name, network string) {
	v := os.Getenv(FailpointEnv)
	if v == "" {
		return
	}
	fp, nw, hasNet := strings.Cut(v, ":")
	if fp != name || (hasNet && nw != network) {
		return
	}
	failpointDie(v)
}

// failpointAfter is failpoint(name, "") at a point that overlapped work
// reaches at no fixed instant: armed, it waits first (wait), so the crash
// leaves what that point names.
func failpointAfter(name string, wait func() error) {
	if v := os.Getenv(FailpointEnv); v == name {
		_ = wait()
		failpointDie(v)
	}
}

func failpointDie(v string) {
	os.Stderr.WriteString("kurma: failpoint " + v + " reached: killing myself\n")
	_ = unix.Kill(os.Getpid(), unix.SIGKILL)
	os.Exit(137)
}
