// Package cniwrap is the logic of kurma's cni-wrapper, the program installed
// as /opt/network/{add,del,check,gc,status,setup} in kurma's plugin images: it runs the
// CNI plugins a network config names through libcni. The cni-wrapper binary
// is a thin main over Run; kurma-agent calls Run in-process for images that
// declare their /opt/network executables are this wrapper at the version
// netplugin.WrapperVersion (netplugin.WrapperAnnotationACI,
// netplugin.WrapperLabelOCI), so a call costs no wrapper process.
package cniwrap

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Environment variables the wrapper reads.
const (
	EnvCNIPath  = "CNI_PATH"            // plugin search path, ':'-separated
	EnvCacheDir = "KURMA_CNI_CACHE_DIR" // libcni cache (results for DEL/CHECK)

	DefaultCNIPath  = "/opt/cni/bin"
	DefaultCacheDir = "/var/lib/cni"
)

// Env is what the wrapper takes from its environment.
type Env struct {
	CNIPath  []string
	CacheDir string
	// FlannelDir holds flanneld's subnet.env and net-conf.json
	// (EnvFlannelDir; "" → DefaultFlannelDir); Flanneld is flanneld's
	// path (EnvFlanneld; "" → DefaultFlanneld). See flannel.go.
	FlannelDir, Flanneld string
}

// EnvFrom reads Env from a "KEY=value" list (os.Environ() or an image's).
func EnvFrom(environ []string) Env {
	get := func(key string) string {
		v := ""
		for _, kv := range environ {
			if k, val, ok := strings.Cut(kv, "="); ok && k == key {
				v = val // the last one wins, as with getenv on a duplicated key in Go
			}
		}
		return v
	}
	e := Env{CacheDir: get(EnvCacheDir), FlannelDir: get(EnvFlannelDir), Flanneld: get(EnvFlanneld)}
	if p := get(EnvCNIPath); p != "" {
		e.CNIPath = filepath.SplitList(p)
	}
	if len(e.CNIPath) == 0 {
		e.CNIPath = []string{DefaultCNIPath}
	}
	if e.CacheDir == "" {
		e.CacheDir = DefaultCacheDir
	}
	return e
}

// Verbs returns the wrapper's verbs: the names it is installed under in
// netplugin.Dir, every verb of the contract and setup, the image's main
// executable.
func Verbs() []string { return append(netplugin.VerbNames(), "setup") }

// IsVerb reports whether s is one of the wrapper's verbs.
func IsVerb(s string) bool {
	return slices.Contains(Verbs(), s)
}

// Run runs one verb with args (<netns path> <container id> [ifname] for
// add, del and check; none for gc, status and setup) and the plugin config
// on stdin, and returns the process exit code the wrapper binary exits
// with: 0, 1 (a CNI error object on stdout, one line on stderr) or 2
// (unknown verb). Plugins run through exec; nil → PluginExec, which forks
// them with os/exec and streams their stderr to stderr.
func Run(ctx context.Context, verb string, args []string, stdin io.Reader, stdout, stderr io.Writer, env Env, exec invoke.Exec) int {
	if exec == nil {
		exec = &PluginExec{Stderr: stderr}
		if verb == "setup" {
			exec = &PluginExec{Stderr: io.Discard} // VERSION chatter is noise
		}
	}
	if verb == "setup" {
		return runSetup(ctx, env, exec, stdin, stderr)
	}
	if v, ok := netplugin.VerbOf(netplugin.Path(verb)); ok && verbs[v.Name] != nil {
		return runCommand(ctx, env, exec, v, args, stdin, stdout, stderr)
	}
	newLogger(stderr).WithField("op", verb).Error("unknown verb")
	return 2
}
