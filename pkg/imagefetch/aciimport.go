package imagefetch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"
)

// aciSource is an ACI read once into a store temp dir: everything below
// reads that private copy, never the source again.
type aciSource struct {
	uri  string
	file string // the ACI as fetched (compressed), in a dir only kurma writes
	// signature returns the detached armored signature, errNoSignature
	// when the source has none.
	signature func(ctx context.Context) ([]byte, error)
	pin       string // expected image ID ("" when none)
	// want is what the image was discovered by: the manifest must carry
	// that name and those labels.
	want aciWant
}

// importACI verifies, unpacks and commits an ACI with its dependencies.
// The order is what keeps the pinned-ID short-cut and the store safe: the
// signature is checked over the bytes as fetched before anything is
// decompressed; then one pass computes the ID and validates the manifest;
// then the name, pin and signer are checked and the dependencies resolved
// under the same verify mode; and the unpacking pass hashes what it writes
// and refuses to commit unless that is the ID verified.
func (f *Fetcher) importACI(ctx context.Context, src aciSource, r request) (*Image, error) {
	signer, err := f.checkACISignature(ctx, src, r)
	if err != nil {
		return nil, err
	}
	info, err := inspectACIFile(ctx, src.file, f.opts.MaxSize)
	if err != nil {
		return nil, err
	}
	name := string(info.Manifest.Name)
	if err := checkACIIdentity(info, src, r); err != nil {
		return nil, err
	}
	v, err := f.bindSigner(signer, name, src.uri, r.verify)
	if err != nil {
		return nil, err
	}
	meta := imageFromACI(info)
	meta.Source = src.uri
	meta.Verified = v
	hasDeps := len(info.Manifest.Dependencies) > 0
	if have, err := f.store.get(info.ID); err == nil {
		return f.reuseACI(have, v, hasDeps, r)
	}
	deps, err := f.resolveDependencies(ctx, info.Manifest.Dependencies, r)
	if err != nil {
		return nil, err
	}
	for _, d := range deps {
		meta.Dependencies = append(meta.Dependencies, d.ID)
	}
	img, err := f.build("aci", meta, func(rootfs string) error {
		err := f.fillACI(ctx, rootfs, src.file, info.ID, deps)
		// The fetched file's last pass is done: removed before the
		// commit's syncfs, its pages (written moments ago, as large as
		// the image) are dropped rather than written to disk, which was
		// most of a cold boot's import.
		_ = os.Remove(src.file)
		return err
	})
	if err != nil {
		return nil, err
	}
	if img, err = f.reuseACI(img, v, hasDeps, r); err != nil {
		return nil, err
	}
	f.log.WithFields(map[string]any{"image": img.Name, "id": img.ID, "source": src.uri, "compression": info.Compression}).Info("image stored")
	return img, nil
}

// fillACI lays the dependencies, in order, then the image on top.
func (f *Fetcher) fillACI(ctx context.Context, rootfs, file, id string, deps []*Image) error {
	for _, d := range deps {
		if err := copyTree(ctx, d.Rootfs, rootfs); err != nil {
			return fmt.Errorf("dependency %q (%s): laying under rootfs: %w", d.Name, d.ID, err)
		}
	}
	x, err := newExtractor(ctx, rootfs, f.opts.MaxSize)
	if err != nil {
		return err
	}
	if f.beforeUnpack != nil {
		f.beforeUnpack(file)
	}
	rc, err := openACI(file)
	if err != nil {
		return err
	}
	defer rc.Close()
	return extractACI(rc, x, id)
}

// reuseACI returns an image the store already has under the ID just
// verified (or that a concurrent fetch committed), raising its record to
// v when that is stronger. An image without dependencies is fully
// determined by its ID; one with dependencies (the ID fixes the manifest
// that lists them) must itself meet r, since they were laid when it was
// first stored.
func (f *Fetcher) reuseACI(have *Image, v *Verification, hasDeps bool, r request) (*Image, error) {
	if hasDeps {
		if err := f.checkStored(r, have); err != nil {
			return nil, err
		}
		return have, nil
	}
	return f.recordVerification(have, v)
}

