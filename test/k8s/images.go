package k8stest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The cluster's own images, imported offline: the sandbox (pause) image
// containerd's CRI needs, and the workloads' busybox.
const (
	PauseImage   = "kurma.test/pause:1"
	BusyboxImage = "kurma.test/busybox:1"
)

// busyboxApplets are linked to /bin/busybox in the workload image.
var busyboxApplets = []string{"sh", "httpd", "ip", "sleep", "hostname", "cat", "echo", "wget", "ls", "mkdir", "true", "grep",
	"dd", "wc", "head", "chmod", "nc", "ping", "ping6", "seq", "tr", "sed", "timeout"}

// file is one file of a one-layer image.
type file struct {
	path string // relative, "bin/sh"
	mode int64
	data []byte
	link string // a symlink's target
	dir  bool
}

// writeImages builds pause and netbench (cmd/pause and cmd/netbench in
// moduleDir) and writes both images into one docker-archive at dst.
func writeImages(ctx context.Context, moduleDir, dst string) error {
	bins := map[string][]byte{"pause": nil, "netbench": nil}
	for name := range bins {
		out := filepath.Join(filepath.Dir(dst), name)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/"+name)
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := runCmd(cmd); err != nil {
			return fmt.Errorf("building %s: %v\n%s", name, err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		bins[name] = b
	}
	pause := bins["pause"]
	bb, err := staticBusybox()
	if err != nil {
		return err
	}
	pauseImg, err := oneLayer([]file{{path: "pause", mode: 0o755, data: pause}}, []string{"/pause"}, nil)
	if err != nil {
		return err
	}
	files := []file{{path: "bin", dir: true, mode: 0o755}, {path: "bin/busybox", mode: 0o755, data: bb},
		{path: "bin/netbench", mode: 0o755, data: bins["netbench"]},
		{path: "tmp", dir: true, mode: 0o1777}, {path: "www", dir: true, mode: 0o755}}
	for _, a := range busyboxApplets {
		files = append(files, file{path: "bin/" + a, link: "busybox"})
	}
	bbImg, err := oneLayer(files, nil, []string{"/bin/sh"})
	if err != nil {
		return err
	}
	return writeDockerArchive(dst, map[string]image{PauseImage: pauseImg, BusyboxImage: bbImg})
}

// staticBusybox is the host's busybox, which must be static (Debian's
// busybox-static) to run in an image of its own.
func staticBusybox() ([]byte, error) {
	p, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox: %w (install busybox-static)", err)
	}
	f, err := elf.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is not static: install busybox-static", p)
		}
	}
	return os.ReadFile(p)
}

// image is a one-layer image: its layer (an uncompressed tar) and config.
type image struct {
	layer  []byte
	config []byte
}

func oneLayer(files []file, entrypoint, cmd []string) (image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range files {
		h := &tar.Header{Name: f.path, Mode: f.mode, ModTime: mtime, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		switch {
		case f.dir:
			h.Typeflag, h.Name, h.Size = tar.TypeDir, f.path+"/", 0
		case f.link != "":
			h.Typeflag, h.Linkname, h.Mode, h.Size = tar.TypeSymlink, f.link, 0o777, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return image{}, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return image{}, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return image{}, err
	}
	layer := buf.Bytes()
	config := map[string]any{
		"architecture": "amd64", "os": "linux", "created": mtime,
		"config": map[string]any{"Entrypoint": entrypoint, "Cmd": cmd, "Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
	}
	cb, err := json.Marshal(config)
	if err != nil {
		return image{}, err
	}
	return image{layer: layer, config: cb}, nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// writeDockerArchive writes images (by name) as one docker-archive, the
// `docker save` format that ctr images import reads.
func writeDockerArchive(dst string, images map[string]image) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	type entry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	// An image under several names is written once, with all its names.
	names := make([]string, 0, len(images))
	for name := range images {
		names = append(names, name)
	}
	sort.Strings(names)
	var manifest []entry
	byID := map[string]int{}
	for _, name := range names {
		img := images[name]
		id := strings.TrimPrefix(digest(img.config), "sha256:")
		layerID := strings.TrimPrefix(digest(img.layer), "sha256:")
		if i, ok := byID[id+layerID]; ok {
			manifest[i].RepoTags = append(manifest[i].RepoTags, name)
			continue
		}
		if err := put(id+".json", img.config); err != nil {
			return err
		}
		if err := put(layerID+"/layer.tar", img.layer); err != nil {
			return err
		}
		byID[id+layerID] = len(manifest)
		manifest = append(manifest, entry{Config: id + ".json", RepoTags: []string{name}, Layers: []string{layerID + "/layer.tar"}})
	}
	mb, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	if err := put("manifest.json", mb); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
