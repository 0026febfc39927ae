// Package imagefetch turns an image URI (file://, http(s)://, docker:// or a
// bare appc name) into a verified, unpacked image in a content-addressed
// store, and never fetches what it already has.
package imagefetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/imagefetch/imageref"
)

// Defaults for Options left zero.
const (
	// DefaultMaxSize caps an image's size, compressed and uncompressed.
	DefaultMaxSize int64 = 2 << 30
	// DefaultFetchTimeout bounds one fetch: download, verification and
	// unpacking.
	DefaultFetchTimeout = 10 * time.Minute
)

// ErrFetchTimeout is wrapped when a fetch ran out of its FetchTimeout.
var ErrFetchTimeout = errors.New("fetch timed out")

// TrustedKey trusts the armored OpenPGP public key in KeyFile to sign ACIs
// whose name starts with Prefix ("" covers every name). It has the same
// fields as netconfig.TrustedKey, so one converts to the other.
type TrustedKey struct{ Prefix, KeyFile string }

// Options configure a Fetcher.
type Options struct {
	Dir                string   // store root, normally <state_dir>/images
	InsecureRegistries []string // "host[:port]": plain HTTP or unverified TLS allowed
	TrustedKeys        []TrustedKey
	// SignaturePolicy is the path of a containers-policy.json that judges
	// docker:// images and OCI layouts; read by New (and SetTrust).
	SignaturePolicy string
	// RegistriesDir is a containers-registries.d directory: where
	// signatures of docker:// images are looked up. "" → none.
	RegistriesDir string
	// Verify is the mode of fetches that do not say; "" → VerifyRequired
	// when trusted keys or a signature policy are set (now: SetTrust may
	// change them), else VerifyNone.
	Verify            Verify
	InsecureDiscovery bool // allow plain-HTTP appc discovery
	// MaxSize caps what a fetch downloads or reads (compressed bytes) and
	// what it unpacks (uncompressed tar bytes, all layers together);
	// 0 → DefaultMaxSize.
	MaxSize int64
	// FetchTimeout bounds each fetch; 0 → DefaultFetchTimeout.
	FetchTimeout time.Duration
	HTTPClient   *http.Client // nil → a client with timeouts over system roots
	Logger       logrus.FieldLogger
}

// Fetcher fetches images into its store. It is safe for concurrent use.
type Fetcher struct {
	opts   Options
	store  *store
	log    logrus.FieldLogger
	client *http.Client
	// trustMu guards keys and policy, which SetTrust replaces.
	trustMu sync.RWMutex
	keys    []trustedKeyRing
	policy  *signaturePolicy // nil without a signature policy
	flight  flightGroup
	// readIdle aborts an HTTP download that makes no progress for this
	// long: defaultReadIdle, less in a test of this package.
	readIdle time.Duration
	// beforeUnpack, set only by a test of this package, runs between an
	// ACI's verification and its unpacking with the path of the private
	// copy it unpacks from: the worst moment to swap files.
	beforeUnpack func(file string)
}

type trustedKeyRing struct {
	prefix string
	ring   openpgp.EntityList
}

// New opens (creating if needed) the store in opts.Dir, removes temp
// directories left by fetches that were killed, and loads the trusted keys
// and the signature policy.
func New(opts Options) (*Fetcher, error) {
	if opts.Verify != "" {
		if err := checkVerify(opts.Verify); err != nil {
			return nil, err
		}
	}
	if opts.MaxSize <= 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	log := opts.Logger
	if log == nil {
		log = logrus.StandardLogger()
	}
	st, err := openStore(opts.Dir)
	if err != nil {
		return nil, err
	}
	f := &Fetcher{opts: opts, store: st, log: log.WithField("component", "imagefetch"), readIdle: defaultReadIdle}
	f.client = newHTTPClient(opts.HTTPClient)
	if err := f.SetTrust(opts.TrustedKeys, opts.SignaturePolicy); err != nil {
		return nil, err
	}
	return f, nil
}

