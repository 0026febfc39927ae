package netplugin

// Call is one plugin call as a value: the generation that runs it
// (Target), the executable (Path, such as AddPath), its arguments, and its
// stdin, which a hold may keep from the call's processes (HeldUntil).
// Everything a call varies on is here, none of it in its context: the
// context carries the call's deadline and cancellation only.
//
// Its stdin is read only through Stdin or HeldStdin, so an Execer cannot
// run a held call's processes with their stdin before the hold passed.
type Call struct {
	Target
	Path string
	Args []string

	stdin []byte
	hold  func() error
}

// NewCall is the call of path with args in generation t, stdin its input
// (a plugin's config).
func NewCall(t Target, path string, args []string, stdin []byte) Call {
	return Call{Target: t, Path: path, Args: args, stdin: stdin}
}

// HeldUntil returns c with its stdin held until hold returns nil: the
// call's processes may start before, but none reads a byte of stdin until
// then, and when hold returns an error none ever does (the call is
// cancelled, and its error wraps hold's). Plugins read their config
// before they act, so a call whose hold failed has done nothing. kurmad's
// pod lifecycle holds each add until the sync of its intent (a power cut
// must not leave an IP lease the journal does not know of), and so makes
// the intent durable while the add's processes start.
//
// hold may be called more than once (the caller asks it too after the
// call) and must return the same answer each time.
func (c Call) HeldUntil(hold func() error) Call {
	c.hold = hold
	return c
}

// Stdin is the call's stdin once its hold passed: it waits for the hold
// (none: at once) and returns its error when it failed. An Execer that
// cannot hold a call's stdin while its processes start reads it here,
// before it starts any.
func (c Call) Stdin() ([]byte, error) {
	if c.hold != nil {
		if err := c.hold(); err != nil {
			return nil, err
		}
	}
	return c.stdin, nil
}

// HeldStdin is the call's stdin and its hold (nil when the call is not
// held), for an Execer that gives the stdin to the call's processes only
// once hold returned nil, and cancels the call when it returned an error
// (networkpod.Host, through the agent's held calls); and for a record of
// the call, which gives no process anything.
func (c Call) HeldStdin() (stdin []byte, hold func() error) {
	return c.stdin, c.hold
}