// recordVerification raises a stored image's verification record to v
// when v is stronger.
func (f *Fetcher) recordVerification(have *Image, v *Verification) (*Image, error) {
	if v.strength() <= have.Verified.strength() {
		return have, nil
	}
	return f.store.setVerification(have.ID, v)
}

// checkACIIdentity checks the ID against the pin, the manifest's name
// against the name discovered and the name the fetch demands, and its os
// and arch labels against this host's.
func checkACIIdentity(info *aciInfo, src aciSource, r request) error {
	name := string(info.Manifest.Name)
	switch {
	case src.pin != "" && info.ID != src.pin:
		return fmt.Errorf("%w: image ID is %s, the URI pins %s", ErrDigestMismatch, info.ID, src.pin)
	case src.want.name != "" && name != src.want.name:
		return fmt.Errorf("%w: discovered image is named %q, not %q", ErrImageName, name, src.want.name)
	case r.imageName != "" && name != r.imageName:
		return fmt.Errorf("%w: image is named %q, the network expects %q", ErrImageName, name, r.imageName)
	}
	labels := imageFromACI(info).Labels
	if err := checkLabels(labels, src.want.labels); err != nil {
		return err
	}
	return checkACIPlatform(labels, hostPlatform(), cmp.Or(src.uri, name))
}

// checkLabels refuses a discovered image whose labels differ from the ones
// it was discovered by: appc discovery resolves a name and labels to a URL,
// and whoever serves that URL could answer with the same vendor's older,
// validly signed image, or one for another os or arch.
func checkLabels(have, want map[string]string) error {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got, ok := have[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: none, asked for %q", k, want[k]))
		case got != want[k]:
			diffs = append(diffs, fmt.Sprintf("%s: %q, asked for %q", k, got, want[k]))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: discovered image's labels differ from the ones asked for (%s)", ErrImageName, strings.Join(diffs, "; "))
	}
	return nil
}

// inspectACIFile runs inspectACI over the private copy.
func inspectACIFile(ctx context.Context, file string, maxBytes int64) (*aciInfo, error) {
	rc, err := openACI(file)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return inspectACI(ctx, rc, maxBytes)
}

// openACI opens an ACI file for a pass over it, after checking an xz one's
// dictionaries (checkXZ): every pass, since each decompresses anew.
func openACI(file string) (*os.File, error) {
	rc, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	magic := make([]byte, len(xzMagic))
	if n, _ := io.ReadFull(rc, magic); n == len(magic) && bytes.Equal(magic, xzMagic) {
		fi, err := rc.Stat()
		if err == nil {
			err = checkXZ(rc, fi.Size())
		}
		if err != nil {
			rc.Close()
			return nil, err
		}
	}
	if _, err := rc.Seek(0, io.SeekStart); err != nil {
		rc.Close()
		return nil, err
	}
	return rc, nil
}

// checkACISignature verifies the detached signature over the ACI as
// fetched against every trusted key, before anything is decompressed, and
// returns the signer (nil when the ACI is unsigned under if-signed, or
// mode is none). Which names the signer may sign is checked once the
// manifest is read (bindSigner).
func (f *Fetcher) checkACISignature(ctx context.Context, src aciSource, r request) (*openpgp.Entity, error) {
	mode := r.verify
	if mode == VerifyNone {
		return nil, nil
	}
	asc, err := src.signature(ctx)
	switch {
	case errors.Is(err, errNoSignature) && r.signatureRequired:
		return nil, fmt.Errorf("%w: %s is plain http:// without a #sha512- pin and has no signature, so nothing checks what arrived; pin it, sign it, use https://, or say \"verify\": \"none\" in the network itself", ErrSignature, src.uri)
	case errors.Is(err, errNoSignature) && mode == VerifyIfSigned:
		return nil, nil
	case errors.Is(err, errNoSignature):
		return nil, fmt.Errorf("%w: verify is required and %s has no signature", ErrSignature, src.uri)
	case err != nil:
		return nil, fmt.Errorf("%w: reading the signature of %s: %v", ErrSignature, src.uri, err)
	}
	keys := f.allKeys()
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s is signed, but there are no trusted_keys to check the signature with", ErrSignature, src.uri)
	}
	rc, err := os.Open(src.file)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	signer, err := openpgp.CheckArmoredDetachedSignature(keys, rc, bytes.NewReader(asc), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: signature does not verify with any trusted key: %v", ErrSignature, src.uri, err)
	}
	return signer, nil
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

