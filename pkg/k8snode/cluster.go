package k8snode

import (
	"bytes"
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
// the pod's service account token, and asks for its networks' tokens
// (RequestToken): kurma carries no Kubernetes client library for three
// GETs and a POST.
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
	Method  string // "" for GET
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
	method := e.Method
	if method == "" {
		method = http.MethodGet
	}
	return fmt.Sprintf("%s %s: %d %s", method, e.Path, e.Code, msg)
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

// Token is a service account token the TokenRequest API issued.
type Token struct {
	Token   string
	Expires time.Time
}

// RequestToken asks the TokenRequest API for a token of ServiceAccount
// name in namespace, valid for expiration (the API server may shorten or
// lengthen it: Expires says) and bound to the API server's own audience
// (no audiences asked).
func (c *Cluster) RequestToken(ctx context.Context, namespace, name string, expiration time.Duration) (*Token, error) {
	body, err := json.Marshal(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"spec": map[string]any{"expirationSeconds": int64(expiration / time.Second)}})
	if err != nil {
		return nil, err
	}
	var tr struct {
		Status struct {
			Token               string    `json:"token"`
			ExpirationTimestamp time.Time `json:"expirationTimestamp"`
		} `json:"status"`
	}
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/serviceaccounts/" + url.PathEscape(name) + "/token"
	if err := c.do(ctx, http.MethodPost, path, body, http.StatusCreated, &tr); err != nil {
		return nil, err
	}
	if tr.Status.Token == "" || tr.Status.ExpirationTimestamp.IsZero() {
		return nil, fmt.Errorf("POST %s: the answer holds no token and expiry", path)
	}
	return &Token{Token: tr.Status.Token, Expires: tr.Status.ExpirationTimestamp}, nil
}

func (c *Cluster) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, http.StatusOK, out)
}

// do sends a request with the pod's token and decodes the answer, which
// must have status want, into out.
func (c *Cluster) do(ctx context.Context, method, path string, body []byte, want int, out any) error {
	token, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return fmt.Errorf("the service account token: %w", err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Server+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("the API server at %s: %w", c.Server, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		se := &StatusError{Method: method, Path: path, Code: resp.StatusCode}
		var status struct{ Reason, Message string }
		if json.Unmarshal(data, &status) == nil {
			se.Reason, se.Message = status.Reason, status.Message
		}
		return se
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}
