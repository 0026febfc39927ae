package imagefetch

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// ErrHostile is wrapped by every error that refuses an archive entry because
// it would escape the rootfs, is a device, or breaks a size limit.
var ErrHostile = errors.New("hostile archive entry")

// hostile builds an error naming the refused entry.
func hostile(name, format string, args ...any) error {
	return fmt.Errorf("%w %q: %s", ErrHostile, name, fmt.Sprintf(format, args...))
}

// defaultMaxEntries caps the number of entries an image may have; real plugin
// images have a few hundred.
const defaultMaxEntries = 1 << 20

// extractor writes tar entries under root, refusing anything that would
// land outside it. It is used for ACI rootfs entries, every OCI layer and
// OCI archives, so there is one place where the security rules live.
type extractor struct {
	ctx        context.Context // checked for every entry and every read
	root       string          // absolute, symlink-free
	maxBytes   int64           // regular-file bytes, and tar stream bytes, allowed
	maxEntries int
	chown      bool // running as root: apply uid/gid

	bytes   int64
	entries int
	// streamLeft is what remains of maxBytes for the uncompressed tar
	// streams read through stream(), all layers together.
	streamLeft int64
	dirs       map[string]time.Time // dirs whose mtime is set at the end

	// whiteouts enables OCI layer semantics: .wh.<name> removes a lower
	// entry and .wh..wh..opq empties a directory of lower entries.
	whiteouts bool
	// layer holds paths written by the current layer, so whiteouts never
	// remove what the same layer added; layerDirs holds every ancestor
	// directory of those paths, so the question "did this layer write
	// something below d?" costs one lookup, not a scan of layer.
	layer     map[string]bool
	layerDirs map[string]bool
	// opaqued holds the directories the current layer already emptied:
	// a second marker for the same directory has nothing left to remove.
	opaqued map[string]bool
}

// newExtractor returns an extractor into root; ctx bounds its work.
func newExtractor(ctx context.Context, root string, maxBytes int64) (*extractor, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	abs, err = filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, err
	}
	return &extractor{
		ctx:        ctx,
		root:       abs,
		maxBytes:   maxBytes,
		maxEntries: defaultMaxEntries,
		chown:      os.Geteuid() == 0,
		streamLeft: maxBytes,
		dirs:       map[string]time.Time{},
	}, nil
}

// startLayer resets the per-layer bookkeeping used by whiteouts.
func (x *extractor) startLayer() {
	x.layer = map[string]bool{}
	x.layerDirs = map[string]bool{}
	x.opaqued = map[string]bool{}
}

// stream returns r (an uncompressed tar stream) counted against the
// extractor's budget of uncompressed bytes and cut off when its context
// ends. Call its done when the stream is finished.
func (x *extractor) stream(r io.Reader) *capReader {
	return &capReader{r: r, max: x.streamLeft, ctx: x.ctx, done: func(n int64) { x.streamLeft -= n }}
}

// cleanName turns an archive name into a clean relative path, refusing
// absolute names and names that climb out with "..". "" means the root.
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", hostile(name, "absolute path")
	}
	if strings.ContainsRune(name, 0) {
		return "", hostile(name, "NUL in name")
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", hostile(name, "path escapes the rootfs with ..")
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

// within reports whether p is root or below it (both clean, absolute).
func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}