// resolveDependencies resolves each dependency, in order, under r's
// verify mode.
func (f *Fetcher) resolveDependencies(ctx context.Context, deps types.Dependencies, r request) ([]*Image, error) {
	var out []*Image
	for _, dep := range deps {
		img, err := f.resolveDependency(ctx, dep, r.forDependency())
		if err != nil {
			return nil, fmt.Errorf("dependency %q: %w", dep.ImageName, err)
		}
		out = append(out, img)
	}
	return out, nil
}

// resolveDependency finds a dependency in the store by name, labels and
// optional image ID, among the images that meet r, else fetches it by
// discovery under r.
func (f *Fetcher) resolveDependency(ctx context.Context, dep types.Dependency, r request) (*Image, error) {
	imgs, err := f.store.list()
	if err != nil {
		return nil, err
	}
	var match *Image
	var refused error
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
		if err := f.checkStored(r, img); err != nil {
			refused = err
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
	img, err := f.fetchDiscovery(ctx, app, r)
	if err != nil {
		if refused != nil {
			return nil, fmt.Errorf("the stored copy is refused (%w), and discovery failed: %w", refused, err)
		}
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
// symlinks and mtimes; existing files are replaced. ctx is checked for
// every entry.
func copyTree(ctx context.Context, src, dst string) error {
	c := &treeCopier{src: src, dst: dst, asRoot: os.Geteuid() == 0}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return c.copyEntry(p)
	})
	if err != nil {
		return err
	}
	return c.setDirTimes()
}

// treeCopier is one copyTree: where from, where to, and the directories
// whose mtimes are set once everything below them is written.
type treeCopier struct {
	src, dst string
	asRoot   bool // ownership is copied only when running as root
	dirs     []dirTime
}

// dirTime is a copied directory and the mtime it gets at the end.
type dirTime struct {
	p string
	t time.Time
}

// copyEntry copies the entry at p (under src) to the same place under
// dst, replacing what is there unless a directory meets a directory, then
// copies its attributes. A symlink gets only its ownership: chmod and
// chtimes would follow it.
func (c *treeCopier) copyEntry(p string) error {
	rel, err := filepath.Rel(c.src, p)
	if err != nil {
		return err
	}
	target := filepath.Join(c.dst, rel)
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
		err = c.copyDir(rel, target, fi)
	case fi.Mode()&os.ModeSymlink != 0:
		return c.copySymlink(p, target, st)
	case fi.Mode().IsRegular():
		err = copyFileContent(p, target)
	default:
		return fmt.Errorf("%s: unsupported file type %s", rel, fi.Mode().Type())
	}
	if err != nil {
		return err
	}
	return c.copyAttrs(target, fi, st)
}

// copyDir makes the directory at target, replacing a non-directory there,
// and queues its mtime. The root of the copy (rel ".") already exists.
func (c *treeCopier) copyDir(rel, target string, fi os.FileInfo) error {
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
	c.dirs = append(c.dirs, dirTime{target, fi.ModTime()})
	return nil
}

// copySymlink recreates the symlink at p as target, with its ownership.
func (c *treeCopier) copySymlink(p, target string, st *unix.Stat_t) error {
	l, err := os.Readlink(p)
	if err != nil {
		return err
	}
	if err := os.Symlink(l, target); err != nil {
		return err
	}
	if c.asRoot && st != nil {
		if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// copyFileContent copies the regular file at p to a new file at target,
// created exclusively and never through a symlink.
func copyFileContent(p, target string) error {
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
	return err
}

// copyAttrs gives target fi's ownership (as root), then its mode (after
// chown, which clears setuid/setgid), then, for a file, its mtime.
func (c *treeCopier) copyAttrs(target string, fi os.FileInfo, st *unix.Stat_t) error {
	if c.asRoot && st != nil {
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
}

// setDirTimes sets the copied directories' mtimes in reverse walk order,
// so each directory's children are done before it, now that nothing more
// is written below them.
func (c *treeCopier) setDirTimes() error {
	for i := len(c.dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(c.dirs[i].p, c.dirs[i].t, c.dirs[i].t); err != nil {
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
