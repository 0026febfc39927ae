package imagefetch

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/kurma-project/kurma/internal/testutil"
)

// aciNamed is the test ACI with another manifest name.
func aciNamed(t testing.TB, name string, rootfs []entry) []byte {
	m := strings.Replace(testManifest, `"name":"example.com/kurma/test"`, `"name":"`+name+`"`, 1)
	if m == testManifest && name != "example.com/kurma/test" {
		t.Fatal("testManifest has no name to replace")
	}
	return compress(t, tarBytes(t, aciEntries(m, rootfs)), "gzip")
}

// trustKeys are the keys of the trust tests: good is trusted for
// example.com/kurma, other for other.org, stranger for nothing.
type trustKeys struct {
	good, other, stranger *openpgp.Entity
	trusted               []TrustedKey
}

func newTrustKeys(t *testing.T) trustKeys {
	dir := t.TempDir()
	var k trustKeys
	var goodFile, otherFile string
	k.good, goodFile = testutil.SigningKey(t, dir, "good")
	k.other, otherFile = testutil.SigningKey(t, dir, "other")
	k.stranger, _ = testutil.SigningKey(t, dir, "stranger")
	k.trusted = []TrustedKey{{Prefix: "example.com/kurma", KeyFile: goodFile}, {Prefix: "other.org", KeyFile: otherFile}}
	return k
}

// signedFile writes body at dir/name and, when by is not nil, its detached
// signature at dir/name.asc.
func signedFile(t *testing.T, dir, name string, body []byte, by *openpgp.Entity) string {
	p := writeFile(t, dir, name, body)
	if by != nil {
		writeFile(t, dir, name+".asc", testutil.DetachSign(t, by, body))
	}
	return p
}

// TestACITrustRefusals: every way an ACI fails its network's trust rules
// is refused with the reason, and nothing is stored. The cases whose name
// no trusted key covers used to be accepted with a warning.
func TestACITrustRefusals(t *testing.T) {
	k := newTrustKeys(t)
	cases := []struct {
		name      string
		image     string // manifest name
		by        *openpgp.Entity
		opts      []FetchOption
		want      error
		msg       string
		trustKeys []TrustedKey
	}{
		{name: "under a trusted prefix, signed by the wrong key", image: "example.com/kurma/test", by: k.stranger,
			want: ErrSignature, msg: "signature does not verify with any trusted key"},
		{name: "under a trusted prefix, signed by a key trusted for another prefix", image: "example.com/kurma/test", by: k.other,
			want: ErrSignature, msg: `which is not trusted for names under "example.com/kurma"`},
		{name: "renamed out of every prefix, signed by the wrong key", image: "evil.example/net", by: k.stranger,
			want: ErrSignature, msg: "signature does not verify with any trusted key"},
		{name: "renamed out of every prefix, signed by a trusted key", image: "evil.example/net", by: k.good,
			want: ErrSignature, msg: `but no trusted key covers the name "evil.example/net"`},
		{name: "unsigned, verify required by default", image: "evil.example/net",
			want: ErrSignature, msg: "verify is required and file://"},
		{name: "unsigned, verify required", image: "example.com/kurma/test", opts: []FetchOption{WithVerify(VerifyRequired)},
			want: ErrSignature, msg: "has no signature"},
		{name: "named outside image_name, validly signed", image: "example.com/kurma/test", by: k.good,
			opts: []FetchOption{WithImageName("example.com/kurma/net")},
			want: ErrImageName, msg: `image is named "example.com/kurma/test", the network expects "example.com/kurma/net"`},
		{name: "named outside image_name, verify none", image: "example.com/kurma/test",
			opts: []FetchOption{WithVerify(VerifyNone), WithImageName("example.com/kurma/net")},
			want: ErrImageName, msg: "the network expects"},
		{name: "if-signed, signed by the wrong key", image: "example.com/kurma/test", by: k.stranger,
			opts: []FetchOption{WithVerify(VerifyIfSigned)}, want: ErrSignature, msg: "does not verify"},
		{name: "empty prefix: every name needs a signature", image: "anything.example/x",
			trustKeys: []TrustedKey{{Prefix: "", KeyFile: k.trusted[0].KeyFile}}, want: ErrSignature, msg: "has no signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := signedFile(t, t.TempDir(), "image.aci", aciNamed(t, c.image, testRootfs), c.by)
			keys := k.trusted
			if c.trustKeys != nil {
				keys = c.trustKeys
			}
			store := filepath.Join(t.TempDir(), "store")
			f := newTestFetcher(t, Options{Dir: store, TrustedKeys: keys})
			_, err := f.Fetch(context.Background(), "file://"+p, c.opts...)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("%v, want %v saying %q", err, c.want, c.msg)
			}
			if imgs, _ := f.List(); len(imgs) != 0 {
				t.Fatalf("refused image stored: %+v", imgs)
			}
			noTemp(t, store)
		})
	}
}

