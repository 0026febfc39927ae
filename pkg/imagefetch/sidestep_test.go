package imagefetch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/internal/testutil"
)

// The ways around a network's trust settings, each refused.

// Two keys trusted for the prefixes a.example/ and b.example/: an image
// named b.example/x and signed by b's key, served where a network whose
// image_name is a.example/x fetches its image, is refused, and the reason
// names both names. (Without image_name the key would be chosen by the
// name the image gives itself and it would pass: netconfig refuses such a
// config at load, TestImageNameRequiredWithPrefixedKeys.)
func TestPrefixScopedKeysCannotSwapImages(t *testing.T) {
	keys := t.TempDir()
	_, aFile := testutil.SigningKey(t, keys, "a")
	b, bFile := testutil.SigningKey(t, keys, "b")
	trusted := []TrustedKey{{Prefix: "a.example/", KeyFile: aFile}, {Prefix: "b.example/", KeyFile: bFile}}
	body := aciNamed(t, "b.example/x", testRootfs)
	asc := testutil.DetachSign(t, b, body)

	mux := http.NewServeMux()
	mux.HandleFunc("/a/x.aci", func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
	mux.HandleFunc("/a/x.aci.asc", func(w http.ResponseWriter, r *http.Request) { w.Write(asc) })
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	file := signedFile(t, dir, "x.aci", body, b)

	for _, uri := range []string{srv.URL + "/a/x.aci", "file://" + file} {
		f := newTestFetcher(t, Options{HTTPClient: srv.Client(), TrustedKeys: trusted})
		_, err := f.Fetch(context.Background(), uri, WithVerify(VerifyRequired), WithImageName("a.example/x"))
		if !errors.Is(err, ErrImageName) || !strings.Contains(err.Error(), `"b.example/x"`) || !strings.Contains(err.Error(), `"a.example/x"`) {
			t.Errorf("%s: %v; want ErrImageName naming b.example/x and a.example/x", uri, err)
		}
		if imgs, _ := f.List(); len(imgs) != 0 {
			t.Errorf("%s: refused image stored", uri)
		}
		// The same image for the network it was made for passes.
		if _, err := f.Fetch(context.Background(), uri, WithVerify(VerifyRequired), WithImageName("b.example/x")); err != nil {
			t.Errorf("%s as b.example/x: %v", uri, err)
		}
	}
}

// Discovery of example.com/kurma/test:2.0 answered (at the URL discovery
// resolves that version to) with the validly signed 1.0 image is refused:
// the requested version, os and arch must be the manifest's.
func TestDiscoveryRefusesOtherLabels(t *testing.T) {
	keys := t.TempDir()
	good, goodKey := testutil.SigningKey(t, keys, "good")
	body := testACI(t) // version 1.0, linux, amd64
	srv := newDiscoveryServer(t, true)
	srv.serveTemplate("example.com/kurma")
	for _, p := range []string{"/example.com/kurma/test-2.0-linux-amd64.aci", "/example.com/kurma/test-1.0-linux-arm64.aci"} {
		srv.put(p, body)
		srv.put(p+".asc", testutil.DetachSign(t, good, body))
	}
	trusted := []TrustedKey{{Prefix: "example.com/kurma", KeyFile: goodKey}}
	for _, tt := range []struct{ name, label string }{
		{"example.com/kurma/test:2.0", `version: "1.0", asked for "2.0"`},
		{"example.com/kurma/test:1.0,arch=arm64", `arch: "amd64", asked for "arm64"`},
	} {
		f := newTestFetcher(t, Options{HTTPClient: srv.client, TrustedKeys: trusted})
		_, err := f.Fetch(context.Background(), tt.name)
		if !errors.Is(err, ErrImageName) || !strings.Contains(err.Error(), tt.label) {
			t.Errorf("%s: %v; want ErrImageName saying %s", tt.name, err, tt.label)
		}
		if imgs, _ := f.List(); len(imgs) != 0 {
			t.Errorf("%s: refused image stored", tt.name)
		}
	}
}

// An https image server (or discovery host) that redirects to plain http
// is refused: whoever is on the path could answer the second request.
func TestHTTPSRedirectToHTTPRefused(t *testing.T) {
	plain := newACIServer(t, false, testACI(t))
	mux := http.NewServeMux()
	mux.HandleFunc("/x.aci", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/test.aci", http.StatusFound)
	})
	secure := httptest.NewTLSServer(mux)
	t.Cleanup(secure.Close)
	f := newTestFetcher(t, Options{HTTPClient: secure.Client()})
	_, err := f.Fetch(context.Background(), secure.URL+"/x.aci", WithVerify(VerifyNone))
	if !errors.Is(err, ErrInsecureRedirect) {
		t.Errorf("image: %v; want ErrInsecureRedirect", err)
	}
	if plain.hits.Load() != 0 {
		t.Errorf("the plain http server was asked %d times", plain.hits.Load())
	}

	disc := newDiscoveryServer(t, true)
	disc.mu.Lock()
	disc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.com/elsewhere?ac-discovery=1", http.StatusFound)
	})
	disc.mu.Unlock()
	f = newTestFetcher(t, Options{HTTPClient: disc.client})
	_, err = f.Fetch(context.Background(), "example.com/kurma/test:1.0")
	if !errors.Is(err, ErrInsecureRedirect) {
		t.Errorf("discovery: %v; want ErrInsecureRedirect", err)
	}
}

