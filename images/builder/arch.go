package builder

import (
	"debug/elf"
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// archs are the architectures (GOARCH) the builder makes plugin images for,
// with the ELF machine their binaries must have and appc's name for them:
// those kurmad runs on (its seccomp filter knows both).
var archs = map[string]struct {
	machine elf.Machine
	appc    string
}{
	"amd64": {elf.EM_X86_64, "amd64"},
	"arm64": {elf.EM_AARCH64, "aarch64"},
}

// Archs returns the architectures (GOARCH) the builder makes images for,
// sorted.
func Archs() []string {
	var out []string
	for a := range archs {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// imageArch is arch, or the build host's when arch is "", checked to be
// one the builder makes images for.
func imageArch(arch string) (string, error) {
	if arch == "" {
		arch = runtime.GOARCH
	}
	if _, ok := archs[arch]; !ok {
		return "", fmt.Errorf("builder: architecture %q: images are built for %s", arch, strings.Join(Archs(), " and "))
	}
	return arch, nil
}

// appcArch is arch as appc's arch label spells it.
func appcArch(arch string) string { return archs[arch].appc }

// checkMachine refuses the executable p unless it is an ELF binary for
// arch: a binary built for another architecture would only fail when the
// image runs.
func checkMachine(p, arch string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("builder: %s: %w", p, err)
	}
	defer f.Close()
	if want := archs[arch].machine; f.Machine != want {
		return fmt.Errorf("builder: %s is a %s binary, the image is for %s (%s): build it with GOARCH=%s", p, f.Machine, arch, want, arch)
	}
	return nil
}