// TestACITrustAccepted: what the modes let through, and the record each
// image gets.
func TestACITrustAccepted(t *testing.T) {
	k := newTrustKeys(t)
	goodFPR := fingerprint(k.good)
	cases := []struct {
		name  string
		image string
		by    *openpgp.Entity
		opts  []FetchOption
		keys  []TrustedKey
		want  Verification
	}{
		{name: "signed by the key of its prefix", image: "example.com/kurma/test", by: k.good,
			want: Verification{Mode: VerifyRequired, Method: MethodSignature, Key: goodFPR}},
		{name: "empty prefix covers every name", image: "anything.example/x", by: k.good,
			keys: []TrustedKey{{Prefix: "", KeyFile: k.trusted[0].KeyFile}},
			want: Verification{Mode: VerifyRequired, Method: MethodSignature, Key: goodFPR}},
		{name: "image_name matches", image: "example.com/kurma/test", by: k.good, opts: []FetchOption{WithImageName("example.com/kurma/test")},
			want: Verification{Mode: VerifyRequired, Method: MethodSignature, Key: goodFPR}},
		{name: "if-signed, unsigned", image: "example.com/kurma/test", opts: []FetchOption{WithVerify(VerifyIfSigned)},
			want: Verification{Mode: VerifyIfSigned, Method: MethodNone}},
		{name: "if-signed, signed", image: "example.com/kurma/test", by: k.good, opts: []FetchOption{WithVerify(VerifyIfSigned)},
			want: Verification{Mode: VerifyIfSigned, Method: MethodSignature, Key: goodFPR}},
		{name: "none looks at nothing", image: "example.com/kurma/test", by: k.stranger, opts: []FetchOption{WithVerify(VerifyNone)},
			want: Verification{Mode: VerifyNone, Method: MethodNone}},
		{name: "no keys: none by default", image: "example.com/kurma/test", keys: []TrustedKey{},
			want: Verification{Mode: VerifyNone, Method: MethodNone}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := signedFile(t, t.TempDir(), "image.aci", aciNamed(t, c.image, testRootfs), c.by)
			keys := k.trusted
			if c.keys != nil {
				keys = c.keys
			}
			f := newTestFetcher(t, Options{TrustedKeys: keys})
			img, err := f.Fetch(context.Background(), "file://"+p, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			wantTree(t, img.Rootfs, testTree...)
			if img.Verified == nil || *img.Verified != c.want {
				t.Fatalf("verified %+v, want %+v", img.Verified, c.want)
			}
			again, err := f.Get(img.ID)
			if err != nil || again.Verified == nil || *again.Verified != c.want {
				t.Fatalf("image.json says %+v (%v), want %+v", again.Verified, err, c.want)
			}
		})
	}
}

