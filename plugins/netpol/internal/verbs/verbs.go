// Package verbs is what kurma-netpol's image answers at /opt/network
// (docs/plugin-contract.md). A NetworkPolicy network polices the pods of
// other networks; no pod attaches to it, so add and check refuse, del and
// gc have nothing to release, and status says whether the daemon (the
// image's main executable) is enforcing.
package verbs

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Names are the verbs, as the image's /opt/network executables are named.
var Names = []string{"add", "check", "del", "gc", "status"}

// CNI error codes (CNI spec, "Error codes").
const (
	codeInvalidConfig  = 7
	codeNotAvailable   = 50
	defaultCNIVersion  = "1.0.0"
	defaultNetworkName = "netpol"
)

// Run answers verb with args and the plugin config on stdin, writing the
// result or a CNI error object on stdout and logs on stderr; it returns
// the exit status. readyFile names the daemon's readiness file for a
// network.
func Run(verb string, args []string, stdin io.Reader, stdout, stderr io.Writer, readyFile func(network string) string) int {
	conf := readConfig(stdin)
	switch verb {
	case "add", "check":
		return fail(stdout, stderr, conf, codeInvalidConfig,
			fmt.Sprintf("network %q enforces NetworkPolicy; pods do not attach to it", conf.Name),
			"name the networks it polices in the pod instead")
	case "del":
		// Nothing was attached: an add always fails. Succeeding keeps a
		// pod whose add named this network deletable (its rollback runs
		// del here too).
		fmt.Fprintf(stderr, "kurma-netpol del: network %q: pods do not attach to it; nothing to delete\n", conf.Name)
		return 0
	case "gc":
		return 0
	case "status":
		return status(stdout, stderr, conf, readyFile(conf.Name))
	}
	fmt.Fprintf(stderr, "kurma-netpol: unknown verb %q (%s)\n", verb, strings.Join(Names, ", "))
	return 2
}

// status is ready when the daemon's readiness file names a live process.
func status(stdout, stderr io.Writer, conf pluginConfig, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return fail(stdout, stderr, conf, codeNotAvailable,
			fmt.Sprintf("network %q: kurma-netpol is not enforcing yet: its informers have not synced or its nftables table is not installed", conf.Name),
			fmt.Sprintf("%s: %v", path, err))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err == nil && pid > 0 && syscall.Kill(pid, 0) == syscall.ESRCH {
		return fail(stdout, stderr, conf, codeNotAvailable,
			fmt.Sprintf("network %q: kurma-netpol is not running (its readiness file %s names process %d, which is gone)", conf.Name, path, pid), "")
	}
	return 0
}

type pluginConfig struct {
	Name       string `json:"name"`
	CNIVersion string `json:"cniVersion"`
}

// readConfig reads what the verbs need of the config, leniently: they
// answer the same whatever else it holds.
func readConfig(r io.Reader) pluginConfig {
	var c pluginConfig
	if b, err := io.ReadAll(r); err == nil {
		_ = json.Unmarshal(b, &c)
	}
	if c.Name == "" {
		c.Name = defaultNetworkName
	}
	if c.CNIVersion == "" {
		c.CNIVersion = defaultCNIVersion
	}
	return c
}

// fail prints a CNI error object on stdout and the message on stderr.
func fail(stdout, stderr io.Writer, conf pluginConfig, code int, msg, details string) int {
	b, _ := json.Marshal(struct {
		CNIVersion string `json:"cniVersion"`
		Code       int    `json:"code"`
		Msg        string `json:"msg"`
		Details    string `json:"details,omitempty"`
	}{conf.CNIVersion, code, msg, details})
	fmt.Fprintf(stdout, "%s\n", b)
	if details != "" {
		msg += ": " + details
	}
	fmt.Fprintf(stderr, "kurma-netpol: %s\n", msg)
	return 1
}
