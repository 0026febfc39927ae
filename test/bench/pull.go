package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/imagefetch"
)

// localRegistry is an in-process registry on 127.0.0.1 holding the plugin
// image pushed from the OCI layout `make images` writes.
type localRegistry struct {
	host string // 127.0.0.1:port
	srv  *http.Server
}

func startRegistry(ctx context.Context, layoutDir, refName string) (*localRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	r := &localRegistry{host: ln.Addr().String(), srv: srv}

	lp, err := layout.FromPath(layoutDir)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("OCI layout %s: %w", layoutDir, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		r.close()
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		r.close()
		return nil, err
	}
	for _, desc := range im.Manifests {
		if desc.Annotations["org.opencontainers.image.ref.name"] != refName {
			continue
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			r.close()
			return nil, err
		}
		ref, err := name.ParseReference(r.imageRef(), name.Insecure)
		if err != nil {
			r.close()
			return nil, err
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			r.close()
			return nil, fmt.Errorf("push to %s: %w", ref, err)
		}
		return r, nil
	}
	r.close()
	return nil, fmt.Errorf("OCI layout %s has no image named %q", layoutDir, refName)
}

func (r *localRegistry) imageRef() string { return r.host + "/kurma/cni-netplugin:v1" }

func (r *localRegistry) close() { _ = r.srv.Close() }

// pullKurma fetches the image with kurma's own fetcher into a fresh store
// (pull, verify and unpack into a rootfs).
func pullKurma(ctx context.Context, r *localRegistry, dir string) (time.Duration, error) {
	f, err := imagefetch.New(imagefetch.Options{
		Dir: dir, InsecureRegistries: []string{r.host},
		Logger: logrus.New().WithField("bench", "pull"),
	})
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	_, err = f.Fetch(ctx, "docker://"+r.imageRef())
	return time.Since(t0), err
}

// pullSkopeo copies the image with Debian's skopeo into an OCI layout.
func pullSkopeo(ctx context.Context, skopeo string, r *localRegistry, dir string) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o600); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, skopeo, "--policy", policy, "copy", "--quiet", "--src-tls-verify=false",
		"docker://"+r.imageRef(), "oci:"+filepath.Join(dir, "out")+":v1")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_RUNTIME_DIR="+dir, "REGISTRY_AUTH_FILE="+filepath.Join(dir, "auth.json"))
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(t0)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return d, fmt.Errorf("skopeo copy: %v: %s", err, out)
		}
		return d, err
	}
	return d, nil
}

// untarLayers unpacks, in order, the layers of the one image of the OCI
// layout at dir with `tar` into dir/rootfs (what kurma's fetch does with
// its layers after skopeo has stored them).
func untarLayers(ctx context.Context, dir string) (time.Duration, error) {
	t0 := time.Now()
	lp, err := layout.FromPath(dir)
	if err != nil {
		return 0, err
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return 0, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return 0, err
	}
	if len(im.Manifests) != 1 {
		return 0, fmt.Errorf("OCI layout %s: %d images, want 1", dir, len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return 0, err
	}
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return 0, err
	}
	for _, l := range m.Layers {
		blob := filepath.Join(dir, "blobs", l.Digest.Algorithm, l.Digest.Hex)
		// GNU tar recognises the compression of a file by its content.
		if out, err := exec.CommandContext(ctx, "tar", "-xf", blob, "-C", rootfs).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("tar -xf %s: %v: %s", blob, err, out)
		}
	}
	return time.Since(t0), nil
}
