package imagefetch

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kurma-project/kurma/internal/testutil"
)

// aciServer serves the test ACI under several paths and counts hits.
type aciServer struct {
	*httptest.Server
	body []byte
	hits atomic.Int64
	hold chan struct{} // when set, /test.aci answers once it is closed
}

func newACIServer(t *testing.T, tlsOn bool, body []byte) *aciServer {
	t.Helper()
	s := &aciServer{body: body}
	mux := http.NewServeMux()
	mux.HandleFunc("/test.aci", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if s.hold != nil {
			<-s.hold
		}
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write(s.body)
	})
	mux.HandleFunc("/redirect1", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/redirect2", http.StatusFound)
	})
	mux.HandleFunc("/redirect2", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/test.aci", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/truncated.aci", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(s.body)))
		w.Write(s.body[:len(s.body)/2])
		// Returning closes the connection short of Content-Length.
		if hj, ok := w.(http.Hijacker); ok {
			c, _, err := hj.Hijack()
			if err == nil {
				c.Close()
			}
		}
	})
	if tlsOn {
		s.Server = httptest.NewTLSServer(mux)
	} else {
		s.Server = httptest.NewServer(mux)
	}
	t.Cleanup(s.Close)
	return s
}

func TestHTTPFetch(t *testing.T) {
	body := testACI(t)
	rawSum := sha512.Sum512(tarBytes(t, aciEntries(testManifest, testRootfs)))
	id := "sha512-" + hex.EncodeToString(rawSum[:])
	wrong := "sha512-" + strings.Repeat("0", 128)
	for _, tlsOn := range []bool{false, true} {
		name := "http"
		if tlsOn {
			name = "https"
		}
		t.Run(name, func(t *testing.T) {
			srv := newACIServer(t, tlsOn, body)
			f := newTestFetcher(t, Options{HTTPClient: srv.Client()})
			cases := []struct {
				path    string
				wantErr error
				errText string
			}{
				{path: "/test.aci"},
				{path: "/redirect1"},
				{path: "/test.aci#" + id},
				{path: "/missing.aci", wantErr: ErrHTTPStatus, errText: "404"},
				{path: "/truncated.aci", errText: "unexpected EOF"},
				{path: "/loop", errText: "redirects"},
				{path: "/redirect1#" + wrong, wantErr: ErrDigestMismatch},
				{path: "/test.aci#sha512-abc", errText: "digest pin"},
			}
			for _, c := range cases {
				img, err := f.Fetch(context.Background(), srv.URL+c.path, WithPlainHTTPConsent())
				if c.wantErr == nil && c.errText == "" {
					if err != nil {
						t.Fatalf("%s: %v", c.path, err)
					}
					if img.ID != id {
						t.Fatalf("%s: ID %s", c.path, img.ID)
					}
					wantTree(t, img.Rootfs, testTree...)
					continue
				}
				if err == nil {
					t.Fatalf("%s: fetched, want an error", c.path)
				}
				if c.wantErr != nil && !errors.Is(err, c.wantErr) {
					t.Fatalf("%s: %v, want %v", c.path, err, c.wantErr)
				}
				if !strings.Contains(err.Error(), c.errText) {
					t.Fatalf("%s: %v, want it to mention %q", c.path, err, c.errText)
				}
			}
		})
	}
}

// TestHTTPSUntrustedRefused: the default client verifies against the system
// roots, which do not include httptest's CA.
func TestHTTPSUntrustedRefused(t *testing.T) {
	srv := newACIServer(t, true, testACI(t))
	f := newTestFetcher(t, Options{})
	_, err := f.Fetch(context.Background(), srv.URL+"/test.aci", WithPlainHTTPConsent())
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted TLS: %v, want a certificate error", err)
	}
}

