package imagefetch

import (
	"archive/tar"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/kurma-project/kurma/internal/testutil"
)

// discoveryServer is a loopback HTTPS server that every host name resolves
// to (through the client's dialer), serving appc discovery meta tags, ACIs
// and their signatures.
type discoveryServer struct {
	*httptest.Server
	client *http.Client
	mu     sync.Mutex
	files  map[string][]byte // path → body
	meta   string            // the HTML served for ?ac-discovery=1
}

// newDiscoveryServer starts it with TLS (a cert for example.com and
// kurma.dev, trusted by client) or plain HTTP.
func newDiscoveryServer(t *testing.T, tlsOn bool) *discoveryServer {
	t.Helper()
	d := &discoveryServer{files: map[string][]byte{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if r.URL.Query().Get("ac-discovery") == "1" {
			fmt.Fprint(w, d.meta)
			return
		}
		b, ok := d.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	})
	d.Server = httptest.NewUnstartedServer(h)
	pool := x509.NewCertPool()
	if tlsOn {
		cert, der := selfSigned(t, "example.com", "kurma.dev")
		d.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		d.StartTLS()
		c, _ := x509.ParseCertificate(der)
		pool.AddCert(c)
	} else {
		d.Start()
	}
	t.Cleanup(d.Close)
	addr := d.Listener.Addr().String()
	d.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
	return d
}

// serveTemplate makes the meta tag point at this server.
func (d *discoveryServer) serveTemplate(prefix string) {
	scheme := "https"
	if d.TLS == nil {
		scheme = "http"
	}
	d.meta = fmt.Sprintf(`<html><head><meta name="ac-discovery" content="%s %s://127.0.0.1:%d/{name}-{version}-{os}-{arch}.{ext}"></head></html>`,
		prefix, scheme, d.Listener.Addr().(*net.TCPAddr).Port)
}

func (d *discoveryServer) put(path string, b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.files[path] = b
}

func selfSigned(t *testing.T, names ...string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kurma test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		DNSNames:              names,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, der
}

const aciPath = "/example.com/kurma/test-1.0-linux-amd64.aci"

func TestDiscoveryAndSignatures(t *testing.T) {
	keys := t.TempDir()
	good, goodKey := testutil.SigningKey(t, keys, "good")
	other, _ := testutil.SigningKey(t, keys, "other")
	body := testACI(t)

	srv := newDiscoveryServer(t, true)
	srv.serveTemplate("example.com/kurma")
	srv.put(aciPath, body)

	t.Run("unsigned, no trusted key", func(t *testing.T) {
		log, hook := logtest.NewNullLogger()
		f := newTestFetcher(t, Options{HTTPClient: srv.client, Logger: log})
		img, err := f.Fetch(context.Background(), "example.com/kurma/test:1.0")
		if err != nil {
			t.Fatal(err)
		}
		wantTree(t, img.Rootfs, testTree...)
		found := false
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "was not signature-checked") {
				found = true
			}
		}
		if !found {
			t.Fatal("no 'not signature-checked' warning logged")
		}
	})

	cases := []struct {
		name string
		asc  []byte // nil: no .asc served
		ok   bool
	}{
		{name: "good signature", asc: testutil.DetachSign(t, good, body), ok: true},
		{name: "signature over other content", asc: testutil.DetachSign(t, good, append([]byte("x"), body...))},
		{name: "signed by an untrusted key", asc: testutil.DetachSign(t, other, body)},
		{name: "garbage signature", asc: []byte("-----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----\n")},
		{name: "no signature", asc: nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv.mu.Lock()
			delete(srv.files, aciPath+".asc")
			srv.mu.Unlock()
			if c.asc != nil {
				srv.put(aciPath+".asc", c.asc)
			}
			f := newTestFetcher(t, Options{HTTPClient: srv.client, TrustedKeys: []TrustedKey{{Prefix: "example.com/kurma", KeyFile: goodKey}}})
			img, err := f.Fetch(context.Background(), "example.com/kurma/test:1.0")
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				wantTree(t, img.Rootfs, testTree...)
				return
			}
			if !errors.Is(err, ErrSignature) {
				t.Fatalf("%v, want ErrSignature", err)
			}
			if imgs, _ := f.List(); len(imgs) != 0 {
				t.Fatal("unverified image stored")
			}
		})
	}

	t.Run("trusted key applies to https ACI by name", func(t *testing.T) {
		srv.mu.Lock()
		delete(srv.files, aciPath+".asc")
		srv.mu.Unlock()
		f := newTestFetcher(t, Options{HTTPClient: srv.client, TrustedKeys: []TrustedKey{{Prefix: "example.com/", KeyFile: goodKey}}})
		_, err := f.Fetch(context.Background(), srv.URL+aciPath)
		if !errors.Is(err, ErrSignature) {
			t.Fatalf("%v, want ErrSignature", err)
		}
	})

	t.Run("unknown name", func(t *testing.T) {
		f := newTestFetcher(t, Options{HTTPClient: srv.client})
		_, err := f.Fetch(context.Background(), "example.com/kurma/nothere:1.0")
		if err == nil || !strings.Contains(err.Error(), "example.com/kurma/nothere") {
			t.Fatalf("%v, want an error naming the image", err)
		}
	})
}

