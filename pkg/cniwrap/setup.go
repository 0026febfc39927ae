package cniwrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// runSetup is the image's main executable: it checks that every plugin the
// config names can run here (unless a start before checked the same
// config and plugin files: checkedMark), then reports ready and waits for
// ctx (SIGTERM or SIGINT); for a config with a "flannel" object it runs
// flanneld meanwhile (runFlanneld). Any problem is reported on stderr,
// naming the plugin, and gives
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
	key := checkedKey(env, exec, list, b)
	mark := filepath.Join(env.CacheDir, checkedMark)
	checked, asked := false, 0
	if old, err := os.ReadFile(mark); err == nil && key != "" && string(old) == key {
		checked = true
	}
	if !checked {
		var problems []string
		if problems, asked = checkPlugins(ctx, env, exec, list); len(problems) > 0 {
			log.Error(strings.Join(problems, "; "))
			return 1
		}
	}
	if err := os.MkdirAll(env.CacheDir, 0o700); err != nil {
		log.Errorf("CNI cache dir: %v", err)
		return 1
	}
	if !checked && key != "" {
		// Best effort: without it the next start checks again.
		_ = os.WriteFile(mark, []byte(key), 0o600)
	}
	fields := logrus.Fields{
		"plugins":    strings.Join(PluginTypes(list), ","),
		"cniVersion": list.CNIVersion,
		"path":       strings.Join(env.CNIPath, ":"),
		"checked":    checkedWhen(checked),
		"asked":      asked, // plugins asked VERSION: the others' answers were kept
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

// checkedWhen is the ready line's word for when the plugins were checked.
func checkedWhen(before bool) string {
	if before {
		return "before"
	}
	return "now"
}

// checkedMark is the file in the cache dir (the network's state dir,
// kept across starts) where setup notes what it checked: a start with the
// same config and the same plugin files (checkedKey) skips the checks,
// which run every plugin once (VERSION).
const checkedMark = "kurma-setup-checked"

// checkedKey identifies what setup checks: the config and, for each plugin
// it names, the file found for it (fileIdentity). "" when a plugin is not
// found: the checks then run, and say so.
func checkedKey(env Env, exec invoke.Exec, list *libcni.NetworkConfigList, config []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q\n%q\n", config, env.CNIPath)
	for _, t := range PluginTypes(list) {
		path, err := exec.FindInPath(t, env.CNIPath)
		if err != nil {
			return ""
		}
		id := fileIdentity(path)
		if id == "" {
			return ""
		}
		fmt.Fprintf(h, "%q %s\n", path, id)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fileIdentity tells a plugin file from another at the same path: its
// size, mtime and inode (an image unchanged keeps them all, in every
// container of it). "" when it cannot be read.
func fileIdentity(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d %d %d", fi.Size(), fi.ModTime().UnixNano(), ino)
}

// readVersions reads the VERSION answers a start before this one (or
// kurmad, from another network of the image) left in dir; an unreadable
// file is none.
func readVersions(dir string) netplugin.PluginVersions {
	known := netplugin.PluginVersions{}
	if b, err := os.ReadFile(filepath.Join(dir, netplugin.VersionsFile)); err == nil {
		_ = json.Unmarshal(b, &known)
	}
	return known
}

// writeVersions keeps known in dir for the next start. Best effort:
// without it the next start asks again.
func writeVersions(dir string, known netplugin.PluginVersions) {
	b, err := json.Marshal(known)
	if err != nil || len(b) > netplugin.MaxVersionsFile || os.MkdirAll(dir, 0o700) != nil {
		return
	}
	tmp := filepath.Join(dir, netplugin.VersionsFile+".tmp")
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, netplugin.VersionsFile))
	}
}

// pluginMissing says that plugin t is not in CNI_PATH, or returns "":
// setup's first check and status's.
func pluginMissing(env Env, exec invoke.Exec, t string) string {
	if _, err := exec.FindInPath(t, env.CNIPath); err != nil {
		return fmt.Sprintf("plugin %q: not found in %s", t, strings.Join(env.CNIPath, ":"))
	}
	return ""
}

// checkPlugins returns one message per plugin that is missing, does not
// answer VERSION, or does not support the config's cniVersion, and how many
// plugins it asked VERSION: a plugin file whose answer is kept in the cache
// dir (netplugin.VersionsFile) is not asked again.
func checkPlugins(ctx context.Context, env Env, exec invoke.Exec, list *libcni.NetworkConfigList) (problems []string, asked int) {
	want := list.CNIVersion
	if want == "" {
		want = "0.1.0" // the spec's meaning of an absent cniVersion
	}
	cni := libcni.NewCNIConfig(env.CNIPath, exec)
	known := readVersions(env.CacheDir)
	learned := false
	for _, t := range PluginTypes(list) {
		if msg := pluginMissing(env, exec, t); msg != "" {
			problems = append(problems, msg)
			continue
		}
		path, _ := exec.FindInPath(t, env.CNIPath)
		id := fileIdentity(path)
		supported := known[path].Versions
		if k, ok := known[path]; !ok || id == "" || k.File != id {
			asked++
			info, err := cni.GetVersionInfo(ctx, t)
			if err != nil {
				problems = append(problems, fmt.Sprintf("plugin %q: VERSION failed: %v", t, err))
				continue
			}
			supported = info.SupportedVersions()
			if id != "" {
				known[path] = netplugin.PluginVersion{File: id, Versions: supported}
				learned = true
			}
		}
		if !slices.Contains(supported, want) {
			problems = append(problems, fmt.Sprintf("plugin %q: does not support cniVersion %s (it supports %s)",
				t, want, strings.Join(supported, ", ")))
		}
	}
	if learned {
		writeVersions(env.CacheDir, known)
	}
	return problems, asked
}