// TestStoredImageMeetsTheFetch: an image stored under a weaker mode is not
// handed out by a short-cut (file unchanged, pinned ID, not modified) to a
// fetch that asks more; it is verified again, and its record raised.
func TestStoredImageMeetsTheFetch(t *testing.T) {
	k := newTrustKeys(t)
	dir := t.TempDir()
	body := testACI(t)
	p := signedFile(t, dir, "image.aci", body, nil)
	f := newTestFetcher(t, Options{TrustedKeys: k.trusted})
	uri := "file://" + p
	img, err := f.Fetch(context.Background(), uri, WithVerify(VerifyNone))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Fetch(context.Background(), uri); !errors.Is(err, ErrSignature) {
		t.Fatalf("unchanged file, stored unverified, fetched under required: %v, want ErrSignature", err)
	}
	writeFile(t, dir, "image.aci.asc", testutil.DetachSign(t, k.good, body))
	again, err := f.Fetch(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != img.ID || again.Verified.Method != MethodSignature {
		t.Fatalf("after signing: %s %+v, want %s verified by signature", again.ID, again.Verified, img.ID)
	}

	t.Run("pinned ID", func(t *testing.T) {
		srv := newACIServer(t, true, body)
		f := newTestFetcher(t, Options{HTTPClient: srv.Client(), TrustedKeys: k.trusted})
		pinned := srv.URL + "/test.aci#" + img.ID
		if _, err := f.Fetch(context.Background(), pinned, WithVerify(VerifyNone)); err != nil {
			t.Fatal(err)
		}
		hits := srv.hits.Load()
		_, err := f.Fetch(context.Background(), pinned)
		if !errors.Is(err, ErrSignature) {
			t.Fatalf("pinned, stored unverified, fetched under required: %v, want ErrSignature", err)
		}
		if srv.hits.Load() == hits {
			t.Fatal("the pinned short-cut answered a fetch its stored image does not meet")
		}
	})
}

// TestUnsignedDependencyRefused: under verify required, the app is signed
// but its dependency is not: the unsigned copy in the store is not used,
// discovery finds only an unsigned one, the app is refused.
func TestUnsignedDependencyRefused(t *testing.T) {
	k := newTrustKeys(t)
	baseManifest := `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/kurma/base",
"labels":[{"name":"version","value":"1.0"},{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}]}`
	base := tarBytes(t, aciEntries(baseManifest, []entry{{Name: "lib", Type: tar.TypeDir}, {Name: "lib/evil.so", Body: "unsigned"}}))
	appManifest := `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/kurma/app",
"labels":[{"name":"version","value":"1.0"},{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],
"app":{"exec":["/bin/plugin"],"user":"0","group":"0"},
"dependencies":[{"imageName":"example.com/kurma/base","labels":[{"name":"version","value":"1.0"}]}]}`
	app := tarBytes(t, aciEntries(appManifest, testRootfs))
	src := t.TempDir()
	appFile := signedFile(t, src, "app.aci", app, k.good)

	srv := newDiscoveryServer(t, true)
	srv.serveTemplate("example.com/kurma")
	srv.put("/example.com/kurma/base-1.0-linux-amd64.aci", base)
	f := newTestFetcher(t, Options{HTTPClient: srv.client, TrustedKeys: k.trusted})
	if _, err := f.Fetch(context.Background(), "file://"+signedFile(t, src, "base.aci", base, nil), WithVerify(VerifyNone)); err != nil {
		t.Fatal(err)
	}
	_, err := f.Fetch(context.Background(), "file://"+appFile)
	if !errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), `dependency "example.com/kurma/base"`) {
		t.Fatalf("%v, want the unsigned dependency refused", err)
	}
	if imgs, _ := f.List(); len(imgs) != 1 {
		t.Fatalf("%d images stored, want only the dependency fetched under none", len(imgs))
	}

	// Signed where discovery finds it: the app is laid over it.
	srv.put("/example.com/kurma/base-1.0-linux-amd64.aci.asc", testutil.DetachSign(t, k.good, base))
	img, err := f.Fetch(context.Background(), "file://"+appFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Dependencies) != 1 || img.Verified.Mode != VerifyRequired {
		t.Fatalf("dependencies %v, verified %+v", img.Dependencies, img.Verified)
	}
	dep, err := f.Get(img.Dependencies[0])
	if err != nil || dep.Verified.Method != MethodSignature {
		t.Fatalf("dependency %+v (%v), want it verified by signature", dep, err)
	}
}

