package testutil

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"testing"
	"time"
)

// DeriveACI writes dst, a gzip'd ACI made from the ACI src (plain or gzip
// tar): every entry copied as is, the manifest's "version" label set to
// version (so the image ID and the store entry differ from src's), and each
// host file of files added as an executable at its rootfs path
// (e.g. "/opt/cni/bin/cnitest" → a built binary), replacing any entry there.
func DeriveACI(t testing.TB, src, dst, version string, files map[string]string) {
	t.Helper()
	if err := deriveACI(src, dst, version, files); err != nil {
		t.Fatalf("derive ACI %s from %s: %v", dst, src, err)
	}
}

func deriveACI(src, dst, version string, files map[string]string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	br := bufio.NewReader(in)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		r = gz
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	gw := gzip.NewWriter(out)
	tw := tar.NewWriter(gw)

	added := map[string]string{} // tar name → host file
	for p, host := range files {
		added["rootfs/"+strings.TrimPrefix(path.Clean(p), "/")] = host
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if _, ok := added[name]; ok {
			continue
		}
		if name == "manifest" {
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if data, err = setVersionLabel(data, version); err != nil {
				return err
			}
			h.Size = int64(len(data))
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := writeExecutables(tw, added); err != nil {
		return err
	}
	return closeACI(tw, gw, out)
}

// aciModTime is every written entry's mtime, so builds are reproducible.
var aciModTime = time.Unix(1704067200, 0)

// writeExecutables writes each tar name of added, in order, as an
// executable with the content of the host file added[name].
func writeExecutables(tw *tar.Writer, added map[string]string) error {
	names := make([]string, 0, len(added))
	for n := range added {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		data, err := os.ReadFile(added[n])
		if err != nil {
			return err
		}
		h := &tar.Header{Name: n, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: aciModTime}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return nil
}

// closeACI finishes an ACI's tar, its gzip stream and its file.
func closeACI(tw *tar.Writer, gw *gzip.Writer, out *os.File) error {
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gw.Close(); err != nil {
		return err
	}
	return out.Close()
}

// WriteACI writes dst, a gzip'd ACI of its own (not derived from kurma's
// image): named name, for linux/amd64, whose app runs exec as root and
// whose rootfs holds each host file of files as an executable at its path
// (e.g. "/opt/network/add" → a built binary), parent directories included.
// It declares no cni-wrapper, so kurma runs its /opt/network executables as
// they are: a third-party plugin image.
func WriteACI(t testing.TB, dst, name string, exec []string, files map[string]string) {
	t.Helper()
	if err := writeACI(dst, name, exec, files); err != nil {
		t.Fatalf("write ACI %s: %v", dst, err)
	}
}

func writeACI(dst, name string, exec []string, files map[string]string) error {
	manifest, err := json.Marshal(map[string]any{
		"acKind": "ImageManifest", "acVersion": "0.8.11", "name": name,
		"labels": []map[string]string{{"name": "version", "value": "1"}, {"name": "os", "value": "linux"}, {"name": "arch", "value": "amd64"}},
		"app":    map[string]any{"exec": exec, "user": "0", "group": "0"},
	})
	if err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	gw := gzip.NewWriter(out)
	tw := tar.NewWriter(gw)
	if err := tw.WriteHeader(&tar.Header{Name: "manifest", Mode: 0o644, Size: int64(len(manifest)), Typeflag: tar.TypeReg, ModTime: aciModTime}); err != nil {
		return err
	}
	if _, err := tw.Write(manifest); err != nil {
		return err
	}
	added := map[string]string{}
	dirs := map[string]bool{"rootfs": true}
	for p, host := range files {
		n := "rootfs/" + strings.TrimPrefix(path.Clean(p), "/")
		added[n] = host
		for d := path.Dir(n); d != "rootfs"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirNames := make([]string, 0, len(dirs))
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames) // parents before children
	for _, d := range dirNames {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: aciModTime}); err != nil {
			return err
		}
	}
	if err := writeExecutables(tw, added); err != nil {
		return err
	}
	return closeACI(tw, gw, out)
}

// setVersionLabel sets (or adds) the "version" label of an appc manifest.
func setVersionLabel(manifest []byte, version string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(manifest, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	labels, _ := m["labels"].([]any)
	found := false
	for _, l := range labels {
		if lm, ok := l.(map[string]any); ok && lm["name"] == "version" {
			lm["value"] = version
			found = true
		}
	}
	if !found {
		labels = append(labels, map[string]any{"name": "version", "value": version})
	}
	m["labels"] = labels
	return json.Marshal(m)
}
