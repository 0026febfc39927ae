package builder

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"
)

// entry is one file of the rootfs; paths are relative ("opt/network/add").
type entry struct {
	path string
	mode int64
	typ  byte   // tar.TypeDir, tar.TypeReg, tar.TypeLink or tar.TypeSymlink
	src  string // TypeReg: file to copy from (when data is nil)
	data []byte // TypeReg: literal content
	link string // TypeLink: target, relative like path; TypeSymlink: the link's text
	// mtime, when set, replaces epoch as the entry's modification time.
	mtime time.Time
}

const passwd = "root:x:0:0:root:/:/sbin/nologin\n"
const group = "root:x:0:\n"

// rootfs lists the image's files, sorted by path (parents before children,
// a hard link's target before the link).
func rootfs(binDir string, tools []string, arch string) ([]entry, error) {
	var es []entry
	dir := func(p string, mode int64) { es = append(es, entry{path: p, mode: mode, typ: tar.TypeDir}) }
	for _, d := range []string{"dev", "etc", "opt", "opt/cni", "opt/cni/bin", "opt/network", "proc", "run", "sys", "var", "var/lib", "var/lib/cni"} {
		dir(d, 0o755)
	}
	dir("tmp", 0o1777)
	es = append(es,
		entry{path: "etc/passwd", mode: 0o644, typ: tar.TypeReg, data: []byte(passwd)},
		entry{path: "etc/group", mode: 0o644, typ: tar.TypeReg, data: []byte(group)},
	)

	wrapper := filepath.Join(binDir, WrapperBinary)
	if err := checkExecutable(wrapper, arch); err != nil {
		return nil, err
	}
	// One copy of the wrapper; the other names are hard links to it (the
	// wrapper dispatches on argv[0], so each name behaves as its verb).
	names := WrapperNames()
	first := path.Join(NetworkDir[1:], names[0])
	es = append(es, entry{path: first, mode: 0o755, typ: tar.TypeReg, src: wrapper})
	for _, n := range names[1:] {
		es = append(es, entry{path: path.Join(NetworkDir[1:], n), mode: 0o755, typ: tar.TypeLink, link: first})
	}
	for _, name := range PluginNames() {
		src := filepath.Join(binDir, name)
		if err := checkExecutable(src, arch); err != nil {
			return nil, err
		}
		es = append(es, entry{path: path.Join(CNIBinDir[1:], name), mode: 0o755, typ: tar.TypeReg, src: src})
	}
	if len(tools) > 0 {
		extra, err := hostTools(tools)
		if err != nil {
			return nil, err
		}
		for _, e := range extra {
			for _, have := range es {
				if have.path == e.path {
					return nil, fmt.Errorf("builder: host tool file /%s clashes with the image's own", e.path)
				}
			}
		}
		es = withParents(append(es, extra...))
	}
	sort.Slice(es, func(i, j int) bool { return es[i].path < es[j].path })
	return es, nil
}

func (e entry) modTime() time.Time {
	if e.mtime.IsZero() {
		return epoch
	}
	return e.mtime
}

// PluginNames returns the keys of the plugins shipped in the image, sorted.
func PluginNames() []string {
	names := make([]string, 0, len(plugins))
	for n := range plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// checkExecutable refuses p unless it is an executable ELF file for arch.
func checkExecutable(p, arch string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("builder: missing binary (compile first): %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("builder: %s is not an executable file", p)
	}
	return checkMachine(p, arch)
}

// writeTar writes es to w as a tar stream with every name prefixed by prefix
// ("rootfs/" for an ACI, "" for an OCI layer) and fixed owner and times.
// extra entries (e.g. the ACI manifest) are written first.
func writeTar(w io.Writer, prefix string, pre []entry, es []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range append(append([]entry(nil), pre...), es...) {
		hdr := &tar.Header{
			Typeflag: e.typ,
			Name:     prefix + e.path,
			Mode:     e.mode,
			ModTime:  e.modTime(),
			Format:   tar.FormatPAX,
		}
		if e.typ == tar.TypeDir {
			hdr.Name += "/"
		}
		var content io.Reader
		switch e.typ {
		case tar.TypeLink:
			hdr.Linkname = prefix + e.link
		case tar.TypeSymlink:
			hdr.Linkname = e.link // as written: relative to the link's directory
		case tar.TypeReg:
			if e.data != nil {
				hdr.Size = int64(len(e.data))
			} else {
				f, err := os.Open(e.src)
				if err != nil {
					return err
				}
				defer f.Close()
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				hdr.Size = fi.Size()
				content = f
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		if e.typ == tar.TypeReg {
			if content == nil {
				_, err := tw.Write(e.data)
				if err != nil {
					return err
				}
			} else if n, err := io.Copy(tw, content); err != nil || n != hdr.Size {
				return fmt.Errorf("%s: copied %d of %d bytes: %v", e.src, n, hdr.Size, err)
			}
		}
	}
	return tw.Close()
}
