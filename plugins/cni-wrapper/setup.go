package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/sirupsen/logrus"
)

// runSetup is the image's main executable: it checks that every plugin the
// config names can run here, then reports ready and waits for ctx (SIGTERM or
// SIGINT). Any problem is reported on stderr, naming the plugin, and gives
// exit code 1; the daemon shows that line as the network's failure reason.
func runSetup(ctx context.Context, env environment, stdin io.Reader, stderr io.Writer) int {
	log := newLogger(stderr).WithField("op", "setup")
	b, err := io.ReadAll(stdin)
	if err != nil {
		log.Errorf("cannot read the config on stdin: %v", err)
		return 1
	}
	list, err := parseConfig(b)
	if err != nil {
		log.Errorf("invalid network config on stdin: %v", err)
		return 1
	}
	log = log.WithField("network", list.Name)
	if problems := checkPlugins(ctx, env, list); len(problems) > 0 {
		log.Error(strings.Join(problems, "; "))
		return 1
	}
	if err := os.MkdirAll(env.cacheDir, 0o700); err != nil {
		log.Errorf("CNI cache dir: %v", err)
		return 1
	}
	log.WithFields(logrus.Fields{
		"plugins":    strings.Join(pluginTypes(list), ","),
		"cniVersion": list.CNIVersion,
		"path":       strings.Join(env.cniPath, ":"),
	}).Info("ready")
	<-ctx.Done()
	log.Info("stopping")
	return 0
}

// pluginTypes lists every plugin the config names (each plugin's `type` and
// its `ipam.type`), in config order, without duplicates.
func pluginTypes(list *libcni.NetworkConfigList) []string {
	var out []string
	add := func(t string) {
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	for _, p := range list.Plugins {
		add(p.Network.Type)
		add(p.Network.IPAM.Type)
	}
	return out
}

// checkPlugins returns one message per plugin that is missing, does not
// answer VERSION, or does not support the config's cniVersion.
func checkPlugins(ctx context.Context, env environment, list *libcni.NetworkConfigList) []string {
	want := list.CNIVersion
	if want == "" {
		want = "0.1.0" // the spec's meaning of an absent cniVersion
	}
	cni := libcni.NewCNIConfig(env.cniPath, &pluginExec{stderr: io.Discard})
	var problems []string
	for _, t := range pluginTypes(list) {
		if _, err := (&pluginExec{}).FindInPath(t, env.cniPath); err != nil {
			problems = append(problems, fmt.Sprintf("plugin %q: not found in %s", t, strings.Join(env.cniPath, ":")))
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
