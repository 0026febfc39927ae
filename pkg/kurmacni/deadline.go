package kurmacni

import (
	"context"
	"time"
)

// DefaultTimeout bounds ADD, DEL, CHECK and GC when the config sets no
// "timeout": a hung kurmad (stopped, deadlocked, on a full disk) must not
// hang the runtime, and an ADD must answer within the 2 minutes a CRI
// runtime gives RunPodSandbox, with room for the rest of its chain. kurmad
// rolls back a create whose caller gave up, and finishes a delete.
const DefaultTimeout = 100 * time.Second

// StatusTimeout bounds STATUS, or "timeout" when that is shorter:
// containerd 2.x runs STATUS on every CRI Status call, so a node's
// readiness must not wait on a hung kurmad.
const StatusTimeout = 5 * time.Second

// deadline is how long verb may wait for kurmad under conf.
func deadline(conf *NetConf, verb string) time.Duration {
	if verb == "STATUS" {
		return min(conf.timeout, StatusTimeout)
	}
	return conf.timeout
}

// callContext is a verb's context: cancelled at its deadline.
func callContext(conf *NetConf, verb string) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), deadline(conf, verb))
}