// An unpinned plain http:// image runs unchecked only with the network's
// own "verify": "none" (WithPlainHTTPConsent): under the default "none" it
// is refused before anything is downloaded, under "if-signed" it must be
// signed; a pinned one needs nothing more.
func TestPlainHTTPNeedsConsentOrSignature(t *testing.T) {
	keys := t.TempDir()
	good, goodKey := testutil.SigningKey(t, keys, "good")
	body := testACI(t)
	srv := newACIServer(t, false, body)
	uri := srv.URL + "/test.aci"
	trusted := []TrustedKey{{Prefix: "example.com/kurma", KeyFile: goodKey}}

	f := newTestFetcher(t, Options{})
	if _, err := f.Fetch(context.Background(), uri); !errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), `"verify": "none" in the network itself`) {
		t.Errorf("default none: %v; want ErrSignature with the hint", err)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("downloaded %d times before refusing", n)
	}
	f = newTestFetcher(t, Options{TrustedKeys: trusted})
	if _, err := f.Fetch(context.Background(), uri, WithVerify(VerifyIfSigned)); !errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), "has no signature") {
		t.Errorf("if-signed, unsigned: %v; want ErrSignature", err)
	}
	if imgs, _ := f.List(); len(imgs) != 0 {
		t.Errorf("unsigned image stored")
	}
	if _, err := f.Fetch(context.Background(), uri, WithVerify(VerifyNone), WithPlainHTTPConsent()); err != nil {
		t.Errorf("the network's own none: %v", err)
	}
	img, err := newTestFetcher(t, Options{}).Fetch(context.Background(), uri, WithVerify(VerifyNone), WithPlainHTTPConsent())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newTestFetcher(t, Options{}).Fetch(context.Background(), uri+"#"+img.ID); err != nil {
		t.Errorf("pinned: %v", err)
	}

	signed := http.NewServeMux()
	signed.HandleFunc("/test.aci", func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
	signed.HandleFunc("/test.aci.asc", func(w http.ResponseWriter, r *http.Request) { w.Write(testutil.DetachSign(t, good, body)) })
	ssrv := httptest.NewServer(signed)
	t.Cleanup(ssrv.Close)
	if _, err := newTestFetcher(t, Options{TrustedKeys: trusted}).Fetch(context.Background(), ssrv.URL+"/test.aci", WithVerify(VerifyIfSigned)); err != nil {
		t.Errorf("if-signed, signed: %v", err)
	}
}
