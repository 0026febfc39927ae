package k8snode

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/distribution/reference"
)

// Resolver turns a Network's docker:// image with a tag into the same
// image by digest, as the registry answers now: the object's status
// keeps it, and every node runs those bits until the object changes,
// whatever the tag points to later. It reads the TLS roots kurmad reads
// for the registry (CertsDir/<host>/*.crt, the certs.d of kurmad's image
// store) and the credentials of the Networks' pull secrets.
type Resolver struct {
	// CertsDir is kurmad's certs.d: <state_dir>/images/.containers/certs.d.
	CertsDir string
	Timeout  time.Duration
}

// manifestTypes are the manifests a registry may answer for a tag.
var manifestTypes = []string{
	"application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
	"application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.docker.distribution.manifest.v2+json",
}

// NeedsResolving says whether image is a docker:// reference by tag.
func NeedsResolving(image string) bool {
	rest, ok := strings.CutPrefix(image, "docker://")
	if !ok {
		return false
	}
	named, err := reference.ParseNormalizedNamed(rest)
	if err != nil {
		return false // kurmad's check reports it
	}
	_, digested := named.(reference.Digested)
	return !digested
}

// Resolve is image by digest: docker://<name>@sha256:...; auths is an
// auth file ({"auths": {...}}) with the registry's credentials, if any.
func (r *Resolver) Resolve(ctx context.Context, image string, auths []byte) (string, error) {
	rest := strings.TrimPrefix(image, "docker://")
	named, err := reference.ParseNormalizedNamed(rest)
	if err != nil {
		return "", fmt.Errorf("docker reference %q: %w", rest, err)
	}
	named = reference.TagNameOnly(named)
	tag := named.(reference.Tagged).Tag()
	host, repo := reference.Domain(named), reference.Path(named)
	apiHost := host
	if host == "docker.io" {
		apiHost = "registry-1.docker.io"
	}
	client, err := r.client(host)
	if err != nil {
		return "", err
	}
	user, pass, err := credentials(auths, host)
	if err != nil {
		return "", err
	}
	u := fmt.Sprintf("https://%s/v2/%s/manifests/%s", apiHost, repo, tag)
	digest, err := manifestDigest(ctx, client, u, repo, user, pass)
	if err != nil {
		return "", fmt.Errorf("resolving %s to a digest: %w", image, err)
	}
	return "docker://" + named.Name() + "@" + digest, nil
}

func (r *Resolver) client(host string) (*http.Client, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if r.CertsDir != "" {
		crts, _ := filepath.Glob(filepath.Join(r.CertsDir, host, "*.crt"))
		for _, c := range crts {
			b, err := os.ReadFile(c)
			if err != nil {
				return nil, err
			}
			pool.AppendCertsFromPEM(b)
		}
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, Proxy: http.ProxyFromEnvironment}}, nil
}

// credentials are the user and password auths holds for host.
func credentials(auths []byte, host string) (string, string, error) {
	if len(auths) == 0 {
		return "", "", nil
	}
	var f struct {
		Auths map[string]struct{ Auth, Username, Password string } `json:"auths"`
	}
	if err := json.Unmarshal(auths, &f); err != nil {
		return "", "", err
	}
	for k, a := range f.Auths {
		k = strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")
		k, _, _ = strings.Cut(k, "/")
		if k != host && !(host == "docker.io" && k == "index.docker.io") {
			continue
		}
		if a.Auth != "" {
			b, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return "", "", fmt.Errorf("credentials for %s: %w", host, err)
			}
			user, pass, _ := strings.Cut(string(b), ":")
			return user, pass, nil
		}
		return a.Username, a.Password, nil
	}
	return "", "", nil
}

// manifestDigest asks the registry for the manifest at u, answering its
// challenge once: Basic with the credentials, or Bearer with a token for
// pulling repo.
func manifestDigest(ctx context.Context, client *http.Client, u, repo, user, pass string) (string, error) {
	authz := ""
	for try := 0; ; try++ {
		digest, chal, err := askManifest(ctx, client, u, authz)
		switch {
		case err != nil:
			return "", err
		case digest != "":
			return digest, nil
		case try > 0:
			return "", fmt.Errorf("%s: 401 unauthorized: the registry refuses the credentials (spec.imagePullSecret)", u)
		}
		if authz, err = challenge(ctx, client, chal, repo, user, pass); err != nil {
			return "", err
		}
	}
}

// askManifest is the digest of the manifest at u (HEAD, then GET when the
// answer carries none), or the registry's challenge when it answers 401.
func askManifest(ctx context.Context, client *http.Client, u, authz string) (digest, chal string, err error) {
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		req, err := http.NewRequestWithContext(ctx, method, u, nil)
		if err != nil {
			return "", "", err
		}
		req.Header.Set("Accept", strings.Join(manifestTypes, ", "))
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", "", err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			return "", resp.Header.Get("WWW-Authenticate") + " ", nil
		case resp.StatusCode != http.StatusOK:
			return "", "", fmt.Errorf("%s: %s", u, resp.Status)
		case resp.Header.Get("Docker-Content-Digest") != "":
			return resp.Header.Get("Docker-Content-Digest"), "", nil
		case method == http.MethodGet:
			return fmt.Sprintf("sha256:%x", sha256.Sum256(body)), "", nil
		}
	}
	return "", "", fmt.Errorf("%s: no answer", u)
}

// challenge is the Authorization header answering a registry's
// WWW-Authenticate.
func challenge(ctx context.Context, client *http.Client, h, repo, user, pass string) (string, error) {
	scheme, params, _ := strings.Cut(strings.TrimSpace(h)+" ", " ")
	switch strings.ToLower(scheme) {
	case "basic":
		if user == "" {
			return "", fmt.Errorf("the registry wants credentials: name a spec.imagePullSecret")
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)), nil
	case "bearer":
		p := map[string]string{}
		for _, kv := range strings.Split(params, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			p[k] = strings.Trim(v, `"`)
		}
		q := url.Values{"service": {p["service"]}, "scope": {"repository:" + repo + ":pull"}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p["realm"]+"?"+q.Encode(), nil)
		if err != nil {
			return "", err
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("token from %s: %s", p["realm"], resp.Status)
		}
		var tok struct{ Token, AccessToken string }
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tok); err != nil {
			return "", err
		}
		if tok.Token == "" {
			tok.Token = tok.AccessToken
		}
		return "Bearer " + tok.Token, nil
	}
	return "", fmt.Errorf("the registry asks for %q authentication", scheme)
}