// TestFileACISwappedDuringFetch: the ACI is swapped between its
// verification and its unpacking. Swapping the user's file changes nothing
// (kurma unpacks its own copy); tampering with that copy is caught by the
// hash of what is unpacked. Either way the swapped content is never
// committed under the signed image's ID.
func TestFileACISwappedDuringFetch(t *testing.T) {
	k := newTrustKeys(t)
	good := testACI(t)
	evil := aciNamed(t, "example.com/kurma/test", append(testRootfs[:len(testRootfs):len(testRootfs)], entry{Name: "evil", Body: "swapped in"}))
	cases := []struct {
		name    string
		target  func(user, private string) string
		wantErr error
	}{
		{"the user's file", func(user, _ string) string { return user }, nil},
		{"kurma's private copy", func(_, private string) string { return private }, ErrDigestMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := signedFile(t, t.TempDir(), "image.aci", good, k.good)
			store := filepath.Join(t.TempDir(), "store")
			f := newTestFetcher(t, Options{Dir: store, TrustedKeys: k.trusted})
			swapped := false
			f.beforeUnpack = func(private string) {
				if err := os.WriteFile(c.target(p, private), evil, 0o644); err != nil {
					t.Error(err)
				}
				swapped = true
			}
			img, err := f.Fetch(context.Background(), "file://"+p)
			if !swapped {
				t.Fatal("the hook did not run: nothing was swapped")
			}
			if c.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				wantTree(t, img.Rootfs, testTree...)
			} else if !errors.Is(err, c.wantErr) {
				t.Fatalf("%v, want %v", err, c.wantErr)
			}
			imgs, _ := f.List()
			for _, img := range imgs {
				if _, err := os.Lstat(filepath.Join(img.Rootfs, "evil")); err == nil {
					t.Fatalf("the swapped content was committed as %s", img.ID)
				}
			}
			if c.wantErr != nil && len(imgs) != 0 {
				t.Fatalf("%d images stored after a refusal", len(imgs))
			}
			noTemp(t, store)
		})
	}
}

// TestSetTrust: keys set after New (kurmad's reload) judge the fetches
// that follow: an ACI signed by a key not yet trusted is refused, then
// verified by that key once SetTrust trusts it, with "required" as the
// default mode since a key is now set; a key file that is not a key
// changes nothing.
func TestSetTrust(t *testing.T) {
	k := newTrustKeys(t)
	dir := t.TempDir()
	p := signedFile(t, dir, "image.aci", aciNamed(t, "other.org/net", testRootfs), k.other)
	f := newTestFetcher(t, Options{TrustedKeys: k.trusted[:1]})
	if _, err := f.Fetch(context.Background(), "file://"+p); !errors.Is(err, ErrSignature) {
		t.Fatalf("signed by a key not trusted yet: %v, want ErrSignature", err)
	}
	bad := writeFile(t, dir, "bad.asc", []byte("not a key"))
	if err := f.SetTrust([]TrustedKey{{Prefix: "other.org", KeyFile: bad}}, ""); err == nil {
		t.Fatal("SetTrust took a file that holds no key")
	}
	if _, err := f.Fetch(context.Background(), "file://"+p); !errors.Is(err, ErrSignature) {
		t.Fatalf("after a refused SetTrust: %v, want ErrSignature still", err)
	}
	if err := f.SetTrust(k.trusted, ""); err != nil {
		t.Fatal(err)
	}
	img, err := f.Fetch(context.Background(), "file://"+p)
	if err != nil {
		t.Fatal(err)
	}
	want := Verification{Mode: VerifyRequired, Method: MethodSignature, Key: fingerprint(k.other)}
	if img.Verified == nil || *img.Verified != want {
		t.Errorf("verified %+v, want %+v", img.Verified, want)
	}
	if err := f.SetTrust(nil, ""); err != nil {
		t.Fatal(err)
	}
	if r, err := f.newRequest(nil); err != nil || r.verify != VerifyNone {
		t.Errorf("no keys left: default mode %q (%v), want none", r.verify, err)
	}
}
