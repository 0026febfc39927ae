package podaddrs

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
)

// pod is a pod with status.podIPs ips and, when status is not "", that
// network-status annotation.
func pod(status string, ips ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	if status != "" {
		p.Annotations = map[string]string{NetworkStatusAnnotation: status}
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, v1.PodIP{IP: ip})
	}
	return p
}

const twoNets = `[{"name":"podnet","interface":"eth0","ips":["10.1.0.5","fd00::5"],"default":true},
	{"name":"web","interface":"eth1","ips":["10.2.0.7/16"]},
	{"name":"storage","interface":"eth2","ips":["10.3.0.9"]}]`

func TestAddresses(t *testing.T) {
	tests := []struct {
		name string
		sel  Selection
		pod  *v1.Pod
		want []string
	}{
		{"one opted-in network from network-status", Selection{Networks: []string{"web"}}, pod(twoNets, "10.1.0.5"),
			[]string{"10.2.0.7"}},
		{"union in policy_networks order, each address once",
			Selection{Networks: []string{"web", "podnet"}, ClusterNetwork: "podnet"}, pod(twoNets, "10.1.0.5", "fd00::5"),
			[]string{"10.2.0.7", "10.1.0.5", "fd00::5"}},
		{"cluster network without network-status: status.podIPs", Selection{Networks: []string{"podnet"}, ClusterNetwork: "podnet"},
			pod("", "10.1.0.5", "fd00::5"), []string{"10.1.0.5", "fd00::5"}},
		{"status.podIPs count only for the cluster network", Selection{Networks: []string{"web"}, ClusterNetwork: "podnet"},
			pod("", "10.1.0.5"), nil},
		{"a cluster network that did not opt in adds nothing", Selection{Networks: []string{"storage"}, ClusterNetwork: "podnet"},
			pod(twoNets, "10.1.0.5"), []string{"10.3.0.9"}},
		{"malformed network-status is no attachment", Selection{Networks: []string{"web", "podnet"}, ClusterNetwork: "podnet"},
			pod(`{"name":"web"`, "10.1.0.5"), []string{"10.1.0.5"}},
		{"network-status of another shape", Selection{Networks: []string{"web"}}, pod(`{"name":"web","ips":["10.2.0.7"]}`), nil},
		{"addresses that are not addresses are left out", Selection{Networks: []string{"web"}},
			pod(`[{"name":"web","ips":["nope","10.2.0.8","","::ffff:10.2.0.9"]}]`), []string{"10.2.0.8", "10.2.0.9"}},
		{"no opted-in network", Selection{}, pod(twoNets, "10.1.0.5"), nil},
		{"hostNetwork pods have none", Selection{Networks: []string{"podnet"}, ClusterNetwork: "podnet"},
			func() *v1.Pod { p := pod(twoNets, "192.168.1.1"); p.Spec.HostNetwork = true; return p }(), nil},
		{"status.podIP alone", Selection{Networks: []string{"podnet"}, ClusterNetwork: "podnet"},
			func() *v1.Pod { p := pod(""); p.Status.PodIP = "10.1.0.6"; return p }(), []string{"10.1.0.6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range tt.sel.Addresses(tt.pod) {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRewrite(t *testing.T) {
	sel := Selection{Networks: []string{"web"}}
	p := pod(twoNets, "10.1.0.5")
	p.Status.PodIP = "10.1.0.5"
	sel.Rewrite(p)
	if p.Status.PodIP != "10.2.0.7" || len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != "10.2.0.7" {
		t.Fatalf("rewritten status: %+v", p.Status)
	}
	p = pod("", "10.1.0.5")
	p.Status.PodIP = "10.1.0.5"
	sel.Rewrite(p)
	if p.Status.PodIP != "" || len(p.Status.PodIPs) != 0 {
		t.Fatalf("a pod with no address on the networks keeps %+v", p.Status)
	}
}

// TestListWatch checks that what the informer's ListerWatcher hands on,
// listed or watched, is rewritten (the client is a fake: this is the
// logic above the API server, which test/k8s's TestNetpolDirect drives
// for real).
func TestListWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := pod(twoNets, "10.1.0.5")
	client := fake.NewClientset(p)
	lw := ListWatch(client, Selection{Networks: []string{"web"}})
	obj, err := lw.List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(obj.(*v1.PodList).Items[0].Status.PodIPs); got != "[{10.2.0.7}]" {
		t.Fatalf("listed pod IPs %s", got)
	}
	w, err := lw.Watch(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	q := pod(`[{"name":"web","ips":["10.2.0.8"]}]`, "10.1.0.6")
	q.Name = "q"
	if _, err := client.CoreV1().Pods("ns").Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.ResultChan():
		if got := fmt.Sprint(e.Object.(*v1.Pod).Status.PodIPs); e.Type != watch.Added || got != "[{10.2.0.8}]" {
			t.Fatalf("watched %s with pod IPs %s", e.Type, got)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
}
