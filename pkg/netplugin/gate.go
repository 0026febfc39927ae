package netplugin

import "context"

// A stdin gate lets a plugin call start before its caller is ready for
// what the call does: the call's processes may start, but none is given
// its config (stdin) until the gate opens. Plugins read their config
// before they act, so a call whose gate fails has done nothing. kurmad's
// pod lifecycle gates each add on the sync of its intent (a power cut
// must not leave an IP lease the journal does not know of) and so makes
// the intent durable while the plugin's processes start.

type gateKey struct{}

// WithStdinGate returns ctx carrying gate. An Execer that honours it
// (networkpod.Host) calls gate once the call is under way and gives the
// call's processes their stdin only after it returned nil; when it
// returns an error, the call is cancelled before any process read its
// stdin, and the call's error wraps gate's. An Execer that cannot hold a
// call calls gate before it starts one. gate may be called more than once
// (the caller checks it too after the call) and must return the same
// answer each time.
func WithStdinGate(ctx context.Context, gate func() error) context.Context {
	return context.WithValue(ctx, gateKey{}, gate)
}

// StdinGate is the gate ctx carries, or nil.
func StdinGate(ctx context.Context) func() error {
	g, _ := ctx.Value(gateKey{}).(func() error)
	return g
}
