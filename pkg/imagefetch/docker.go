package imagefetch

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containers/image/v5/copy"
	"github.com/containers/image/v5/docker"
	"github.com/containers/image/v5/docker/reference"
	ocilayout "github.com/containers/image/v5/oci/layout"
	"github.com/containers/image/v5/signature"
	"github.com/containers/image/v5/types"
)

// containersDir holds the files kurma points containers/image at, so it
// neither reads /etc/containers nor writes /var/lib/containers.
const containersDir = ".containers"

// dockerRef parses "docker://[registry[:port]/]repo[:tag|@digest]". The
// Kurma spec's "docker:///user/name:tag" (empty host) means Docker Hub.
func dockerRef(uri string) (types.ImageReference, reference.Named, error) {
	rest := strings.TrimPrefix(uri, "docker://")
	if strings.HasPrefix(rest, "/") {
		rest = "docker.io" + rest
	}
	named, err := reference.ParseNormalizedNamed(rest)
	if err != nil {
		return nil, nil, fmt.Errorf("docker reference %q: %w", rest, err)
	}
	named = reference.TagNameOnly(named)
	ref, err := docker.NewReference(named)
	if err != nil {
		return nil, nil, fmt.Errorf("docker reference %q: %w", rest, err)
	}
	return ref, named, nil
}

// systemContext is containers/image's configuration for one registry:
// every path set explicitly, TLS verification off (and plain HTTP allowed)
// only for registries listed in insecure_registries.
func (f *Fetcher) systemContext(registry string) (*types.SystemContext, error) {
	cdir := filepath.Join(f.store.dir, containersDir)
	if err := os.MkdirAll(filepath.Join(cdir, "cache"), 0o700); err != nil {
		return nil, err
	}
	conf := filepath.Join(cdir, "registries.conf")
	if _, err := os.Stat(conf); os.IsNotExist(err) {
		// containers/image refuses an explicit path that does not exist;
		// an empty file means "no registry settings".
		if err := writeFileSync(conf, []byte("# kurma: intentionally empty; see imagefetch docs\n")); err != nil {
			return nil, err
		}
	}
	regd, err := f.registriesDir(cdir)
	if err != nil {
		return nil, err
	}
	// The image of an index to pull: the one chooseManifest picks.
	pick := choice(hostPlatform())
	sys := &types.SystemContext{
		OSChoice:                    pick.OSChoice,
		ArchitectureChoice:          pick.ArchitectureChoice,
		VariantChoice:               pick.VariantChoice,
		SystemRegistriesConfPath:    conf,
		SystemRegistriesConfDirPath: filepath.Join(cdir, "registries.conf.d"),
		RegistriesDirPath:           regd,
		BlobInfoCacheDir:            filepath.Join(cdir, "cache"),
		BigFilesTemporaryDir:        f.store.dir,
		DockerPerHostCertDirPath:    filepath.Join(cdir, "certs.d"),
		DockerRegistryUserAgent:     "kurma",
	}
	if p, compat := authFile(); p == "" {
		sys.AuthFilePath = filepath.Join(cdir, "auth.json") // absent: anonymous
	} else if compat {
		sys.DockerCompatAuthFilePath = p
	} else {
		sys.AuthFilePath = p
	}
	if f.insecureRegistry(registry) {
		// In containers/image this also enables the plain-HTTP fallback.
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
	} else {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolFalse
	}
	return sys, nil
}

