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
		h := &tar.Header{Name: n, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(1704067200, 0)}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gw.Close(); err != nil {
		return err
	}
	return out.Close()
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
