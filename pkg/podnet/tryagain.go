package podnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Backoff between adds that answered "try again later": from
// tryAgainBase, doubling, at most tryAgainMax.
const (
	tryAgainBase = 100 * time.Millisecond
	tryAgainMax  = 2 * time.Second
)

// add runs call, an attachment's add, and runs it again with backoff
// while the plugin answers CNI error 11 ("try again later": a transient
// condition, nothing made), within the call's limit (the plugin timeout,
// counted from the first attempt). When the limit comes first the error
// wraps ErrTryAgainLater and the plugin's last answer.
func (m *Manager) add(parent context.Context, call netplugin.Call, log logrus.FieldLogger) (stdout, stderr []byte, err error) {
	limit := netplugin.TimeoutOrDefault(m.config().PluginTimeout)
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	defer func() {
		// A timeout of this limit is told as configured: the call only saw
		// what was left of it when it began (1.999s of 2s).
		if errors.Is(err, netplugin.ErrTimeout) && parent.Err() == nil && ctx.Err() != nil {
			err = &netplugin.NetworkError{Network: call.Network, Op: netplugin.AddPath, Err: &netplugin.TimeoutError{Limit: limit}}
		}
	}()
	delay := tryAgainBase
	// Shared with other adds, exclusive of the network's GC, for each
	// attempt (not across the waits between them): the GC's list of valid
	// attachments then holds every attachment an add made.
	lock := m.netLock(call.Network)
	for attempt := 1; ; attempt++ {
		lock.RLock()
		stdout, stderr, err = m.opts.Exec.Exec(ctx, call)
		lock.RUnlock()
		var ce *types.Error
		if err == nil || !errors.As(err, &ce) || ce.Code != types.ErrTryAgainLater {
			return stdout, stderr, err
		}
		dl, _ := ctx.Deadline()
		gaveUp := time.Now().Add(delay).After(dl)
		if !gaveUp {
			log.WithFields(logrus.Fields{"attempt": attempt, "retry_in": delay}).WithError(err).Info("add: the plugin asks to try again later")
			gaveUp = !sleepCtx(ctx, delay)
		}
		if gaveUp {
			return stdout, stderr, fmt.Errorf("%w (%d attempts in %s): %w", ErrTryAgainLater, attempt, time.Since(start).Round(time.Millisecond), err)
		}
		delay = min(2*delay, tryAgainMax)
	}
}

// sleepCtx waits d, or less when ctx ends first (false then).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
