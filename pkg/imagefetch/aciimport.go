package imagefetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"
)

var timeNow = time.Now

// ErrSignature is wrapped when a required ACI signature is missing or does
// not verify.
var ErrSignature = errors.New("signature check failed")

// aciSource gives access to a downloaded or local ACI.
type aciSource struct {
	uri  string
	open func() (io.ReadCloser, error) // the ACI as fetched (compressed)
	// asc returns the detached armored signature; nil when the source
	// cannot have one.
	asc func(ctx context.Context) ([]byte, error)
	pin string // expected image ID ("" when none)
	// wantName is the name the image was discovered by: the manifest must
	// carry it.
	wantName string
}

// importACI validates, signature-checks and unpacks an ACI with its
// dependencies, and commits it to the store.
func (f *Fetcher) importACI(ctx context.Context, src aciSource) (*Image, error) {
	rc, err := src.open()
	if err != nil {
		return nil, err
	}
	info, err := inspectACI(rc, f.opts.MaxSize)
	rc.Close()
	if err != nil {
		return nil, err
	}
	if src.pin != "" && info.ID != src.pin {
		return nil, fmt.Errorf("%w: image ID is %s, the URI pins %s", ErrDigestMismatch, info.ID, src.pin)
	}
	name := string(info.Manifest.Name)
	if src.wantName != "" && name != src.wantName {
		return nil, fmt.Errorf("discovered image is named %q, not %q", name, src.wantName)
	}
	if err := f.checkSignature(ctx, name, src); err != nil {
		return nil, err
	}
	meta := imageFromACI(info)
	meta.Source = src.uri
	img, err := f.build("aci", meta, func(rootfs string) error {
		// Dependencies first, in order, then the image on top.
		for _, dep := range info.Manifest.Dependencies {
			dimg, err := f.resolveDependency(ctx, dep)
			if err != nil {
				return fmt.Errorf("dependency %q: %w", dep.ImageName, err)
			}
			if err := copyTree(dimg.Rootfs, rootfs); err != nil {
				return fmt.Errorf("dependency %q (%s): laying under rootfs: %w", dep.ImageName, dimg.ID, err)
			}
		}
		x, err := newExtractor(rootfs, f.opts.MaxSize)
		if err != nil {
			return err
		}
		rc, err := src.open()
		if err != nil {
			return err
		}
		defer rc.Close()
		return extractACI(rc, x)
	})
	if err != nil {
		return nil, err
	}
	f.log.WithFields(map[string]any{"image": img.Name, "id": img.ID, "source": src.uri, "compression": info.Compression}).Info("image stored")
	return img, nil
}

// checkSignature verifies the detached signature when a trusted key covers
// name, and logs that the image was not checked otherwise.
func (f *Fetcher) checkSignature(ctx context.Context, name string, src aciSource) error {
	var ring openpgp.EntityList
	var prefix string
	for _, k := range f.keys {
		if strings.HasPrefix(name, k.prefix) && len(k.prefix) >= len(prefix) {
			ring, prefix = k.ring, k.prefix
		}
	}
	if ring == nil {
		f.log.WithFields(map[string]any{"image": name, "source": src.uri}).
			Warnf("image %s was not signature-checked (no trusted key covers it)", name)
		return nil
	}
	if src.asc == nil {
		return fmt.Errorf("%w: trusted key for %q requires a signature, and %s has none", ErrSignature, prefix, src.uri)
	}
	asc, err := src.asc(ctx)
	if err != nil {
		return fmt.Errorf("%w: trusted key for %q requires a signature: %v", ErrSignature, prefix, err)
	}
	rc, err := src.open()
	if err != nil {
		return err
	}
	defer rc.Close()
	signer, err := openpgp.CheckArmoredDetachedSignature(ring, rc, bytes.NewReader(asc), nil)
	if err != nil {
		return fmt.Errorf("%w: image %s: %v", ErrSignature, name, err)
	}
	f.log.WithFields(map[string]any{"image": name, "key": fmt.Sprintf("%X", signer.PrimaryKey.Fingerprint)}).Info("signature verified")
	return nil
}