// SetTrust replaces the trusted keys and the signature policy (kurmad's
// reload): fetches that start later are judged by them, and a fetch that
// names no verify mode (with Options.Verify "") is "required" when either
// is set, else "none". Images in the store keep the verification they
// were fetched with. A key or policy that cannot be read changes nothing.
func (f *Fetcher) SetTrust(keys []TrustedKey, policyPath string) error {
	var rings []trustedKeyRing
	for _, k := range keys {
		b, err := os.Open(k.KeyFile)
		if err != nil {
			return fmt.Errorf("trusted key for %q: %w", k.Prefix, err)
		}
		ring, err := openpgp.ReadArmoredKeyRing(b)
		b.Close()
		if err != nil {
			return fmt.Errorf("trusted key for %q: %s: %w", k.Prefix, k.KeyFile, err)
		}
		rings = append(rings, trustedKeyRing{prefix: k.Prefix, ring: ring})
	}
	var policy *signaturePolicy
	if policyPath != "" {
		var err error
		if policy, err = loadPolicy(policyPath); err != nil {
			return err
		}
	}
	f.trustMu.Lock()
	f.keys, f.policy = rings, policy
	f.trustMu.Unlock()
	return nil
}

// CheckTrustedKey says what is wrong with the key file a trusted_keys
// entry names: nil when SetTrust takes it (an armored OpenPGP public key
// ring).
func CheckTrustedKey(path string) error {
	b, err := os.Open(path)
	if err != nil {
		return err
	}
	defer b.Close()
	if _, err := openpgp.ReadArmoredKeyRing(b); err != nil {
		return fmt.Errorf("not an armored OpenPGP public key: %w", err)
	}
	return nil
}

// SwapTrust is SetTrust that also returns how to put the trust it
// replaced back (undo): for a reload whose networks fail to apply after
// the trust changed, so that both or neither take effect. Reloads are
// one at a time (SwapTrust and undo are not atomic against another
// SetTrust).
func (f *Fetcher) SwapTrust(keys []TrustedKey, policyPath string) (undo func(), err error) {
	f.trustMu.RLock()
	oldKeys, oldPolicy := f.keys, f.policy
	f.trustMu.RUnlock()
	if err := f.SetTrust(keys, policyPath); err != nil {
		return nil, err
	}
	return func() {
		f.trustMu.Lock()
		f.keys, f.policy = oldKeys, oldPolicy
		f.trustMu.Unlock()
	}, nil
}

// Fetch returns the image uri names, fetching, verifying and unpacking it
// unless the store already has it in a form that meets opts. Concurrent
// calls for the same uri and options share one download; only the first
// caller's progress callback is used.
func (f *Fetcher) Fetch(ctx context.Context, uri string, opts ...FetchOption) (*Image, error) {
	r, err := f.newRequest(opts)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", uri, err)
	}
	img, err := f.flight.do(ctx, r.flightKey(uri), func(ctx context.Context) (*Image, error) {
		return f.fetchWithDeadline(ctx, uri, r)
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", uri, err)
	}
	return img, nil
}

// FetchWithProgress is Fetch(ctx, uri, WithProgress(progress)).
func (f *Fetcher) FetchWithProgress(ctx context.Context, uri string, progress func(done, total int64)) (*Image, error) {
	return f.Fetch(ctx, uri, WithProgress(progress))
}

// Get returns a stored image by ID.
func (f *Fetcher) Get(id string) (*Image, error) { return f.store.get(id) }

// List returns every stored image, ordered by ID.
func (f *Fetcher) List() ([]*Image, error) { return f.store.list() }

// Remove deletes an image and every ref naming it. It does not check
// whether the image is in use: that is the caller's business.
func (f *Fetcher) Remove(id string) error { return f.store.remove(id) }

// errFetchDeadline is the cause of a fetch's context ending at its
// FetchTimeout, told apart from a caller giving up.
var errFetchDeadline = errors.New("fetch deadline")

// fetchWithDeadline is fetch under Options.FetchTimeout.
func (f *Fetcher) fetchWithDeadline(ctx context.Context, uri string, r request) (*Image, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, f.opts.FetchTimeout, errFetchDeadline)
	defer cancel()
	img, err := f.fetch(ctx, uri, r)
	if err != nil && errors.Is(context.Cause(ctx), errFetchDeadline) {
		return nil, fmt.Errorf("%w after %s: %w", ErrFetchTimeout, f.opts.FetchTimeout, err)
	}
	return img, err
}

