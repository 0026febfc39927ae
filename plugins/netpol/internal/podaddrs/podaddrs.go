// Package podaddrs decides which addresses of a pod NetworkPolicy applies
// to. kurma attaches a pod to several networks; only the networks that
// opted in are policed. The pods the daemon (and kube-network-policies'
// engine in it) sees carry, as status.podIPs, the union of their
// addresses on those networks and nothing else, so a policy selecting a
// pod applies to its addresses on every opted-in network and to none on
// the others, and a pod with no address on them is no policy peer.
package podaddrs

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NetworkStatusAnnotation is the multus-style annotation kurma writes on a
// pod once its sandbox is attached: a JSON list of NetworkStatus.
const NetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"

// NetworkStatus is one entry of NetworkStatusAnnotation: one attachment.
type NetworkStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	MAC       string   `json:"mac,omitempty"`
	Default   bool     `json:"default,omitempty"`
}

// Selection is which networks are policed.
type Selection struct {
	// Networks are the networks that opted in (policy_networks).
	Networks []string
	// ClusterNetwork is the network whose address Kubernetes reports as
	// the pod IP (status.podIPs); "" when none of the pod IPs counts.
	ClusterNetwork string
}

// ParseNetworkStatus reads a pod's NetworkStatusAnnotation: nil when it is
// missing or not a JSON list of attachments (kurma writes it only once the
// sandbox is attached, and anyone may write it wrong).
func ParseNetworkStatus(pod *v1.Pod) []NetworkStatus {
	s, ok := pod.Annotations[NetworkStatusAnnotation]
	if !ok {
		return nil
	}
	var st []NetworkStatus
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		return nil
	}
	return st
}

// Addresses are the pod's addresses NetworkPolicy applies to: for each
// network of s, the IPs of the pod's network-status entries of that name,
// and status.podIPs when it is s.ClusterNetwork; each once, in that
// order. An address may be written "10.1.0.5" or "10.1.0.5/16"; anything
// that is not an address is left out. hostNetwork pods have none (the
// library ignores them too).
func (s Selection) Addresses(pod *v1.Pod) []netip.Addr {
	if pod.Spec.HostNetwork {
		return nil
	}
	status := ParseNetworkStatus(pod)
	var out []netip.Addr
	add := func(text string) {
		a, ok := parseAddr(text)
		if ok && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, n := range s.Networks {
		for _, e := range status {
			if e.Name == n {
				for _, ip := range e.IPs {
					add(ip)
				}
			}
		}
		if n == s.ClusterNetwork {
			for _, ip := range pod.Status.PodIPs {
				add(ip.IP)
			}
			if len(pod.Status.PodIPs) == 0 && pod.Status.PodIP != "" {
				add(pod.Status.PodIP)
			}
		}
	}
	return out
}

func parseAddr(text string) (netip.Addr, bool) {
	if strings.Contains(text, "/") {
		p, err := netip.ParsePrefix(text)
		if err != nil {
			return netip.Addr{}, false
		}
		return p.Addr().Unmap(), true
	}
	a, err := netip.ParseAddr(text)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// Rewrite sets pod's status.podIPs (and status.podIP) to its Addresses:
// what the policy engine takes for the pod's IPs.
func (s Selection) Rewrite(pod *v1.Pod) {
	addrs := s.Addresses(pod)
	ips := make([]v1.PodIP, 0, len(addrs))
	for _, a := range addrs {
		ips = append(ips, v1.PodIP{IP: a.String()})
	}
	pod.Status.PodIPs = ips
	pod.Status.PodIP = ""
	if len(ips) > 0 {
		pod.Status.PodIP = ips[0].IP
	}
}

// ListWatch lists and watches every pod through client, each rewritten
// by s (Rewrite) before anyone sees it. The rewrite happens here rather
// than in an informer transform because kube-network-policies sets its own
// transform on the pod informer it is given, replacing any other.
func ListWatch(client kubernetes.Interface, s Selection) cache.ListerWatcher {
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := pods.List(ctx, opts)
			if err != nil {
				return nil, err
			}
			for i := range list.Items {
				s.Rewrite(&list.Items[i])
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := pods.Watch(ctx, opts)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if pod, ok := e.Object.(*v1.Pod); ok && e.Type != watch.Bookmark && e.Type != watch.Error {
					s.Rewrite(pod)
				}
				return e, true
			}), nil
		},
	}
}

// NewInformer is a pod informer over ListWatch, in the shape the library's
// NewController takes.
func NewInformer(client kubernetes.Interface, s Selection) coreinformers.PodInformer {
	inf := cache.NewSharedIndexInformer(ListWatch(client, s), &v1.Pod{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	return podInformer{inf}
}

type podInformer struct{ inf cache.SharedIndexInformer }

func (p podInformer) Informer() cache.SharedIndexInformer { return p.inf }
func (p podInformer) Lister() corelisters.PodLister {
	return corelisters.NewPodLister(p.inf.GetIndexer())
}
