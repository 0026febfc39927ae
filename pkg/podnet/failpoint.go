package podnet

// Failpoints exist only in builds with the build tag kurma_failpoints
// (FailpointsTag): `make test` and the end-to-end tests' kurmad have it;
// release builds (`make build`) do not, and there failpoint and
// failpointAfter are empty (failpoint_off.go): nothing of them, not even
// the variable's name, is in bin/kurmad.

// FailpointsTag is the build tag that compiles the failpoints in.
const FailpointsTag = "kurma_failpoints"

// FailpointEnv names the test-only environment variable that makes kurmad
// die abruptly (SIGKILL, as if killed -9) at one point of a pod's life, so
// the end-to-end tests can check that Reconcile leaves nothing behind.
// Its value is a failpoint name, optionally followed by ":<network>" to
// fire only for that network (e.g. "after-add:second"):
//
//	netns-before-intent  create: netns mounted (lo up) or bound, pod dir
//	                     made, the pod's intent not journaled (they are
//	                     made beside its commit; armed, the commit waits
//	                     for them)
//	after-pod-intent     create: pod journaled as creating together with its
//	                     first attachment's intent; the netns and pod dir
//	                     may be made or not, no add run
//	after-netns          create: intent journaled, netns mounted and lo up,
//	                     no add run yet
//	after-attach-intent  create: this attachment's intent journaled, its add
//	                     not run. For the first network the journal is as
//	                     at after-netns (its intent went with the pod's);
//	                     for a later one, the intent was journaled together
//	                     with the previous network's result
//	after-add            create: add succeeded, result not parsed/journaled
//	before-done          create: result parsed, attachment not yet journaled
//	                     done (nor the next one's intent)
//	before-ready         create: every add succeeded and resolv.conf is
//	                     written; the last attachment is still journaled as
//	                     intent: its result and the ready phase are
//	                     journaled together next
//	after-delete-intent  delete: pod journaled as deleting, no del run yet
//	after-del            delete (Delete only, not rollback or Reconcile): a del
//	                     succeeded, the next ones not run
const FailpointEnv = "KURMA_FAILPOINT"
