package imagefetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// defaultReadIdle aborts a download that makes no progress for this long.
const defaultReadIdle = 60 * time.Second

// maxSignatureSize bounds a downloaded .asc.
const maxSignatureSize = 64 << 10

var pinPattern = regexp.MustCompile(`^sha512-[0-9a-f]{128}$`)

// ErrHTTPStatus is wrapped when a server answers with an unexpected status.
var ErrHTTPStatus = errors.New("unexpected HTTP status")

// fetchHTTP fetches an ACI over http(s). The URI fragment may pin the image
// ID: "#sha512-<128 hex>", the sha512 of the uncompressed tar (the appc image
// ID), checked before anything is unpacked.
func (f *Fetcher) fetchHTTP(ctx context.Context, uri string, u *url.URL, r request) (*Image, error) {
	pin := u.Fragment
	if pin != "" && !pinPattern.MatchString(pin) {
		return nil, fmt.Errorf("digest pin %q: want sha512-<128 lowercase hex> (the image ID)", pin)
	}
	if pin != "" {
		// Content-addressed: a stored pinned image that meets r needs no
		// network at all. The store holds an ID only for content that
		// hashed to it when unpacked.
		if img, err := f.store.get(pin); err == nil && f.checkStored(r, img) == nil {
			return img, nil
		}
	}
	if u.Scheme == "http" && pin == "" && !r.plainHTTP {
		// Nothing but a signature could tell what arrives from what was
		// published: without the network's own "verify": "none", one is
		// required.
		if r.verify == VerifyNone {
			return nil, fmt.Errorf(`%w: %s is plain http:// without a #sha512- pin and verify is "none" by default, so nothing would check what arrives; pin it, sign it, use https://, or say "verify": "none" in the network itself`, ErrSignature, uri)
		}
		r.signatureRequired = true
	}
	fu := *u
	fu.Fragment = ""
	fu.RawFragment = ""
	return f.fetchACIURL(ctx, uri, fu.String(), fu.String()+".asc", pin, aciWant{}, r)
}

// aciWant is what a discovered ACI must be: the name and labels (version,
// os, arch, any other) it was discovered by.
type aciWant struct {
	name   string
	labels map[string]string
}

// fetchACIURL downloads an ACI into a store temp dir, with a conditional
// GET against what the store has for key when that meets r, and imports it
// from there; its .asc is fetched only when r's mode looks at signatures.
func (f *Fetcher) fetchACIURL(ctx context.Context, key, aciURL, ascURL, pin string, want aciWant, r request) (*Image, error) {
	stored, prev, _ := f.stored(key, r)
	tmp, err := f.store.tempDir("dl")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "image.aci")

	hdr := http.Header{}
	if stored != nil {
		if prev.ETag != "" {
			hdr.Set("If-None-Match", prev.ETag)
		}
		if prev.LastModified != "" {
			hdr.Set("If-Modified-Since", prev.LastModified)
		}
	}
	resp, err := f.download(ctx, aciURL, hdr, file, f.opts.MaxSize, r.progress)
	if err != nil {
		if stored != nil && ctx.Err() == nil && !isVerificationError(err) {
			f.log.WithFields(map[string]any{"image": stored.Name, "id": stored.ID, "source": key, "error": err.Error()}).
				Warn("image source unreachable; using the stored copy")
			return stored, nil
		}
		return nil, err
	}
	if resp.notModified {
		f.log.WithFields(map[string]any{"image": stored.Name, "id": stored.ID, "source": key}).Debug("store hit: not modified")
		return stored, nil
	}
	img, err := f.importACI(ctx, aciSource{
		uri:       key,
		file:      file,
		signature: func(ctx context.Context) ([]byte, error) { return f.getSignature(ctx, ascURL) },
		pin:       pin,
		want:      want,
	}, r)
	if err != nil {
		return nil, err
	}
	if err := f.store.setRef(key, ref{ID: img.ID, ETag: resp.etag, LastModified: resp.lastModified}); err != nil {
		return nil, err
	}
	return img, nil
}

type downloadResult struct {
	notModified        bool
	etag, lastModified string
}

// download GETs u into the file dst, refusing more than max bytes.
func (f *Fetcher) download(ctx context.Context, u string, hdr http.Header, dst string, max int64, progress func(done, total int64)) (*downloadResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified && len(hdr) > 0 {
		return &downloadResult{notModified: true}, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %w: %s", u, ErrHTTPStatus, resp.Status)
	}
	if resp.ContentLength > max {
		return nil, fmt.Errorf("GET %s: %w: %d bytes is over the %d-byte limit", u, ErrHostile, resp.ContentLength, max)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	body := &idleReader{r: resp.Body, timeout: f.readIdle, cancel: cancel}
	defer body.stop()
	lr := &capReader{r: body, max: max}
	n, err := f.copyWithProgress(out, lr, resp.ContentLength, u, progress)
	if err != nil {
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			err = c
		}
		return nil, fmt.Errorf("GET %s: after %d bytes: %w", u, n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return nil, fmt.Errorf("GET %s: truncated: %d of %d bytes: %w", u, n, resp.ContentLength, io.ErrUnexpectedEOF)
	}
	if err := out.Close(); err != nil {
		return nil, err
	}
	return &downloadResult{etag: resp.Header.Get("ETag"), lastModified: resp.Header.Get("Last-Modified")}, nil
}

// getSignature GETs a detached signature: errNoSignature when the server
// has none (404, 410), the body up to maxSignatureSize otherwise.
func (f *Fetcher) getSignature(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusGone:
		return nil, fmt.Errorf("GET %s: %s: %w", u, resp.Status, errNoSignature)
	default:
		return nil, fmt.Errorf("GET %s: %w: %s", u, ErrHTTPStatus, resp.Status)
	}
	return readSignature(resp.Body, u)
}

// readSignature reads a detached signature of at most maxSignatureSize.
func readSignature(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSignatureSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if int64(len(b)) > maxSignatureSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", what, maxSignatureSize)
	}
	return b, nil
}

// errReadIdle is the cause when a download stalls.
var errReadIdle = errors.New("read timed out: no data received")

// idleReader cancels the request when no data arrives within timeout.
type idleReader struct {
	r       io.Reader
	timeout time.Duration
	cancel  context.CancelCauseFunc
	timer   *time.Timer
}

func (r *idleReader) Read(p []byte) (int, error) {
	if r.timer == nil {
		r.timer = time.AfterFunc(r.timeout, func() {
			r.cancel(fmt.Errorf("%w for %s", errReadIdle, r.timeout))
		})
	} else {
		r.timer.Reset(r.timeout)
	}
	return r.r.Read(p)
}

func (r *idleReader) stop() {
	if r.timer != nil {
		r.timer.Stop()
	}
}