func imageFromACI(info *aciInfo) *Image {
	m := info.Manifest
	labels := map[string]string{}
	for _, l := range m.Labels {
		labels[string(l.Name)] = l.Value
	}
	var annotations map[string]string
	for _, a := range m.Annotations {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[string(a.Name)] = a.Value
	}
	img := &Image{
		ID:          info.ID,
		Name:        string(m.Name),
		Version:     labels["version"],
		Labels:      labels,
		Annotations: annotations,
		Format:      "aci",
		Size:        info.Size,
	}
	if m.App != nil {
		img.App.Exec = append([]string(nil), m.App.Exec...)
		for _, e := range m.App.Environment {
			img.App.Env = append(img.App.Env, e.Name+"="+e.Value)
		}
		img.App.User = m.App.User
		img.App.Group = m.App.Group
		img.App.WorkingDir = m.App.WorkingDirectory
		img.App.Capabilities = retainSet(m.App.Isolators)
	}
	return img
}

// resolveDependency finds a dependency in the store by name, labels and
// optional image ID, else fetches it by discovery.
func (f *Fetcher) resolveDependency(ctx context.Context, dep types.Dependency) (*Image, error) {
	imgs, err := f.store.list()
	if err != nil {
		return nil, err
	}
	var match *Image
	for _, img := range imgs {
		if img.Format != "aci" || img.Name != string(dep.ImageName) {
			continue
		}
		if dep.ImageID != nil && !strings.HasPrefix(img.ID, dep.ImageID.String()) {
			continue
		}
		if !labelsMatch(img.Labels, dep.Labels) {
			continue
		}
		if match == nil || img.Fetched.After(match.Fetched) {
			match = img
		}
	}
	if match != nil {
		return match, nil
	}
	app := string(dep.ImageName)
	var ls []string
	for _, l := range dep.Labels {
		ls = append(ls, string(l.Name)+"="+l.Value)
	}
	sort.Strings(ls)
	if len(ls) > 0 {
		app += "," + strings.Join(ls, ",")
	}
	img, err := f.fetchDiscovery(ctx, app, nil)
	if err != nil {
		return nil, fmt.Errorf("not in the store and discovery failed: %w", err)
	}
	if dep.ImageID != nil && !strings.HasPrefix(img.ID, dep.ImageID.String()) {
		return nil, fmt.Errorf("%w: discovered %s, dependency wants %s", ErrDigestMismatch, img.ID, dep.ImageID)
	}
	return img, nil
}

func labelsMatch(have map[string]string, want types.Labels) bool {
	for _, l := range want {
		if have[string(l.Name)] != l.Value {
			return false
		}
	}
	return true
}

// copyTree copies a stored rootfs into dst, keeping modes, ownership,
// symlinks and mtimes; existing files are replaced.
func copyTree(src, dst string) error {
	asRoot := os.Geteuid() == 0
	type dirTime struct {
		p string
		t time.Time
	}
	var dirs []dirTime
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*unix.Stat_t)
		if !fi.IsDir() {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
		switch {
		case fi.IsDir():
			if rel != "." {
				if ex, err := os.Lstat(target); err == nil && !ex.IsDir() {
					if err := os.Remove(target); err != nil {
						return err
					}
				}
				if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
					return err
				}
			}
			dirs = append(dirs, dirTime{target, fi.ModTime()})
		case fi.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(l, target); err != nil {
				return err
			}
			if asRoot && st != nil {
				if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
					return err
				}
			}
			return nil
		case fi.Mode().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				in.Close()
				return err
			}
			_, err = io.Copy(out, in)
			in.Close()
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unsupported file type %s", rel, fi.Mode().Type())
		}
		if asRoot && st != nil {
			if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		if err := os.Chmod(target, fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
			return err
		}
		if !fi.IsDir() {
			return os.Chtimes(target, fi.ModTime(), fi.ModTime())
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(dirs[i].p, dirs[i].t, dirs[i].t); err != nil {
			return err
		}
	}
	return nil
}

// retainSet is the capability names of the app's
// os/linux/capabilities-retain-set isolator, if it has one.
func retainSet(isolators types.Isolators) []string {
	var out []string
	for _, iso := range isolators {
		if set, ok := iso.Value().(*types.LinuxCapabilitiesRetainSet); ok && iso.Name == types.LinuxCapabilitiesRetainSetName {
			for _, c := range set.Set() {
				out = append(out, string(c))
			}
		}
	}
	return out
}
