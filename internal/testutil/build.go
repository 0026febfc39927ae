package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// BuildOptions says how a command is built. The zero value is a static
// binary (CGO_ENABLED=0), fit for a plugin image without a libc.
type BuildOptions struct {
	// Cgo builds with cgo, as kurmad needs it (libcontainer's nsenter).
	Cgo bool
	// Version is stamped into the binary as main.version.
	Version string
	// Failpoints builds with the kurma_failpoints tag (podnet.FailpointsTag),
	// as the end-to-end tests' kurmad: KURMA_FAILPOINT then works. Release
	// builds (`make build`) leave failpoints out.
	Failpoints bool
}

// failpointsTag is podnet.FailpointsTag (testutil does not import podnet).
const failpointsTag = "kurma_failpoints"

// GoBuild builds the Go commands pkgs (relative to the repository root, such
// as "./cmd/kurma-agent", or import paths of dependencies, such as the CNI
// reference plugins) into dir with one `go build`, with the build tag every
// kurma build uses (and kurma_failpoints when o says so). Each binary is named after its package's last element.
func GoBuild(dir string, o BuildOptions, pkgs ...string) error {
	tags := "containers_image_openpgp"
	if o.Failpoints {
		tags += "," + failpointsTag
	}
	args := []string{"build", "-tags", tags, "-trimpath"}
	if o.Version != "" {
		args = append(args, "-ldflags", "-X main.version="+o.Version)
	}
	args = append(args, "-o", dir+string(filepath.Separator))
	args = append(args, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot()
	cmd.Env = os.Environ()
	if !o.Cgo {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]BuildOptions{} // package → how it was built
)

// Build builds pkgs (see GoBuild) once per test binary into one directory,
// which it returns: every command a test binary builds sits beside the
// others, as kurmad needs kurma-agent beside it. Building a package again
// with other options is an error. Call RemoveBuilds from TestMain.
func Build(t testing.TB, o BuildOptions, pkgs ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir == "" {
		d, err := os.MkdirTemp("", "kurma-build-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	var missing []string
	for _, p := range pkgs {
		prev, ok := built[p]
		switch {
		case !ok:
			missing = append(missing, p)
		case prev != o:
			t.Fatalf("%s is built once per test binary: with %+v already, now asked for %+v", p, prev, o)
		}
	}
	if len(missing) > 0 {
		if err := GoBuild(buildDir, o, missing...); err != nil {
			t.Fatal(err)
		}
		for _, p := range missing {
			built[p] = o
		}
	}
	return buildDir
}

// BuildStatic builds the command at pkg with Build, statically, and returns
// the binary's path.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	return filepath.Join(Build(t, BuildOptions{}, pkg), filepath.Base(pkg))
}

// InitBinary builds kurma-init (with cgo: libcontainer's nsenter), which
// starts the plugin containers, and returns its path.
func InitBinary(t testing.TB) string {
	t.Helper()
	return filepath.Join(Build(t, BuildOptions{Cgo: true}, "./cmd/kurma-init"), "kurma-init")
}

// RemoveBuilds deletes what Build built.
func RemoveBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
		buildDir = ""
		built = map[string]BuildOptions{}
	}
}

// CopyExecutable copies the file src to dst (creating parents) as mode 0755.
func CopyExecutable(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(fmt.Errorf("copy %s: %w", src, err))
	}
}
