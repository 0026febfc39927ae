package enforcer

import (
	"fmt"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"

	"github.com/kurma-project/kurma/plugins/netpol/internal/podaddrs"
)

// TestWithoutNRI holds withoutNRI to the library version in go.mod: the
// controller has the field, and after the call it is no longer nil (a nil
// one crashes the daemon on the first packet of an address no pod has;
// test/k8s's TestNetpolDirect sends such packets).
func TestWithoutNRI(t *testing.T) {
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := networkpolicy.NewController(client, f.Networking().V1().NetworkPolicies(), f.Core().V1().Namespaces(),
		podaddrs.NewInformer(client, podaddrs.Selection{}), nil, nil, nil, nil,
		networkpolicy.Config{NodeName: "n", NFTableName: "t", NRIdisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	field := reflect.ValueOf(ctrl).Elem().FieldByName("nriPlugin")
	if !field.IsNil() {
		t.Fatal("the library made an NRI plugin with NRI disabled: withoutNRI may be unneeded")
	}
	if err := withoutNRI(ctrl); err != nil {
		t.Fatal(err)
	}
	if field.IsNil() {
		t.Fatal("nriPlugin still nil")
	}
}

func TestAddresses(t *testing.T) {
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	policies := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	pod := func(ns, name, node string, lbl map[string]string, ips ...string) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl}, Spec: v1.PodSpec{NodeName: node}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, v1.PodIP{IP: ip})
		}
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	web := map[string]string{"app": "web"}
	pod("a", "web1", "here", web, "10.0.0.2", "fd00::2")
	pod("a", "web2", "there", web, "10.0.1.2") // another node's
	pod("a", "db", "here", map[string]string{"app": "db"}, "10.0.0.3")
	pod("b", "web3", "here", web, "10.0.0.4") // no policy in b
	pod("a", "web4", "here", web)             // no address on the policed networks
	pod("c", "any", "here", nil, "10.0.0.5")  // selected by an empty selector
	pod("c", "dup", "here", nil, "10.0.0.2")  // the same address twice: once
	for _, np := range []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web"}, Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: web}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "all"}},
	} {
		if err := policies.Add(np); err != nil {
			t.Fatal(err)
		}
	}
	e := &enforcer{node: "here", pods: corelisters.NewPodLister(pods), policies: networkinglisters.NewNetworkPolicyLister(policies)}
	if got := fmt.Sprint(e.addresses()); got != "[10.0.0.2 10.0.0.5 fd00::2]" {
		t.Fatalf("addresses %s", got)
	}
}