func TestDiscoveryPlainHTTP(t *testing.T) {
	srv := newDiscoveryServer(t, false)
	srv.serveTemplate("example.com/kurma")
	srv.put(aciPath, testACI(t))

	f := newTestFetcher(t, Options{HTTPClient: srv.client})
	if _, err := f.Fetch(context.Background(), "example.com/kurma/test:1.0"); err == nil {
		t.Fatal("plain-HTTP discovery accepted without insecure_discovery")
	}
	f = newTestFetcher(t, Options{HTTPClient: srv.client, InsecureDiscovery: true})
	img, err := f.Fetch(context.Background(), "example.com/kurma/test:1.0")
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, img.Rootfs, testTree...)
}

func TestACIDependencies(t *testing.T) {
	baseManifest := `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/kurma/base",
"labels":[{"name":"version","value":"1.0"},{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}]}`
	base := tarBytes(t, aciEntries(baseManifest, []entry{
		{Name: "lib", Type: tar.TypeDir},
		{Name: "lib/base.so", Body: "base"},
		{Name: "etc", Type: tar.TypeDir},
		{Name: "etc/hosts", Body: "from base"},
	}))
	appManifest := func(deps string) string {
		return `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/kurma/app",
"labels":[{"name":"version","value":"1.0"},{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],
"app":{"exec":["/bin/plugin"],"user":"0","group":"0"},"dependencies":` + deps + `}`
	}
	app := tarBytes(t, aciEntries(appManifest(`[{"imageName":"example.com/kurma/base","labels":[{"name":"version","value":"1.0"}]}]`), testRootfs))
	src := t.TempDir()

	t.Run("from the store", func(t *testing.T) {
		f := newTestFetcher(t, Options{})
		if _, err := f.Fetch(context.Background(), "file://"+writeFile(t, src, "base.aci", base)); err != nil {
			t.Fatal(err)
		}
		img, err := f.Fetch(context.Background(), "file://"+writeFile(t, src, "app.aci", app))
		if err != nil {
			t.Fatal(err)
		}
		wantTree(t, img.Rootfs, append(testTree[:len(testTree):len(testTree)], "lib d", "lib/base.so f")...)
		b, _ := os.ReadFile(filepath.Join(img.Rootfs, "etc/hosts"))
		if string(b) != "127.0.0.1 localhost\n" {
			t.Fatalf("etc/hosts %q: the image must be laid over its dependency", b)
		}
	})
	t.Run("by discovery", func(t *testing.T) {
		srv := newDiscoveryServer(t, true)
		srv.serveTemplate("example.com/kurma")
		srv.put("/example.com/kurma/base-1.0-linux-amd64.aci", base)
		f := newTestFetcher(t, Options{HTTPClient: srv.client})
		img, err := f.Fetch(context.Background(), "file://"+writeFile(t, src, "app2.aci", app))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(img.Rootfs, "lib/base.so")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		srv := newDiscoveryServer(t, true)
		srv.serveTemplate("example.com/kurma")
		f := newTestFetcher(t, Options{HTTPClient: srv.client})
		miss := tarBytes(t, aciEntries(appManifest(`[{"imageName":"example.com/kurma/missing"}]`), testRootfs))
		_, err := f.Fetch(context.Background(), "file://"+writeFile(t, src, "app3.aci", miss))
		if err == nil || !strings.Contains(err.Error(), `dependency "example.com/kurma/missing"`) {
			t.Fatalf("%v, want an error naming the missing dependency", err)
		}
	})
}
