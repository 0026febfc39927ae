package builder

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/imagefetch"
)

// otherArch is the architecture of Archs that is not the build host's.
func otherArch(t *testing.T) string {
	t.Helper()
	for _, a := range Archs() {
		if a != runtime.GOARCH {
			return a
		}
	}
	t.Fatal("no second architecture")
	return ""
}

// elfMachines returns the ELF machine of every ELF file among files (a
// rootfs as tar entries by name).
func elfMachines(t *testing.T, files map[string]tarFile) map[string]elf.Machine {
	t.Helper()
	out := map[string]elf.Machine{}
	for name, f := range files {
		if !bytes.HasPrefix(f.data, []byte(elf.ELFMAG)) {
			continue
		}
		ef, err := elf.NewFile(bytes.NewReader(f.data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = ef.Machine
	}
	return out
}

// TestCrossArchImages builds the plugin images for the architecture that
// is not the host's (arm64 on an amd64 host), cross-compiling every
// binary, and reads them back: each binary in every image is an ELF file
// for that architecture, and the ACI's arch label and the OCI config say
// so.
func TestCrossArchImages(t *testing.T) {
	arch := otherArch(t)
	out := t.TempDir()
	bin := filepath.Join(out, "bin")
	if err := Compile(context.Background(), "", bin, arch); err != nil {
		t.Fatal(err)
	}
	// Any executable of arch stands in for flanneld and kurma-netpol.
	stand := filepath.Join(bin, WrapperBinary)
	res, err := Build(context.Background(), Options{OutDir: out, BinDir: bin, SkipCompile: true, Arch: arch, Flanneld: stand, Netpol: stand})
	if err != nil {
		t.Fatal(err)
	}
	if res.Arch != arch {
		t.Errorf("Result.Arch %q, want %q", res.Arch, arch)
	}
	// kurma on this host refuses them, naming the platform they are for.
	log := logrus.New()
	log.SetOutput(io.Discard)
	f, err := imagefetch.New(imagefetch.Options{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	for uri, offered := range map[string]string{"file://" + res.OCIDir: OS + "/" + arch, "file://" + res.ACIPath: OS + "/" + appcArch(arch)} {
		_, err := f.Fetch(context.Background(), uri)
		var pe *imagefetch.PlatformError
		if !errors.As(err, &pe) || len(pe.Offered) != 1 || !strings.HasPrefix(pe.Offered[0], offered) || !strings.Contains(err.Error(), uri) {
			t.Errorf("fetching %s on this %s host: %v, want a PlatformError naming it and %s", uri, runtime.GOARCH, err, offered)
		}
	}
	want := archs[arch].machine
	for _, img := range []struct {
		name, aci, oci string
		binaries       int // at least
	}{
		{"cni-netplugin", res.ACIPath, res.OCIDir, 1 + len(plugins)},
		{"flannel", res.Flannel.ACIPath, res.Flannel.OCIDir, 2 + len(plugins)},
		{"netpol", res.Netpol.ACIPath, res.Netpol.OCIDir, 1},
	} {
		files, m := readACI(t, img.aci)
		if got, _ := m.Labels.Get("arch"); got != appcArch(arch) {
			t.Errorf("%s ACI: arch label %q, want %q", img.name, got, appcArch(arch))
		}
		machines := elfMachines(t, files)
		_, layer, cf := readLayout(t, img.oci)
		if cf.OS != OS || cf.Architecture != arch {
			t.Errorf("%s OCI config: %s/%s, want %s/%s", img.name, cf.OS, cf.Architecture, OS, arch)
		}
		layers, err := layer.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s OCI: %d layers, %v", img.name, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		for name, m := range elfMachines(t, tarFiles(t, raw)) {
			machines["oci:"+name] = m
		}
		if len(machines) < 2*img.binaries {
			t.Errorf("%s: %d ELF files in the ACI and the OCI layer, want at least %d", img.name, len(machines), 2*img.binaries)
		}
		for name, m := range machines {
			if m != want {
				t.Errorf("%s: %s is for %s, want %s", img.name, name, m, want)
			}
		}
	}
}

// TestArchRefusals: what cannot be built for another architecture is
// refused, naming why.
func TestArchRefusals(t *testing.T) {
	arch := otherArch(t)
	hostBin := compiled(t)
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"unknown architecture", Options{Arch: "s390x", SkipCompile: true, BinDir: hostBin}, `architecture "s390x"`},
		{"host tools", Options{Arch: arch, SkipCompile: true, BinDir: hostBin, HostTools: []string{"nft"}}, "host tools [nft]"},
		{"binaries of the host's architecture", Options{Arch: arch, SkipCompile: true, BinDir: hostBin}, "GOARCH=" + arch},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.OutDir = t.TempDir()
			_, err := Build(context.Background(), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one saying %q", err, c.want)
			}
		})
	}
	_, err := BuildKurma(context.Background(), KurmaOptions{OutDir: t.TempDir(), Arch: arch, SkipCompile: true})
	if err == nil || !strings.Contains(err.Error(), "kurmad is cgo") {
		t.Fatalf("kurma's image for %s: err %v, want a refusal saying kurmad is cgo", arch, err)
	}
}
