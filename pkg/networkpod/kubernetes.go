package networkpod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// ServiceAccountDir is where Kubernetes mounts a pod's service account
// (token, ca.crt, namespace), and where a plugin container of a network
// with kubernetes_credentials finds kurmad's, read-only: client
// libraries' in-cluster config reads it there.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Environment variables kurmad reads its Kubernetes identity from (those
// of the kurma-node pod it runs in), and a network with
// kubernetes_credentials gets.
const (
	EnvServiceHost = "KUBERNETES_SERVICE_HOST"
	EnvServicePort = "KUBERNETES_SERVICE_PORT"
	EnvNodeName    = "NODE_NAME"
	// EnvServiceAccountDir, when set, is where kurmad reads the service
	// account from instead of ServiceAccountDir (a kurmad that does not
	// run in a pod, tests).
	EnvServiceAccountDir = "KURMA_SERVICE_ACCOUNT_DIR"
)

// ErrNoKubernetes means a network asks for kubernetes_credentials and
// kurmad has none to give: its generation does not start.
var ErrNoKubernetes = errors.New("kurmad has no Kubernetes credentials")

// Kubernetes is kurmad's Kubernetes identity, which the plugin container
// of a network with kubernetes_credentials gets: the service account dir
// bind-mounted read-only at ServiceAccountDir (the kubelet's token
// rotation shows through), the API server's address and the node's name
// in its environment.
type Kubernetes struct {
	ServiceAccountDir string // on kurmad's side
	Host, Port        string // the API server (KUBERNETES_SERVICE_HOST, _PORT)
	NodeName          string // NODE_NAME
}

// KubernetesFromEnv is kurmad's Kubernetes identity from its environment
// and ServiceAccountDir (EnvServiceAccountDir), nil when it runs outside
// Kubernetes (no KUBERNETES_SERVICE_HOST).
func KubernetesFromEnv() *Kubernetes {
	host := os.Getenv(EnvServiceHost)
	if host == "" {
		return nil
	}
	dir := os.Getenv(EnvServiceAccountDir)
	if dir == "" {
		dir = ServiceAccountDir
	}
	return &Kubernetes{ServiceAccountDir: dir, Host: host, Port: os.Getenv(EnvServicePort), NodeName: os.Getenv(EnvNodeName)}
}

// check says what is missing for a network to get k.
func (k *Kubernetes) check() error {
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
	for _, f := range []string{"token", "ca.crt"} {
		if _, err := os.Stat(filepath.Join(k.ServiceAccountDir, f)); err != nil {
			return fmt.Errorf("%w: the service account: %w", ErrNoKubernetes, err)
		}
	}
	return nil
}

// kubernetesMounts is the read-only service account mount of a network
// with kubernetes_credentials; none without.
func (h *Host) kubernetesMounts(spec Spec) []*configs.Mount {
	if !spec.KubernetesCredentials || h.opts.Kubernetes == nil {
		return nil
	}
	return []*configs.Mount{{
		Source: h.opts.Kubernetes.ServiceAccountDir, Destination: ServiceAccountDir, Device: "bind",
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
