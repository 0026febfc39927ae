package builder

import (
	"archive/tar"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// libDirs are searched, in order, for the shared libraries a host tool needs:
// Debian's multiarch directories of the build host's architecture, then the
// generic ones; they are also glibc's built-in search path on Debian, so the
// copies are found inside the image without an ld.so.cache.
var libDirs = []string{"/lib/" + multiarch[runtime.GOARCH], "/usr/lib/" + multiarch[runtime.GOARCH], "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// multiarch is Debian's multiarch triplet of each architecture in archs.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// hostTools returns rootfs entries for the named host programs (found in
// PATH, e.g. "nft" for bridge's ipMasq and portmap through nftables) with the
// ELF interpreter and every shared library they load, at the same paths as
// on the host. The result depends on the host's packages: an image built
// with host tools is reproducible only on the same machine.
func hostTools(names []string) ([]entry, error) {
	files := map[string]string{} // image path -> host file to copy
	var queue []string
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			return nil, fmt.Errorf("builder: host tool %q: %w", n, err)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		files[abs] = abs
		queue = append(queue, abs)
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		deps, err := elfDeps(files[p])
		if err != nil {
			return nil, fmt.Errorf("builder: host tool file %s: %w", p, err)
		}
		for _, d := range deps {
			if _, ok := files[d]; ok {
				continue
			}
			files[d] = d
			queue = append(queue, d)
		}
	}
	var es []entry
	for imgPath, src := range files {
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(real)
		if err != nil {
			return nil, err
		}
		es = append(es, entry{path: strings.TrimPrefix(imgPath, "/"), mode: int64(fi.Mode().Perm()), typ: tar.TypeReg, src: real})
	}
	return es, nil
}

// elfDeps returns the absolute paths of the interpreter and the libraries
// (DT_NEEDED) of the ELF file at p; a static binary has none.
func elfDeps(p string) ([]string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("reading interpreter: %w", err)
			}
			out = append(out, strings.TrimRight(string(b), "\x00"))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	for _, lib := range libs {
		found := ""
		for _, d := range libDirs {
			if _, err := os.Stat(path.Join(d, lib)); err == nil {
				found = path.Join(d, lib)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("library %s not found in %s", lib, strings.Join(libDirs, ", "))
		}
		out = append(out, found)
	}
	return out, nil
}

// withParents adds a directory entry for every missing parent of es's paths.
func withParents(es []entry) []entry {
	have := map[string]bool{}
	for _, e := range es {
		have[e.path] = true
	}
	out := es
	for _, e := range es {
		for d := path.Dir(e.path); d != "." && d != "/" && !have[d]; d = path.Dir(d) {
			have[d] = true
			out = append(out, entry{path: d, mode: 0o755, typ: tar.TypeDir})
		}
	}
	return out
}
