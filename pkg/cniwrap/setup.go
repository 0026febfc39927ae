package cniwrap

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/sirupsen/logrus"
)

// runSetup is the image's main executable: it checks that every plugin the
// config names can run here, then reports ready and waits for ctx (SIGTERM or
// SIGINT); for a config with a "flannel" object it runs flanneld meanwhile
// (runFlanneld). Any problem is reported on stderr, naming the plugin, and gives
// exit code 1; the daemon shows that line as the network's failure reason.
func runSetup(ctx context.Context, env Env, exec invoke.Exec, stdin io.Reader, stderr io.Writer) int {
	log := newLogger(stderr).WithField("op", "setup")
	b, err := io.ReadAll(stdin)
	if err != nil {
		log.Errorf("cannot read the config on stdin: %v", err)
		return 1
	}
	list, err := ParseConfig(b)
	if err != nil {
		log.Errorf("invalid network config on stdin: %v", err)
		return 1
	}
	log = log.WithField("network", list.Name)
	fc, err := ParseFlannelConfig(b)
	if err != nil {
		log.Errorf("invalid network config on stdin: %v", err)
		return 1
	}
	if fc == nil && hasFlannel(list) {
		log.Errorf("invalid network config on stdin: a plugin of type %q needs the network's %q object (how to run flanneld)", FlannelType, keyFlannel)
		return 1
	}
	if problems := checkPlugins(ctx, env, exec, list); len(problems) > 0 {
		log.Error(strings.Join(problems, "; "))
		return 1
	}
	if err := os.MkdirAll(env.CacheDir, 0o700); err != nil {
		log.Errorf("CNI cache dir: %v", err)
		return 1
	}
	fields := logrus.Fields{
		"plugins":    strings.Join(PluginTypes(list), ","),
		"cniVersion": list.CNIVersion,
		"path":       strings.Join(env.CNIPath, ":"),
	}
	if fc != nil {
		log.WithFields(fields).Info("plugins found")
		return runFlanneld(ctx, env, list, fc, log, stderr)
	}
	log.WithFields(fields).Info("ready")
	<-ctx.Done()
	log.Info("stopping")
	return 0
}

// PluginTypes lists every plugin the config names (each plugin's `type` and
// its `ipam.type`; for a "flannel" plugin, those of what it stands for), in
// config order, without duplicates.
func PluginTypes(list *libcni.NetworkConfigList) []string {
	var out []string
	add := func(t string) {
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	for _, p := range list.Plugins {
		if p.Network.Type == FlannelType {
			t, it := delegateTypes(p)
			add(t)
			add(it)
			continue
		}
		add(p.Network.Type)
		add(p.Network.IPAM.Type)
	}
	return out
}

// checkPlugins returns one message per plugin that is missing, does not
// answer VERSION, or does not support the config's cniVersion.
func checkPlugins(ctx context.Context, env Env, exec invoke.Exec, list *libcni.NetworkConfigList) []string {
	want := list.CNIVersion
	if want == "" {
		want = "0.1.0" // the spec's meaning of an absent cniVersion
	}
	cni := libcni.NewCNIConfig(env.CNIPath, exec)
	var problems []string
	for _, t := range PluginTypes(list) {
		if _, err := exec.FindInPath(t, env.CNIPath); err != nil {
			problems = append(problems, fmt.Sprintf("plugin %q: not found in %s", t, strings.Join(env.CNIPath, ":")))
			continue
		}
		info, err := cni.GetVersionInfo(ctx, t)
		if err != nil {
			problems = append(problems, fmt.Sprintf("plugin %q: VERSION failed: %v", t, err))
			continue
		}
		if !slices.Contains(info.SupportedVersions(), want) {
			problems = append(problems, fmt.Sprintf("plugin %q: does not support cniVersion %s (it supports %s)",
				t, want, strings.Join(info.SupportedVersions(), ", ")))
		}
	}
	return problems
}
