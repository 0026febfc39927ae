package k8snode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServiceAccountDir is where Kubernetes mounts a pod's service account
// credentials: token, ca.crt, namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Cluster reads the few API objects kurma-node needs over plain HTTPS with
// the pod's service account token: kurma carries no Kubernetes client
// library for three GETs.
type Cluster struct {
	// Server is the API server's base URL, e.g. https://10.96.0.1:443.
	Server string
	// TokenFile is re-read for every request: the kubelet rotates
	// projected service account tokens.
	TokenFile string
	HTTP      *http.Client
}

// InCluster is the API server as a pod sees it: KUBERNETES_SERVICE_HOST
// and _PORT, the service account's token and CA under dir
// (ServiceAccountDir when "").
func InCluster(dir string) (*Cluster, error) {
	if dir == "" {
		dir = ServiceAccountDir
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not running in a Kubernetes pod")
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("the service account's CA: %w (does the pod have a service account token mounted?)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no PEM certificate", filepath.Join(dir, "ca.crt"))
	}
	return &Cluster{
		Server:    "https://" + net.JoinHostPort(host, port),
		TokenFile: filepath.Join(dir, "token"),
		HTTP: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: 10 * time.Second,
		}},
	}, nil
}

// StatusError is an answer of the API server other than 200: its HTTP
// status and the Status object's reason and message.
type StatusError struct {
	Path    string
	Code    int
	Reason  string
	Message string
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("GET %s: %d %s", e.Path, e.Code, msg)
}

// Gone reports whether err says the object, or kurma's access to it, no
// longer exists: not found, or credentials or permissions revoked (what
// removing kurma's ServiceAccount or RBAC does).
func Gone(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == http.StatusNotFound || se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden
}

// ObjectMeta is the part of an object's metadata kurma-node reads.
type ObjectMeta struct {
	Name              string           `json:"name"`
	Namespace         string           `json:"namespace"`
	UID               string           `json:"uid"`
	DeletionTimestamp *time.Time       `json:"deletionTimestamp,omitempty"`
	OwnerReferences   []OwnerReference `json:"ownerReferences,omitempty"`
}

// OwnerReference names an object's controller.
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Controller *bool  `json:"controller,omitempty"`
}

// NodeObject is the part of a Node kurma-node reads.
type NodeObject struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     struct {
		PodCIDR  string   `json:"podCIDR"`
		PodCIDRs []string `json:"podCIDRs"`
	} `json:"spec"`
	Status struct {
		Addresses []NodeAddress `json:"addresses"`
	} `json:"status"`
}

// NodeAddress is one of a Node's status.addresses.
type NodeAddress struct {
	Type    string `json:"type"` // InternalIP, ExternalIP, Hostname, ...
	Address string `json:"address"`
}

// PodObject is the part of a Pod kurma-node reads.
type PodObject struct {
	Metadata ObjectMeta `json:"metadata"`
}

// DaemonSetObject is the part of a DaemonSet kurma-node reads.
type DaemonSetObject struct {
	Metadata ObjectMeta `json:"metadata"`
}

// Node reads the Node called name.
func (c *Cluster) Node(ctx context.Context, name string) (*NodeObject, error) {
	var n NodeObject
	return &n, c.get(ctx, "/api/v1/nodes/"+url.PathEscape(name), &n)
}

// Pod reads a Pod.
func (c *Cluster) Pod(ctx context.Context, namespace, name string) (*PodObject, error) {
	var p PodObject
	return &p, c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), &p)
}

// DaemonSet reads a DaemonSet.
func (c *Cluster) DaemonSet(ctx context.Context, namespace, name string) (*DaemonSetObject, error) {
	var d DaemonSetObject
	return &d, c.get(ctx, "/apis/apps/v1/namespaces/"+url.PathEscape(namespace)+"/daemonsets/"+url.PathEscape(name), &d)
}

func (c *Cluster) get(ctx context.Context, path string, out any) error {
	token, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return fmt.Errorf("the service account token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("the API server at %s: %w", c.Server, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Path: path, Code: resp.StatusCode}
		var status struct{ Reason, Message string }
		if json.Unmarshal(body, &status) == nil {
			se.Reason, se.Message = status.Reason, status.Message
		}
		return se
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
