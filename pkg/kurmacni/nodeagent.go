package kurmacni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/kurma-project/kurma/pkg/api"
)

// The node agent is kurma-node on a Kubernetes node (package k8snode),
// which knows what kurmad does not: namespaces, which networks each may
// join, and the Pod objects. A conflist naming its socket ("node_agent")
// makes kurma-cni ask it, for a Kubernetes pod, whether the pod's
// namespace may join the networks before the ADD (refused: the sandbox
// fails, and kurma-node puts an Event on the pod), and tell it the pod's
// attachments after (kurma-node writes NetworkStatusAnnotation on the
// Pod, retrying; a failure there never fails the sandbox).
const (
	// AccessPath answers an AccessRequest: 200, or 403 with the reason
	// (an AgentError) when a network refuses the pod's namespace.
	AccessPath = "/v1/access"
	// AttachedPath takes an AttachedReport: 202 once queued.
	AttachedPath = "/v1/attached"
	// NetworkStatusAnnotation is multus' de-facto standard annotation
	// listing a pod's attachments (a JSON list of NetworkStatus).
	NetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
)

// ErrAccessDenied is the CNI error code of an ADD refused because the
// pod's namespace may not join a network it asks for (a plugin-specific
// code: CNI reserves 100 and up for them).
const ErrAccessDenied uint = 120

// AccessRequest asks whether a pod may join networks: kurma networks by
// name, and the networks Multus' annotations reference, which the node
// agent resolves (AccessAnswer).
type AccessRequest struct {
	Namespace  string       `json:"namespace"`
	Pod        string       `json:"pod"`
	UID        string       `json:"uid,omitempty"`
	Networks   []string     `json:"networks"`
	References []NetworkRef `json:"references,omitempty"`
}

// AccessAnswer is a granted AccessRequest: for each of its References,
// in order, the kurma network serving it.
type AccessAnswer struct {
	Networks []string `json:"networks"`
}

// AttachedReport is a pod's attachments once its ADD succeeded.
type AttachedReport struct {
	Namespace   string          `json:"namespace"`
	Pod         string          `json:"pod"`
	UID         string          `json:"uid,omitempty"`
	ContainerID string          `json:"container_id"`
	Status      []NetworkStatus `json:"status"`
}

// NetworkStatus is one attachment as multus reports it in
// NetworkStatusAnnotation.
type NetworkStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	MAC       string   `json:"mac,omitempty"`
	Default   bool     `json:"default,omitempty"`
	DNS       *DNS     `json:"dns,omitempty"`
}

// DNS is a NetworkStatus' DNS settings (CNI's DNS).
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// AgentError is the node agent's refusal: its message names the network
// and the rule.
type AgentError struct {
	Message string `json:"error"`
}

func (e *AgentError) Error() string { return e.Message }

// agentClient talks to the node agent on its unix socket.
type agentClient struct {
	sock string
	http *http.Client
}

func newAgentClient(sock string) *agentClient {
	return &agentClient{sock: sock, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
}

// post sends body to path; a 4xx answer is an *AgentError. A 2xx answer
// with a body is decoded into out, when not nil.
func (a *agentClient) post(ctx context.Context, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://kurma-node"+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("kurma-node at %s: %w", a.sock, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		if out != nil && len(bytes.TrimSpace(msg)) > 0 {
			if err := json.Unmarshal(msg, out); err != nil {
				return fmt.Errorf("kurma-node at %s: its answer: %w", a.sock, err)
			}
		}
		return nil
	}
	ae := &AgentError{}
	if json.Unmarshal(msg, ae) != nil || ae.Message == "" {
		ae.Message = fmt.Sprintf("kurma-node at %s: %s", a.sock, resp.Status)
	}
	if resp.StatusCode/100 == 4 {
		return ae
	}
	return fmt.Errorf("kurma-node at %s: %s", a.sock, ae.Message)
}

