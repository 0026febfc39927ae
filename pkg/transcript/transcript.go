// Package transcript keeps the last plugin calls of each pod in memory, as
// `kurmactl pod inspect --calls` shows them: argv, stdin as sent (with the
// values of redacted keys replaced), stdout, the end of stderr, the exit,
// the duration and the container that served the call. Everything is
// bounded: calls per pod, pods, and bytes per call; nothing is written to
// disk (a restarted kurmad has no transcripts), so recording costs a
// plugin call a few copies and no I/O. The whole store has a memory cap too:
// when the calls kept pass it, the transcripts of the pods written to least
// recently are dropped (Dropped counts them).
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
	// MaxBytes caps the memory all transcripts hold together (the bytes of
	// every call's argv, stdin, stdout, stderr and error, plus a fixed
	// overhead per call); past it the pods written to least recently lose
	// their transcripts first. Default 64 MiB. (PerPod × MaxPods ×
	// (2 × MaxOutput + MaxStderr) alone would be GiBs.)
	MaxBytes int64
	// RedactKeys are the keys whose values Redact replaces in stdin
	// (SetRedactKeys changes them).
	RedactKeys []string
}

// Store holds transcripts. Its methods are safe for concurrent use.
type Store struct {
	opts Options

	mu      sync.Mutex
	pods    map[string]*podCalls
	clock   uint64 // counts Records, for dropping the least recently written pod
	bytes   int64  // held by every pod's calls (callSize)
	dropped uint64 // pods whose transcript was dropped to stay within MaxPods or MaxBytes
}

type podCalls struct {
	calls []Call // oldest first
	used  uint64
	bytes int64
}

// callOverhead approximates what a kept Call costs beyond its strings.
const callOverhead = 256

// callSize is what c holds in memory, as counted against MaxBytes.
func callSize(c *Call) int64 {
	n := callOverhead + len(c.Network) + len(c.Path) + len(c.Stdin) + len(c.Stdout) + len(c.Stderr) + len(c.Signal) + len(c.Error)
	for _, a := range c.Args {
		n += len(a) + 16
	}
	return int64(n)
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
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
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
			s.dropOldest(pod)
		}
		p = &podCalls{}
		s.pods[pod] = p
	}
	p.used = s.clock
	if len(p.calls) >= s.opts.PerPod {
		p.add(-callSize(&p.calls[0]), &s.bytes)
		p.calls = append(p.calls[:0], p.calls[1:]...)
	}
	p.calls = append(p.calls, c)
	p.add(callSize(&c), &s.bytes)
	for s.bytes > s.opts.MaxBytes && len(s.pods) > 1 {
		s.dropOldest(pod)
	}
}

// add counts n more bytes for the pod and in total.
func (p *podCalls) add(n int64, total *int64) {
	p.bytes += n
	*total += n
}

// Dropped is how many pods' transcripts were dropped to keep within
// MaxPods and MaxBytes (not those Forget dropped: their pods were gone).
func (s *Store) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Bytes is the memory the transcripts hold, as counted against MaxBytes.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
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
			c := &p.calls[i]
			p.add(-callSize(c), &s.bytes)
			c.Stdin = string(Redact([]byte(c.Stdin), keys))
			p.add(callSize(c), &s.bytes)
		}
	}
}

func (s *Store) redactKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.RedactKeys
}

// dropOldest forgets the pod written to least recently, but keep.
func (s *Store) dropOldest(keep string) {
	var oldest string
	var used uint64
	for id, p := range s.pods {
		if id != keep && (oldest == "" || p.used < used) {
			oldest, used = id, p.used
		}
	}
	if p, ok := s.pods[oldest]; ok {
		s.bytes -= p.bytes
		delete(s.pods, oldest)
		s.dropped++
	}
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
	if p, ok := s.pods[pod]; ok {
		s.bytes -= p.bytes
		delete(s.pods, pod)
	}
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
