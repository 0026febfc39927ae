// Command flanneld is kurma's flanneld: the daemon of kurma's flannel image
// (pkg/cniwrap runs it), written on flannel's packages
// (github.com/flannel-io/flannel, a module dependency). It does what the
// image needs and no more: the kube subnet manager (and etcd's, which
// kurma's tests use), the vxlan and host-gw backends, IPv4, IPv6 or both,
// nftables for its forward and masquerade rules (the image has nft, not
// iptables), subnet.env for the CNI side.
//
// A module of its own so that kurma's go.mod never carries flannel's
// dependencies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/coreos/pkg/flagutil"
	"github.com/flannel-io/flannel/pkg/version"
	"k8s.io/klog/v2"
)

// options are flanneld's flags: those kurma's image (pkg/cniwrap) and
// tests pass, with flannel's names, so each is also read from
// FLANNELD_<NAME> (--kube-api-url from FLANNELD_KUBE_API_URL).
type options struct {
	kubeSubnetMgr bool
	kubeAPIURL    string
	kubeconfig    string
	etcdEndpoints string
	etcdPrefix    string
	netConfPath   string
	subnetFile    string
	ipMasq        bool
	ifaces        ifaceList
	version       bool
}

// ifaceList is --iface, given once per interface to try, in order.
type ifaceList []string

func (l *ifaceList) String() string { return strings.Join(*l, ",") }

func (l *ifaceList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// envPrefix names the environment variables flags are read from.
const envPrefix = "FLANNELD"

// parseFlags reads args (without the program name), then the environment
// for the flags args leave unset.
func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("flanneld", flag.ContinueOnError)
	fs.BoolVar(&o.kubeSubnetMgr, "kube-subnet-mgr", false, "lease the Node's spec.podCIDRs from the Kubernetes API (else etcd)")
	fs.StringVar(&o.kubeAPIURL, "kube-api-url", "", "the Kubernetes API server's URL (default: in-cluster config)")
	fs.StringVar(&o.kubeconfig, "kubeconfig-file", "", "a kubeconfig file (default: in-cluster config)")
	fs.StringVar(&o.etcdEndpoints, "etcd-endpoints", "http://127.0.0.1:2379", "etcd's endpoints, comma-separated (without --kube-subnet-mgr)")
	fs.StringVar(&o.etcdPrefix, "etcd-prefix", "/coreos.com/network", "the etcd prefix of the network's config and leases")
	fs.StringVar(&o.netConfPath, "net-config-path", "/etc/kube-flannel/net-conf.json", "the network config (with --kube-subnet-mgr)")
	fs.StringVar(&o.subnetFile, "subnet-file", "/run/flannel/subnet.env", "where to write the node's subnets and MTU")
	fs.BoolVar(&o.ipMasq, "ip-masq", false, "masquerade traffic from the pods that leaves the cluster networks")
	fs.Var(&o.ifaces, "iface", "the interface (name or address) to reach other nodes from; repeat to try several in order (default: the default route's)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := flagutil.SetFlagsFromEnv(fs, envPrefix); err != nil {
		return o, err
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "flanneld: %v\n", err)
		os.Exit(2)
	}
	if o.version {
		fmt.Println(version.Version)
		return
	}
	os.Exit(runUntilSignal(o))
}

// runUntilSignal runs flanneld until SIGTERM or SIGINT (exit code 0) or a
// failure (1, the reason logged).
func runUntilSignal(o options) int {
	defer klog.Flush()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	klog.InfoS("flanneld starting", "version", version.Version, "kubeSubnetMgr", o.kubeSubnetMgr,
		"iface", o.ifaces.String(), "ipMasq", o.ipMasq, "subnetFile", o.subnetFile)
	err := run(ctx, o)
	switch {
	case ctx.Err() != nil && err != nil:
		// Stopped while starting: what failed then is the stop's doing.
		klog.InfoS("flanneld stopped while starting", "step", err)
		return 0
	case ctx.Err() != nil:
		klog.InfoS("flanneld stopped")
		return 0
	case err != nil:
		klog.ErrorS(err, "flanneld failed")
		return 1
	}
	return 0
}
