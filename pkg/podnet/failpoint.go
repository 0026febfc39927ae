package podnet

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// FailpointEnv names the test-only environment variable that makes kurmad
// die abruptly (SIGKILL, as if killed -9) at one point of a pod's life, so
// the end-to-end tests can check that Reconcile leaves nothing behind.
// Its value is a failpoint name, optionally followed by ":<network>" to
// fire only for that network (e.g. "after-add:second"):
//
//	after-pod-intent     create: pod journaled as creating, nothing made yet
//	after-netns          create: netns mounted and lo up, no attachment yet
//	after-attach-intent  create: attachment intent journaled, add not run
//	after-add            create: add succeeded, result not parsed/journaled
//	before-done          create: result parsed, attachment not yet journaled done
//	before-ready         create: every network attached and resolv.conf written,
//	                     pod not yet journaled ready
//	after-delete-intent  delete: pod journaled as deleting, no del run yet
//	after-del            delete (Delete only, not rollback or Reconcile): a del
//	                     succeeded, the next ones not run
const FailpointEnv = "KURMA_FAILPOINT"

func failpoint(name, network string) {
	v := os.Getenv(FailpointEnv)
	if v == "" {
		return
	}
	fp, nw, hasNet := strings.Cut(v, ":")
	if fp != name || (hasNet && nw != network) {
		return
	}
	os.Stderr.WriteString("kurma: failpoint " + v + " reached: killing myself\n")
	_ = unix.Kill(os.Getpid(), unix.SIGKILL)
	os.Exit(137)
}
