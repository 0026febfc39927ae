package networkpod

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// ServiceAccountDir is where Kubernetes mounts a pod's service account
// (token, ca.crt, namespace), and where a plugin container of a network
// with kubernetes_credentials finds its own, read-only: client
// libraries' in-cluster config reads it there.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Environment variables kurmad reads its Kubernetes identity from (those
// of the kurma-node pod it runs in), and a network with
// kubernetes_credentials gets.
const (
	EnvServiceHost = "KUBERNETES_SERVICE_HOST"
	EnvServicePort = "KUBERNETES_SERVICE_PORT"
	EnvNodeName    = "NODE_NAME"
	// EnvCredentialsDir, when set, is the credentials root (see
	// Kubernetes.CredentialsDir) instead of <run_dir>/credentials:
	// kurma-node sets it; tests give a root of their own.
	EnvCredentialsDir = "KURMA_CREDENTIALS_DIR"
)

// ErrNoKubernetes means a network asks for kubernetes_credentials and
// has none to get: its generation does not start.
var ErrNoKubernetes = errors.New("no Kubernetes credentials for the network")

// Kubernetes is what the plugin container of a network with
// kubernetes_credentials gets: its own credentials directory
// bind-mounted read-only at ServiceAccountDir (a token of the network's
// ServiceAccount, which kurma-node rotates in place: each new file shows
// through), the API server's address and the node's name in its
// environment. Never kurmad's own token.
type Kubernetes struct {
	// CredentialsDir is the credentials root on kurmad's side: network
	// N's directory is netplugin.CredentialsDir(CredentialsDir, N).
	CredentialsDir string
	Host, Port     string // the API server (KUBERNETES_SERVICE_HOST, _PORT)
	NodeName       string // NODE_NAME
}

// KubernetesFromEnv is kurmad's Kubernetes identity from its
// environment, with the credentials root EnvCredentialsDir or else
// <runDir>/credentials; nil when kurmad runs outside Kubernetes (no
// KUBERNETES_SERVICE_HOST).
func KubernetesFromEnv(runDir string) *Kubernetes {
	host := os.Getenv(EnvServiceHost)
	if host == "" {
		return nil
	}
	dir := os.Getenv(EnvCredentialsDir)
	if dir == "" {
		dir = filepath.Join(runDir, "credentials")
	}
	return &Kubernetes{CredentialsDir: dir, Host: host, Port: os.Getenv(EnvServicePort), NodeName: os.Getenv(EnvNodeName)}
}

// check says what is missing for network to get k: the environment, or
// the token of its ServiceAccount (with the reason kurma-node gave).
func (k *Kubernetes) check(network string) error {
	if k == nil {
		return fmt.Errorf("%w: %s is not set (kurmad does not run in a Kubernetes pod)", ErrNoKubernetes, EnvServiceHost)
	}
	var missing []string
	if k.Port == "" {
		missing = append(missing, EnvServicePort)
	}
	if k.NodeName == "" {
		missing = append(missing, EnvNodeName)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %v not set", ErrNoKubernetes, missing)
	}
	dir := netplugin.CredentialsDir(k.CredentialsDir, network)
	for _, f := range []string{netplugin.TokenFile, netplugin.CAFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			why := "kurma-node has written none there"
			if b, err := os.ReadFile(netplugin.CredentialsProblem(k.CredentialsDir, network)); err == nil && len(bytes.TrimSpace(b)) > 0 {
				why, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
			}
			return fmt.Errorf("%w: no %s of ServiceAccount %s in %s: %s", ErrNoKubernetes, f, netplugin.ServiceAccount(network), dir, why)
		}
	}
	return nil
}

// kubernetesMounts is the read-only mount of the network's own
// credentials directory for a network with kubernetes_credentials; none
// without. The directory, not its files, is bound: kurma-node renames
// each new token into it, which the mount shows.
func (h *Host) kubernetesMounts(spec Spec) []*configs.Mount {
	if !spec.KubernetesCredentials || h.opts.Kubernetes == nil {
		return nil
	}
	return []*configs.Mount{{
		Source: netplugin.CredentialsDir(h.opts.Kubernetes.CredentialsDir, spec.Network), Destination: ServiceAccountDir, Device: "bind",
		Flags: unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC,
	}}
}

// containerEnv is the environment of every process of spec's container:
// the image's, and for a network with kubernetes_credentials the API
// server's address and the node's name.
func (h *Host) containerEnv(spec Spec) []string {
	env := imageEnv(spec.Image.App.Env)
	if k := h.opts.Kubernetes; spec.KubernetesCredentials && k != nil {
		env = append(env, EnvServiceHost+"="+k.Host, EnvServicePort+"="+k.Port, EnvNodeName+"="+k.NodeName)
	}
	return env
}