// resolve returns the host path of rel (clean, relative) under root,
// following symlinks met on the way the way the host kernel would, and
// refusing when one of them leads outside root: such an entry would be
// written *through* a symlink out of the rootfs by a naive extractor.
// The final component is not followed (it is replaced, never written
// through).
func (x *extractor) resolve(entry, rel string) (string, error) {
	if rel == "" {
		return x.root, nil
	}
	dir, base := path.Split(rel)
	parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
	if dir == "" {
		parts = nil
	}
	cur := x.root
	hops := 0
	for len(parts) > 0 {
		p := parts[0]
		parts = parts[1:]
		switch p {
		case "", ".":
			continue
		case "..":
			if cur == x.root {
				return "", hostile(entry, "path escapes the rootfs through a symlink")
			}
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, p)
		fi, err := os.Lstat(next)
		if errors.Is(err, os.ErrNotExist) {
			cur = next
			continue
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if !fi.IsDir() {
				return "", hostile(entry, "parent %q is not a directory", strings.TrimPrefix(next, x.root))
			}
			cur = next
			continue
		}
		hops++
		if hops > 255 {
			return "", hostile(entry, "too many symlinks")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			return "", hostile(entry, "written through symlink %q -> %q, which points outside the rootfs on the host",
				strings.TrimPrefix(next, x.root), target)
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	// Belt and braces: SecureJoin resolves the same parent scoped to root;
	// when nothing escaped, both agree.
	safe, err := securejoin.SecureJoin(x.root, dir)
	if err != nil {
		return "", fmt.Errorf("entry %q: %w", entry, err)
	}
	if safe != cur {
		return "", hostile(entry, "path resolves outside the rootfs")
	}
	// A last component of "." or ".." would name cur or its parent, not an
	// entry in cur (callers pass clean paths, so only a bug gets here).
	if base == "." || base == ".." {
		return "", hostile(entry, "path ends in %q", base)
	}
	return filepath.Join(cur, base), nil
}

// checkSymlinkTarget refuses relative symlink targets that climb out of the
// rootfs. Absolute targets are normal in images (/bin/sh -> /bin/busybox)
// and harmless because the store never follows them on the host.
func (x *extractor) checkSymlinkTarget(entry, rel, target string) error {
	if target == "" {
		return hostile(entry, "empty symlink target")
	}
	if strings.ContainsRune(target, 0) {
		return hostile(entry, "NUL in symlink target")
	}
	if path.IsAbs(target) {
		return nil
	}
	j := path.Clean(path.Join(path.Dir(rel), target))
	if j == ".." || strings.HasPrefix(j, "../") {
		return hostile(entry, "symlink target %q points outside the rootfs", target)
	}
	return nil
}

// add writes one entry. name is relative to the rootfs (prefix already
// stripped); entry is the archive name for messages. linkName for hard
// links is likewise relative to the rootfs. The stages run in order:
// admit (caps, name, type: nothing under root is touched yet), whiteout
// markers, place (resolve and clear the destination), then one writer per
// entry type, which checks link targets before linking. Each entry is
// written as it is read, so extraction is one pass over the archive.
func (x *extractor) add(entry string, hdr *tar.Header, name, linkName string, r io.Reader) error {
	rel, err := x.admit(entry, hdr, name)
	if err != nil {
		return err
	}
	if x.whiteouts {
		if marker, err := x.applyWhiteoutMarker(entry, rel); marker {
			return err
		}
	}
	dst, exists, err := x.place(entry, rel, hdr)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.writeDir(entry, dst, hdr, exists)
	case tar.TypeReg, tar.TypeRegA:
		return x.writeFile(entry, dst, hdr, r)
	case tar.TypeSymlink:
		return x.writeSymlink(entry, rel, dst, hdr)
	case tar.TypeLink:
		return x.writeHardLink(entry, dst, hdr, linkName)
	}
	return nil
}

// admit counts the entry against the caps and checks its name and header,
// returning its clean path relative to the rootfs. It touches nothing on
// disk, so a refused entry leaves no trace.
func (x *extractor) admit(entry string, hdr *tar.Header, name string) (string, error) {
	if err := x.ctx.Err(); err != nil {
		return "", err
	}
	x.entries++
	if x.entries > x.maxEntries {
		return "", hostile(entry, "more than %d entries", x.maxEntries)
	}
	rel, err := cleanName(name)
	if err != nil {
		if name == entry {
			return "", err
		}
		return "", fmt.Errorf("entry %q: %w", entry, err)
	}
	if err := checkEntryType(entry, hdr); err != nil {
		return "", err
	}
	if rel == "" && hdr.Typeflag != tar.TypeDir {
		// Replacing the rootfs itself by a symlink would make every later
		// entry land wherever it points.
		return "", hostile(entry, "the rootfs itself can only be a directory")
	}
	if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA {
		x.bytes += hdr.Size
		if x.bytes > x.maxBytes {
			return "", hostile(entry, "image is larger than the %d-byte limit", x.maxBytes)
		}
	}
	return rel, nil
}

// checkEntryType refuses devices, FIFOs, types the extractor does not
// know and negative sizes: only directories, regular files, symlinks and
// hard links are ever written.
func checkEntryType(entry string, hdr *tar.Header) error {
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		return hostile(entry, "device files are not allowed")
	case tar.TypeFifo:
		return hostile(entry, "FIFOs are not allowed")
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return hostile(entry, "unsupported tar entry type %q", string(hdr.Typeflag))
	}
	if hdr.Size < 0 {
		return hostile(entry, "negative size")
	}
	return nil
}

