package imagefetch

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotFound is returned by Get and Remove for an ID that is not in the
// store.
var ErrNotFound = errors.New("image not found")

const (
	imageFile = "image.json"
	refsFile  = "refs.json"
	tmpPrefix = ".tmp-"
)

// idPattern is what a stored image ID looks like; anything else is refused
// before it is joined to a path.
var idPattern = regexp.MustCompile(`^(sha512-[0-9a-f]{128}|sha256-[0-9a-f]{64})$`)

// ref is what the refs index remembers about a URI or name.
type ref struct {
	ID string `json:"id"`
	// file:// sources: size and mtime of the file when it was hashed.
	Size    int64 `json:"size,omitempty"`
	MtimeNs int64 `json:"mtimeNs,omitempty"`
	// http(s) and discovery: validators for a conditional GET.
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"lastModified,omitempty"`
	// docker: the digest the registry reported for the reference.
	Digest string `json:"digest,omitempty"`
}

// store is the on-disk image store: <dir>/<id>/{image.json,rootfs/} and
// <dir>/refs.json.
type store struct {
	dir      string
	mu       sync.Mutex // guards refs.json
	commitMu sync.Mutex // serialises renames into place
}

func openStore(dir string) (*store, error) {
	if dir == "" {
		return nil, errors.New("imagefetch: Options.Dir is required")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("image store %s: %w", abs, err)
	}
	s := &store{dir: abs}
	// Leftovers of fetches killed half-way are never images: remove them.
	ents, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", abs, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.RemoveAll(filepath.Join(abs, e.Name())); err != nil {
				return nil, fmt.Errorf("image store: removing leftover %s: %w", e.Name(), err)
			}
		}
	}
	return s, nil
}

// tempDir makes a fresh <dir>/.tmp-<random> directory.
// build returns the stored image with meta's ID, or makes it: fill writes
// the root filesystem into a fresh temp dir, which is then committed under
// meta.ID, or removed whatever failed.
func (f *Fetcher) build(kind string, meta *Image, fill func(rootfs string) error) (*Image, error) {
	if have, err := f.store.get(meta.ID); err == nil {
		return have, nil
	}
	tmp, err := f.store.tempDir(kind)
	if err != nil {
		return nil, err
	}
	rootfs := filepath.Join(tmp, "rootfs")
	err = os.Mkdir(rootfs, 0o755)
	if err == nil {
		err = fill(rootfs)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	meta.Fetched = time.Now()
	img, err := f.store.commit(tmp, meta)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return img, nil
}

func (s *store) tempDir(kind string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	p := filepath.Join(s.dir, tmpPrefix+kind+"-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(p, 0o700); err != nil {
		return "", err
	}
	return p, nil
}

func (s *store) imageDir(id string) string { return filepath.Join(s.dir, id) }

// get reads a committed image. A directory without image.json (a crash
// between mkdir and commit cannot produce one, but a hand-made one can) is
// not an image.
func (s *store) get(id string) (*Image, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("image %q: %w", id, ErrNotFound)
	}
	b, err := os.ReadFile(filepath.Join(s.imageDir(id), imageFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("image %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("image %q: corrupt %s: %w", id, imageFile, err)
	}
	img.Rootfs = filepath.Join(s.imageDir(id), "rootfs")
	return &img, nil
}

// commit moves a finished temp dir (with rootfs/ inside) into place as id,
// writing image.json last. If the image is already stored the temp dir is
// discarded and the stored one returned.
func (s *store) commit(tmp string, img *Image) (*Image, error) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if have, err := s.get(img.ID); err == nil {
		// Another URI brought the same content in meanwhile.
		os.RemoveAll(tmp)
		return have, nil
	}
	img.Rootfs = filepath.Join(s.imageDir(img.ID), "rootfs")
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(tmp, imageFile), b); err != nil {
		return nil, err
	}
	// One syncfs flushes the whole unpacked tree before the rename makes
	// it visible, so a crash never leaves an image.json over missing data.
	if err := syncFS(tmp); err != nil {
		return nil, err
	}
	final := s.imageDir(img.ID)
	if _, err := os.Lstat(final); err == nil {
		// A directory without image.json: not an image, replace it.
		if err := os.RemoveAll(final); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, fmt.Errorf("image %s: commit: %w", img.ID, err)
	}
	if err := syncDir(s.dir); err != nil {
		return nil, err
	}
	return s.get(img.ID)
}

// setVerification rewrites a stored image's image.json with v as its
// record: a new file renamed over the old one, so readers see one or the
// other.
func (s *store) setVerification(id string, v *Verification) (*Image, error) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	img, err := s.get(id)
	if err != nil {
		return nil, err
	}
	img.Verified = v
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return nil, err
	}
	dir := s.imageDir(id)
	tmp := filepath.Join(dir, tmpPrefix+imageFile)
	if err := writeFileSync(tmp, b); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, imageFile)); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("image %s: recording its verification: %w", id, err)
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	return img, nil
}

func (s *store) list() ([]*Image, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []*Image
	for _, e := range ents {
		if !e.IsDir() || !idPattern.MatchString(e.Name()) {
			continue
		}
		img, err := s.get(e.Name())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *store) remove(id string) error {
	if _, err := s.get(id); err != nil {
		return err
	}
	s.mu.Lock()
	refs, err := s.readRefs()
	if err == nil {
		changed := false
		for k, r := range refs {
			if r.ID == id {
				delete(refs, k)
				changed = true
			}
		}
		if changed {
			err = s.writeRefs(refs)
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	// Rename first so the image disappears atomically; a crash during the
	// RemoveAll leaves a .tmp- dir that the next New cleans.
	tmp, err := s.tempDir("rm")
	if err != nil {
		return err
	}
	s.commitMu.Lock()
	err = os.Rename(s.imageDir(id), filepath.Join(tmp, id))
	s.commitMu.Unlock()
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("image %s: remove: %w", id, err)
	}
	return os.RemoveAll(tmp)
}

func (s *store) readRefs() (map[string]ref, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, refsFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]ref{}, nil
	}
	if err != nil {
		return nil, err
	}
	refs := map[string]ref{}
	if err := json.Unmarshal(b, &refs); err != nil {
		return nil, fmt.Errorf("image store: corrupt %s: %w", refsFile, err)
	}
	return refs, nil
}

func (s *store) writeRefs(refs map[string]ref) error {
	b, err := json.MarshalIndent(refs, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, tmpPrefix+refsFile)
	if err := writeFileSync(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, refsFile)); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// lookup returns the ref for key, if any.
func (s *store) lookup(key string) (ref, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs, err := s.readRefs()
	if err != nil {
		return ref{}, false
	}
	r, ok := refs[key]
	return r, ok
}

func (s *store) setRef(key string, r ref) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs, err := s.readRefs()
	if err != nil {
		refs = map[string]ref{} // a corrupt index is rebuilt, images stay
	}
	refs[key] = r
	return s.writeRefs(refs)
}

func writeFileSync(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncFS(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