// registriesDir is Options.RegistriesDir, or else kurma's own, whose only
// file points the signature lookaside of every registry at an empty
// directory: without it containers/image would look in
// /var/lib/containers/sigstore.
func (f *Fetcher) registriesDir(cdir string) (string, error) {
	if f.opts.RegistriesDir != "" {
		return f.opts.RegistriesDir, nil
	}
	dir := filepath.Join(cdir, "registries.d")
	sigstore := filepath.Join(cdir, "sigstore")
	for _, d := range []string{dir, sigstore} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
	}
	conf := filepath.Join(dir, "kurma-default.yaml")
	if _, err := os.Stat(conf); os.IsNotExist(err) {
		body := "# kurma: no signature lookaside unless registries_d is configured\ndefault-docker:\n  lookaside: file://" + sigstore + "\n"
		if err := writeFileSync(conf, []byte(body)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// authFile returns the standard registry auth file when one exists:
// $REGISTRY_AUTH_FILE, then $XDG_RUNTIME_DIR/containers/auth.json, then
// $HOME/.docker/config.json (Docker's format; compat=true).
func authFile() (path string, compat bool) {
	if p := os.Getenv("REGISTRY_AUTH_FILE"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, false
		}
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		p := filepath.Join(d, "containers", "auth.json")
		if _, err := os.Stat(p); err == nil {
			return p, false
		}
	}
	if h, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(h, ".docker", "config.json")
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

func (f *Fetcher) insecureRegistry(registry string) bool {
	for _, r := range f.opts.InsecureRegistries {
		if strings.EqualFold(strings.TrimSuffix(r, "/"), registry) {
			return true
		}
	}
	return false
}

// fetchDocker copies the image from the registry into an OCI layout in a
// store temp dir with containers/image, under the signature policy r's mode
// picks, then unpacks that layout. A stored digest reference that meets r
// needs no network; a stored tag is checked with one manifest HEAD, and
// used with a warning when the registry is unreachable.
func (f *Fetcher) fetchDocker(ctx context.Context, uri string, r request) (*Image, error) {
	src, named, err := dockerRef(uri)
	if err != nil {
		return nil, err
	}
	name := reference.TrimNamed(named).String()
	if r.imageName != "" && name != r.imageName {
		return nil, fmt.Errorf("%w: the reference names %q, the network expects %q", ErrImageName, name, r.imageName)
	}
	registry := reference.Domain(named)
	sys, err := f.systemContext(registry)
	if err != nil {
		return nil, err
	}
	_, byDigest := named.(reference.Digested)

	stored, prev, _ := f.stored(uri, r)
	if stored != nil && byDigest {
		return stored, nil
	}
	// For a tag, ask the registry which manifest it names now (one HEAD):
	// unchanged means the stored image is current. Asked before the copy,
	// so a tag moving during the pull errs towards pulling again.
	var remoteDigest string
	if !byDigest {
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		d, err := docker.GetDigest(hctx, sys, src)
		cancel()
		switch {
		case err != nil && stored != nil && ctx.Err() == nil:
			f.log.WithFields(map[string]any{"image": stored.Name, "id": stored.ID, "source": uri, "error": err.Error()}).
				Warn("registry unreachable; using the stored copy")
			return stored, nil
		case err == nil && stored != nil && d.String() == prev.Digest:
			return stored, nil
		case err == nil:
			remoteDigest = d.String()
		}
		// Without a stored copy a HEAD error is left for the pull to report.
	}
	version := ""
	if t, ok := named.(reference.Tagged); ok {
		version = t.Tag()
	}
	img, err := f.importImage(ctx, src, sys, r, name, version, uri)
	if err != nil {
		if stored != nil && ctx.Err() == nil && !isVerificationError(err) {
			f.log.WithFields(map[string]any{"image": stored.Name, "id": stored.ID, "source": uri, "error": err.Error()}).
				Warn("pull failed; using the stored copy")
			return stored, nil
		}
		return nil, fmt.Errorf("pull %s: %w", named, err)
	}
	if err := f.store.setRef(uri, ref{ID: img.ID, Digest: remoteDigest}); err != nil {
		return nil, err
	}
	return img, nil
}

// importImage copies src (a registry image or an OCI layout) with
// containers/image into a fresh OCI layout in a store temp dir, under the
// signature policy r's mode picks and with every blob capped, then unpacks
// and commits that private copy: the source is read once.
func (f *Fetcher) importImage(ctx context.Context, src types.ImageReference, sys *types.SystemContext, r request, name, version, uri string) (*Image, error) {
	choice := f.policyFor(r.verify)
	if choice.err != nil {
		return nil, choice.err
	}
	tmp, err := f.store.tempDir("copy")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	layoutDir := filepath.Join(tmp, "layout")
	dst, err := ocilayout.NewReference(layoutDir, "image")
	if err != nil {
		return nil, err
	}
	policy, err := signature.NewPolicyContext(choice.policy)
	if err != nil {
		return nil, err
	}
	defer policy.Destroy()

	if err := checkPlatform(ctx, src, sys, cmp.Or(uri, name)); err != nil {
		return nil, err
	}
	progressCh := make(chan types.ProgressProperties, 16)
	done := make(chan struct{})
	go f.logCopyProgress(uri, progressCh, r.progress, done)
	_, err = copy.Image(ctx, policy, newCappedRef(dst, f.opts.MaxSize), src, &copy.Options{
		SourceCtx:      sys,
		DestinationCtx: &types.SystemContext{BigFilesTemporaryDir: tmp},
		// kurma keeps no signatures: the policy judged them on the way.
		RemoveSignatures: true,
		ProgressInterval: time.Second,
		Progress:         progressCh,
	})
	close(progressCh)
	<-done
	if err != nil {
		return nil, policyError(err)
	}
	if choice.record.Method == MethodPolicy {
		f.log.WithFields(map[string]any{"image": name, "source": uri, "policy": choice.digest, "verify": string(r.verify)}).Info("accepted by the signature policy")
	}
	record := choice.record
	return f.unpackOCILayout(ctx, layoutDir, name, version, uri, &record)
}

// logCopyProgress turns containers/image progress events into the same
// done/total reports as other downloads.
func (f *Fetcher) logCopyProgress(uri string, ch <-chan types.ProgressProperties, cb func(done, total int64), done chan<- struct{}) {
	defer close(done)
	log := f.log.WithField("image", uri)
	var last time.Time
	for p := range ch {
		total := p.Artifact.Size
		switch p.Event {
		case types.ProgressEventRead:
			if time.Since(last) < time.Second {
				continue
			}
			last = time.Now()
			log.WithFields(map[string]any{"blob": p.Artifact.Digest.String(), "done": p.Offset, "total": total}).Info("downloading")
		case types.ProgressEventDone:
			log.WithFields(map[string]any{"blob": p.Artifact.Digest.String(), "done": p.Offset, "total": total}).Info("blob downloaded")
		default:
			continue
		}
		if cb != nil {
			cb(int64(p.Offset), total)
		}
	}
}