// fetch fetches uri by its scheme: one case per imageref.Schemes (and
// appc discovery for a name without one).
func (f *Fetcher) fetch(ctx context.Context, uri string, r request) (*Image, error) {
	scheme, _, hasScheme := imageref.Split(uri)
	if !hasScheme {
		if imageref.MissingSlashes(uri) {
			s, _, _ := strings.Cut(uri, ":")
			return nil, fmt.Errorf("want %s:// followed by an absolute reference", s)
		}
		// No scheme: an appc name such as example.com/kurma/x:1.0,os=linux.
		return f.fetchDiscovery(ctx, uri, r)
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("bad URI: %w", err)
	}
	sc, _ := imageref.Lookup(scheme)
	switch sc.Name {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("file URI with host %q: only local files are supported", u.Host)
		}
		if u.Path == "" {
			return nil, errors.New("file URI without a path")
		}
		return f.fetchFile(ctx, uri, u.Path, r)
	case "http", "https":
		return f.fetchHTTP(ctx, uri, u, r)
	case "docker":
		return f.fetchDocker(ctx, uri, r)
	case "oci-archive":
		return f.fetchOCIArchive(ctx, uri, u, r)
	default:
		return nil, fmt.Errorf("unsupported scheme %q (want %s or an appc name)", u.Scheme, strings.Join(imageref.SchemeNames(), ", "))
	}
}

// stored returns the image the store remembers for key, and the ref, when
// it meets r; otherwise the fetch must get and verify the image again.
func (f *Fetcher) stored(key string, r request) (*Image, ref, bool) {
	prev, ok := f.store.lookup(key)
	if !ok {
		return nil, ref{}, false
	}
	img, err := f.store.get(prev.ID)
	if err != nil {
		return nil, prev, false
	}
	if err := f.checkStored(r, img); err != nil {
		f.log.WithFields(map[string]any{"image": img.Name, "id": img.ID, "source": key, "reason": err.Error()}).
			Info("stored image does not meet this fetch's verify mode; fetching it again")
		return nil, prev, false
	}
	return img, prev, true
}

// isVerificationError reports whether err refuses an image (a signature,
// digest, name or hostile content) rather than failing to reach it: a
// stored copy must never stand in for an image that was refused.
func isVerificationError(err error) bool {
	return errors.Is(err, ErrSignature) || errors.Is(err, ErrDigestMismatch) ||
		errors.Is(err, ErrImageName) || errors.Is(err, ErrHostile)
}

// ErrInsecureRedirect is wrapped when an https:// request (an image, its
// signature, appc discovery) is redirected to plain http://.
var ErrInsecureRedirect = errors.New("redirect from https to http refused")

// newHTTPClient returns the injected client with bounded redirects, or a
// default one with connect/header timeouts over the system roots. Either
// refuses a redirect from https to http.
func newHTTPClient(c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   15 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		}}
	}
	cc := *c
	next := cc.CheckRedirect
	if next == nil {
		next = func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return fmt.Errorf("stopped after %d redirects", len(via))
			}
			return nil
		}
	}
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme == "http" && slices.ContainsFunc(via, func(r *http.Request) bool { return r.URL.Scheme == "https" }) {
			return fmt.Errorf("%w: %s to %s", ErrInsecureRedirect, via[len(via)-1].URL.Redacted(), req.URL.Redacted())
		}
		return next(req, via)
	}
	return &cc
}

// copyWithProgress copies src to dst, reporting at most once a second or
// every 10% and calling progress after each report and at the end.
func (f *Fetcher) copyWithProgress(dst io.Writer, src io.Reader, total int64, what string, progress func(done, total int64)) (int64, error) {
	p := newProgress(f.log.WithField("image", what), total, progress)
	n, err := io.Copy(dst, io.TeeReader(src, p))
	p.finish()
	return n, err
}
