package k8snode

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestResolve: a tag on a real registry (TLS with a CA of its own, basic
// auth) resolves to the digest it points to now, trusting the CA in
// kurmad's certs.d and with the pull secret's credentials; after the tag
// moves, it resolves to the new digest; wrong credentials are a 401
// naming the pull secret; a digest reference needs no resolving.
func TestResolve(t *testing.T) {
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "kurma" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	certs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(certs, host), 0o700); err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(certs, host, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	push := func() string {
		img, err := random.Image(512, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := name.ParseReference(host + "/kurma/net:v1")
		if err := remote.Write(ref, img, remote.WithTransport(srv.Client().Transport),
			remote.WithAuth(&authn.Basic{Username: "kurma", Password: "s3cret"})); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d.String()
	}
	r := &Resolver{CertsDir: certs}
	good := []byte(`{"auths": {"` + host + `": {"auth": "a3VybWE6czNjcmV0"}}}`) // kurma:s3cret
	image := "docker://" + host + "/kurma/net:v1"
	if !NeedsResolving(image) || NeedsResolving("docker://"+host+"/kurma/net@sha256:"+strings.Repeat("0", 64)) || NeedsResolving("file:///x.aci") {
		t.Error("NeedsResolving: only a docker:// reference by tag needs resolving")
	}
	for i := 0; i < 2; i++ {
		want := push()
		got, err := r.Resolve(context.Background(), image, good)
		if err != nil || got != "docker://"+host+"/kurma/net@"+want {
			t.Errorf("push %d: resolved %q (%v), want the digest %s", i, got, err, want)
		}
	}
	bad := []byte(`{"auths": {"` + host + `": {"username": "kurma", "password": "wrong"}}}`)
	if _, err := r.Resolve(context.Background(), image, bad); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "spec.imagePullSecret") {
		t.Errorf("wrong credentials: %v, want a 401 naming spec.imagePullSecret", err)
	}
	if _, err := (&Resolver{}).Resolve(context.Background(), image, good); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a registry whose CA is not trusted: %v, want a certificate error", err)
	}
}