// applyWhiteoutMarker applies rel when it is an OCI whiteout marker
// (.wh..wh..opq or .wh.<name>) and reports whether it was one: a marker
// removes lower entries and is never written itself.
func (x *extractor) applyWhiteoutMarker(entry, rel string) (bool, error) {
	base := path.Base(rel)
	if base == ".wh..wh..opq" {
		return true, x.opaque(entry, path.Dir(rel))
	}
	if strings.HasPrefix(base, ".wh.") {
		name := strings.TrimPrefix(base, ".wh.")
		// The name is one entry of the marker's directory: ".wh.." and
		// ".wh..." would name the directory itself and its parent (at the
		// top, the rootfs's parent), and ".wh..wh.*" is reserved by the
		// OCI spec for markers like the opaque one.
		if name == "" || name == "." || name == ".." || strings.HasPrefix(name, ".wh.") {
			return true, hostile(entry, "whiteout of %q, which names no entry of its directory", name)
		}
		return true, x.whiteout(entry, path.Join(path.Dir(rel), name))
	}
	return false, nil
}

// place resolves rel to its host path without following a symlink out of
// the rootfs, creates its parents, records it as written by the current
// layer, and removes what is there unless a directory meets a directory.
// exists reports whether dst is still there (that directory).
func (x *extractor) place(entry, rel string, hdr *tar.Header) (dst string, exists bool, err error) {
	dst, err = x.resolve(entry, rel)
	if err != nil {
		return "", false, err
	}
	if rel != "" {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", false, fmt.Errorf("entry %q: %w", entry, err)
		}
	}
	x.markWritten(rel)
	existing, lerr := os.Lstat(dst)
	exists = lerr == nil
	if exists && !(existing.IsDir() && hdr.Typeflag == tar.TypeDir) {
		if err := os.RemoveAll(dst); err != nil {
			return "", false, fmt.Errorf("entry %q: replace: %w", entry, err)
		}
		exists = false
	}
	return dst, exists, nil
}

// headerMode is the entry's permission bits with setuid, setgid and
// sticky, which os.FileMode keeps apart from the low nine bits.
func headerMode(hdr *tar.Header) os.FileMode {
	mode := os.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&unixSetuid != 0 {
		mode |= os.ModeSetuid
	}
	if hdr.Mode&unixSetgid != 0 {
		mode |= os.ModeSetgid
	}
	if hdr.Mode&unixSticky != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// writeDir makes the directory unless it exists and applies its
// attributes; its mtime is set by finish, once its children are written.
func (x *extractor) writeDir(entry, dst string, hdr *tar.Header, exists bool) error {
	if !exists {
		if err := os.Mkdir(dst, 0o700); err != nil {
			return fmt.Errorf("entry %q: %w", entry, err)
		}
	}
	if err := x.attrs(dst, hdr, headerMode(hdr), false); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	x.dirs[dst] = hdr.ModTime
	return nil
}

// writeFile creates the file (never through a symlink: O_EXCL and
// O_NOFOLLOW) and copies exactly hdr.Size bytes into it.
func (x *extractor) writeFile(entry, dst string, hdr *tar.Header, r io.Reader) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	if err := x.attrs(dst, hdr, headerMode(hdr), false); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	if err := os.Chtimes(dst, hdr.ModTime, hdr.ModTime); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	return nil
}