func TestHTTPSizeCap(t *testing.T) {
	srv := newACIServer(t, false, testACI(t))
	f := newTestFetcher(t, Options{MaxSize: 100})
	_, err := f.Fetch(context.Background(), srv.URL+"/test.aci", WithPlainHTTPConsent())
	if !errors.Is(err, ErrHostile) {
		t.Fatalf("over the cap: %v, want ErrHostile", err)
	}
}

func TestHTTPStoreHitServerStopped(t *testing.T) {
	srv := newACIServer(t, true, testACI(t))
	dir := t.TempDir()
	f := newTestFetcher(t, Options{Dir: dir, HTTPClient: srv.Client()})
	uri := srv.URL + "/test.aci"
	img, err := f.Fetch(context.Background(), uri, WithPlainHTTPConsent())
	if err != nil {
		t.Fatal(err)
	}
	// Fresh: a conditional GET answered 304, no download.
	if _, err := f.Fetch(context.Background(), uri, WithPlainHTTPConsent()); err != nil {
		t.Fatal(err)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("%d hits, want 2 (fetch + conditional GET)", n)
	}
	srv.Close()
	f2 := newTestFetcher(t, Options{Dir: dir, HTTPClient: srv.Client()})
	again, err := f2.Fetch(context.Background(), uri, WithPlainHTTPConsent())
	if err != nil {
		t.Fatalf("server stopped, image stored: %v", err)
	}
	if again.ID != img.ID {
		t.Fatalf("ID %s, want %s", again.ID, img.ID)
	}
	// A pinned URI is content-addressed: no request at all.
	if _, err := f2.Fetch(context.Background(), uri+"#"+img.ID); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentFetchDedupe(t *testing.T) {
	srv := newACIServer(t, false, testACI(t))
	srv.hold = make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(srv.hold) }) }) // also when the test fails early
	f := newTestFetcher(t, Options{HTTPClient: srv.Client()})
	uri := srv.URL + "/test.aci"
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img, err := f.Fetch(context.Background(), uri, WithPlainHTTPConsent())
			errs[i] = err
			if err == nil {
				ids[i] = img.ID
			}
		}()
	}
	// The download is held until all 8 wait for it.
	testutil.WaitFor(t, 10*time.Second, "8 fetches to wait for one download", func() error {
		f.flight.mu.Lock()
		defer f.flight.mu.Unlock()
		// One call in flight (its key is the URI plus the fetch's verify
		// mode and expected name), with every fetch waiting on it.
		if len(f.flight.calls) != 1 {
			return fmt.Errorf("%d calls in flight, want 1", len(f.flight.calls))
		}
		for _, c := range f.flight.calls {
			if c.waiters < len(ids) {
				return fmt.Errorf("%d waiters", c.waiters)
			}
		}
		return nil
	})
	release.Do(func() { close(srv.hold) })
	wg.Wait()
	for i := range ids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("different IDs: %v", ids)
		}
	}
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("%d downloads for 8 concurrent fetches, want 1", n)
	}
}

func TestProgressCallback(t *testing.T) {
	srv := newACIServer(t, false, testACI(t))
	f := newTestFetcher(t, Options{HTTPClient: srv.Client()})
	var last, total int64
	_, err := f.Fetch(context.Background(), srv.URL+"/test.aci", WithProgress(func(d, tot int64) { last, total = d, tot }), WithPlainHTTPConsent())
	if err != nil {
		t.Fatal(err)
	}
	if last != int64(len(srv.body)) || total != int64(len(srv.body)) {
		t.Fatalf("progress %d/%d, want %d/%d", last, total, len(srv.body), len(srv.body))
	}
}

func TestHTTPStalledDownloadTimesOut(t *testing.T) {
	body := testACI(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	f := newTestFetcher(t, Options{HTTPClient: srv.Client()})
	f.readIdle = 300 * time.Millisecond
	start := time.Now()
	_, err := f.Fetch(context.Background(), srv.URL+"/stall.aci", WithPlainHTTPConsent())
	if !errors.Is(err, errReadIdle) {
		t.Fatalf("%v, want a read timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}
