// Package transcript keeps the last plugin calls of each pod in memory, as
// `kurmactl pod inspect --calls` shows them: argv, stdin as sent (with the
// values of redacted keys replaced), stdout, the end of stderr, the exit,
// the duration and the container that served the call. Everything is
// bounded: calls per pod, pods, and bytes per call; nothing is written to
// disk (a restarted kurmad has no transcripts), so recording costs a
// plugin call a few copies and no I/O.
package transcript

import (
	"sync"
	"time"
	"unicode/utf8"
)

// Call is one plugin call as kept.
type Call struct {
	Network string
	// Generation is the generation of the network's plugin container
	// that served the call.
	Generation int
	Path       string
	Args       []string
	// Stdin is the config the plugin got, the values of redacted keys
	// replaced by Redacted; StdinTruncated says the rest was cut.
	Stdin           string
	StdinTruncated  bool
	Stdout          string
	StdoutTruncated bool
	// Stderr is the end of the plugin's stderr; StderrTruncated says that
	// its beginning was cut.
	Stderr          string
	StderrTruncated bool
	ExitCode        int
	Signal          string
	// Error is kurmad's view of a call that did not succeed (the plugin's
	// error, a timeout, a network that was not running).
	Error     string
	Start     time.Time
	Duration  time.Duration
	Pid       int
	InProcess bool
}

// Options bound a Store.
type Options struct {
	// PerPod is how many calls are kept per pod (the newest); default 16.
	PerPod int
	// MaxPods is how many pods have transcripts; the one written to least
	// recently is dropped first. Default 4096.
	MaxPods int
	// MaxOutput caps stdin and stdout (their beginning is kept); default
	// 64 KiB.
	MaxOutput int
	// MaxStderr caps stderr (its end is kept); default 4 KiB.
	MaxStderr int
	// RedactKeys are the keys whose values Redact replaces in stdin
	// (SetRedactKeys changes them).
	RedactKeys []string
}

// Store holds transcripts. Its methods are safe for concurrent use.
type Store struct {
	opts Options

	mu    sync.Mutex
	pods  map[string]*podCalls
	clock uint64 // counts Records, for dropping the least recently written pod
}

type podCalls struct {
	calls []Call // oldest first
	used  uint64
}

// New returns an empty Store.
func New(opts Options) *Store {
	if opts.PerPod <= 0 {
		opts.PerPod = 16
	}
	if opts.MaxPods <= 0 {
		opts.MaxPods = 4096
	}
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = 64 << 10
	}
	if opts.MaxStderr <= 0 {
		opts.MaxStderr = 4 << 10
	}
	return &Store{opts: opts, pods: map[string]*podCalls{}}
}

// Record keeps c for pod, with stdin, stdout and stderr as the call had
// them: stdin is redacted, and all three are cut to their caps, here.
func (s *Store) Record(pod string, c Call, stdin, stdout, stderr []byte) {
	c.Args = append([]string(nil), c.Args...)
	c.Stdin, c.StdinTruncated = head(Redact(stdin, s.redactKeys()), s.opts.MaxOutput)
	c.Stdout, c.StdoutTruncated = head(stdout, s.opts.MaxOutput)
	c.Stderr, c.StderrTruncated = tail(stderr, s.opts.MaxStderr)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock++
	p := s.pods[pod]
	if p == nil {
		if len(s.pods) >= s.opts.MaxPods {
			s.dropOldest()
		}
		p = &podCalls{}
		s.pods[pod] = p
	}
	p.used = s.clock
	if len(p.calls) >= s.opts.PerPod {
		p.calls = append(p.calls[:0], p.calls[1:]...)
	}
	p.calls = append(p.calls, c)
}

// SetRedactKeys makes the calls recorded from now on redact keys instead
// (a reload of the config), and redacts them in the calls already kept: a
// key added because its value should not be seen stops being seen at once.
func (s *Store) SetRedactKeys(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.RedactKeys = keys
	for _, p := range s.pods {
		for i := range p.calls {
			p.calls[i].Stdin = string(Redact([]byte(p.calls[i].Stdin), keys))
		}
	}
}

func (s *Store) redactKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.RedactKeys
}

// dropOldest forgets the pod written to least recently.
func (s *Store) dropOldest() {
	var oldest string
	var used uint64
	for id, p := range s.pods {
		if oldest == "" || p.used < used {
			oldest, used = id, p.used
		}
	}
	delete(s.pods, oldest)
}

// Calls returns pod's calls, oldest first; none when it has no transcript.
func (s *Store) Calls(pod string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[pod]
	if p == nil {
		return []Call{}
	}
	return append([]Call(nil), p.calls...)
}

// Forget drops pod's transcript (the pod is gone).
func (s *Store) Forget(pod string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, pod)
}

// head is b's first max bytes, cut at a whole UTF-8 sequence.
func head(b []byte, max int) (string, bool) {
	if len(b) <= max {
		return string(b), false
	}
	n := max
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]), true
}

// tail is b's last max bytes, starting at a whole UTF-8 sequence.
func tail(b []byte, max int) (string, bool) {
	if len(b) <= max {
		return string(b), false
	}
	n := len(b) - max
	for n < len(b) && !utf8.RuneStart(b[n]) {
		n++
	}
	return string(b[n:]), true
}