// checkAccess asks the node agent whether the pod may join the networks
// of sel, and which kurma network serves each of its Multus references:
// the names, in order (nil when it has none, or an agent that does not
// resolve them answered). A refusal is ErrAccessDenied with its reason (a
// reference to nothing it can serve is one); an agent that does not
// answer fails the ADD too ("try again later"), as kurma-cni cannot tell
// whether the pod may join.
func (c *call) checkAccess(k8s podRef, sel *podSelection) ([]string, *types.Error) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	refs := sel.references()
	var answer AccessAnswer
	err := newAgentClient(c.conf.NodeAgent).post(ctx, AccessPath, AccessRequest{Namespace: k8s.namespace, Pod: k8s.name, UID: k8s.uid,
		Networks: sel.kurmaNames(), References: refs}, &answer)
	var ae *AgentError
	switch {
	case err == nil:
		if len(refs) == 0 || len(answer.Networks) == 0 {
			return nil, nil
		}
		return answer.Networks, nil
	case errors.As(err, &ae):
		return nil, types.NewError(ErrAccessDenied, "kurma-cni: "+ae.Message, "")
	default:
		return nil, types.NewError(types.ErrTryAgainLater, "kurma-cni: cannot check the pod's access to its networks: "+err.Error(), "")
	}
}

// reportAttached tells the node agent the pod's attachments. It only
// queues them there: a failure is noted on stderr, and never fails the
// ADD.
func (c *call) reportAttached(k8s podRef, pod *api.Pod, stderr io.Writer) {
	status, err := attachmentStatus(pod.Attachments)
	if err == nil {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		err = newAgentClient(c.conf.NodeAgent).post(ctx, AttachedPath, AttachedReport{
			Namespace: k8s.namespace, Pod: k8s.name, UID: k8s.uid, ContainerID: c.args.ContainerID, Status: status}, nil)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kurma-cni: pod %s/%s: its network-status annotation is not written: %v\n", k8s.namespace, k8s.name, err)
	}
}

// attachmentStatus is the pod's attachments in multus' shape: the first is
// the default (the cluster network's).
func attachmentStatus(atts []api.Attachment) ([]NetworkStatus, error) {
	out := make([]NetworkStatus, 0, len(atts))
	for i, a := range atts {
		r, err := create.Create(current.ImplementedSpecVersion, a.Result)
		if err != nil {
			return nil, fmt.Errorf("network %q: %w", a.Network, err)
		}
		res, err := current.NewResultFromResult(r)
		if err != nil {
			return nil, fmt.Errorf("network %q: %w", a.Network, err)
		}
		st := NetworkStatus{Name: a.Network, Interface: a.Interface, Default: i == 0}
		for j, ifc := range res.Interfaces {
			if ifc.Name == a.Interface && ifc.Sandbox != "" {
				st.MAC = ifc.Mac
				for _, ip := range res.IPs {
					if ip.Interface != nil && *ip.Interface == j {
						st.IPs = append(st.IPs, ip.Address.IP.String())
					}
				}
			}
		}
		if st.IPs == nil {
			for _, ip := range res.IPs {
				st.IPs = append(st.IPs, ip.Address.IP.String())
			}
		}
		if d := res.DNS; len(d.Nameservers)+len(d.Search)+len(d.Options) > 0 || d.Domain != "" {
			st.DNS = &DNS{Nameservers: d.Nameservers, Domain: d.Domain, Search: d.Search, Options: d.Options}
		}
		out = append(out, st)
	}
	return out, nil
}

// podRef is a Kubernetes pod as CNI_ARGS name it.
type podRef struct{ namespace, name, uid string }

// kubernetesPod is the pod CNI_ARGS name (K8S_POD_NAMESPACE,
// K8S_POD_NAME, K8S_POD_UID), ok false for a pod that is not Kubernetes'.
func kubernetesPod(pairs [][2]string) (podRef, bool) {
	var p podRef
	for _, kv := range pairs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			p.namespace = kv[1]
		case "K8S_POD_NAME":
			p.name = kv[1]
		case "K8S_POD_UID":
			p.uid = kv[1]
		}
	}
	return p, p.namespace != "" && p.name != ""
}