// writeSymlink makes the symlink once its target is checked, and sets its
// own ownership and mtime, never its target's.
func (x *extractor) writeSymlink(entry, rel, dst string, hdr *tar.Header) error {
	if err := x.checkSymlinkTarget(entry, rel, hdr.Linkname); err != nil {
		return err
	}
	if err := os.Symlink(hdr.Linkname, dst); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	if err := x.attrs(dst, hdr, 0, true); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	_ = unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
	return nil
}

// writeHardLink links dst to linkName, which must name an existing
// non-directory inside the rootfs: a hard link to a host file would give
// the image that file.
func (x *extractor) writeHardLink(entry, dst string, hdr *tar.Header, linkName string) error {
	trel, err := cleanName(linkName)
	if err != nil || trel == "" {
		return hostile(entry, "hard link target %q is outside the rootfs", hdr.Linkname)
	}
	src, err := x.resolve(entry, trel)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return hostile(entry, "hard link target %q does not exist in the rootfs", hdr.Linkname)
	}
	if fi.IsDir() {
		return hostile(entry, "hard link to directory %q", hdr.Linkname)
	}
	if !within(x.root, src) {
		return hostile(entry, "hard link target %q is outside the rootfs", hdr.Linkname)
	}
	if err := os.Link(src, dst); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	return nil
}

const (
	unixSetuid = 0o4000
	unixSetgid = 0o2000
	unixSticky = 0o1000
)

// attrs applies ownership then mode: chown clears setuid/setgid, so the
// order matters for keeping them.
func (x *extractor) attrs(p string, hdr *tar.Header, mode os.FileMode, link bool) error {
	if x.chown {
		if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if link {
		return nil
	}
	return os.Chmod(p, mode)
}

// whiteout removes a lower layer's entry.
func (x *extractor) whiteout(entry, rel string) error {
	if rel == "" || rel == "." {
		return hostile(entry, "whiteout of the root")
	}
	if x.layer[rel] {
		return nil
	}
	dst, err := x.resolve(entry, rel)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("entry %q: whiteout: %w", entry, err)
	}
	return nil
}

// markWritten records that the current layer wrote rel, and so something
// below each of its ancestors.
func (x *extractor) markWritten(rel string) {
	if x.layer == nil {
		return
	}
	x.layer[rel] = true
	for d := path.Dir(rel); d != "." && d != "/" && !x.layerDirs[d]; d = path.Dir(d) {
		x.layerDirs[d] = true
	}
}

// opaque removes every lower-layer entry under dir, keeping what the current
// layer already wrote there. It visits each entry under dir at most once.
func (x *extractor) opaque(entry, dir string) error {
	if dir == "." {
		dir = ""
	}
	if x.opaqued[dir] {
		return nil
	}
	x.opaqued[dir] = true
	dst, err := x.resolve(entry, path.Join(dir, "x"))
	if err != nil {
		return err
	}
	if err := x.pruneLower(dir, filepath.Dir(dst)); err != nil {
		return fmt.Errorf("entry %q: opaque: %w", entry, err)
	}
	return nil
}

// pruneLower removes from the host directory dst (the rootfs's dir) what
// the current layer did not write, descending into the real directories
// (never symlinks) that the layer wrote or wrote below.
func (x *extractor) pruneLower(dir, dst string) error {
	ents, err := os.ReadDir(dst)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := x.ctx.Err(); err != nil {
			return err
		}
		rel := path.Join(dir, e.Name())
		p := filepath.Join(dst, e.Name())
		written := x.layer[rel] || x.layerDirs[rel]
		switch {
		case written && e.IsDir():
			if err := x.pruneLower(rel, p); err != nil {
				return err
			}
		case written:
		default:
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish sets directory mtimes, deepest first, once their children exist.
func (x *extractor) finish() error {
	dirs := make([]string, 0, len(x.dirs))
	for d := range x.dirs {
		dirs = append(dirs, d)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Lstat(d); err != nil {
			continue // removed by a later whiteout
		}
		t := x.dirs[d]
		if err := os.Chtimes(d, t, t); err != nil {
			return err
		}
	}
	return nil
}
