package netplugin

import "path/filepath"

// A network with kubernetes_credentials gets Kubernetes credentials of its
// own, never kurmad's: a token of the ServiceAccount named after it in
// kurma's namespace, which kurma-node requests (TokenRequest), writes and
// rotates in a directory of the network's own under a credentials root,
// and which kurmad bind-mounts read-only at the in-cluster path of that
// network's containers. What follows is the layout both sides share.

// ServiceAccountPrefix starts the name of every network's ServiceAccount.
const ServiceAccountPrefix = "kurma-net-"

// ServiceAccount is the name of network's ServiceAccount,
// kurma-net-<network>.
func ServiceAccount(network string) string { return ServiceAccountPrefix + network }

// The files of a network's credentials directory: those of a pod's
// service account volume.
const (
	TokenFile     = "token"
	CAFile        = "ca.crt"
	NamespaceFile = "namespace"
)

// CredentialsDir is network's credentials directory under root: what its
// containers see at the in-cluster path.
func CredentialsDir(root, network string) string { return filepath.Join(root, network) }

// CredentialsProblem is the file under root in which kurma-node says why
// network has no token (the ServiceAccount missing, the API server's
// refusal): beside the networks' directories, under a name no network
// can have (names start with a letter or a digit), and not in the
// directory the plugin sees.
func CredentialsProblem(root, network string) string {
	return filepath.Join(root, ".problems", network)
}
