// Command kurma-node is the main program of kurma's DaemonSet on a
// Kubernetes node (see deploy/kubernetes and package k8snode):
//
//	kurma-node prepare-host DIR...   (init container) make DIRs shared mounts in the runtime's mount namespace
//	kurma-node run [flags] [-- KURMAD FLAGS]   render kurmad's config, run kurmad, install kurma-cni once its networks run
//	kurma-node ready [flags]         readiness: kurma-cni installed and every network of its conflist running
//	kurma-node live [flags]          liveness: kurmad's API answers
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/k8snode"
)

var version = "dev"

const usage = `usage: kurma-node COMMAND [flags]

  prepare-host [--mount-ns PATH] DIR...   make each DIR lie on a shared mount in the runtime's mount
                                          namespace (default: this process's parent's, the runtime's shim)
  run [flags] [-- KURMAD FLAGS]           render kurmad's config for this node (the template and the Network
                                          objects), run kurmad, keep the Networks applied, install kurma-cni
                                          once every network of its conflist runs; remove it on uninstall
  ready [flags]                           exit 0 when kurma-cni's conflist is installed and its networks run
  live [--socket PATH]                    exit 0 when kurmad's API answers
  version
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "prepare-host":
		err = prepareHost(args)
	case "run":
		err = run(args)
	case "ready":
		err = ready(args)
	case "live":
		err = live(args)
	case "version":
		fmt.Println(version)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "kurma-node: unknown command %q\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kurma-node:", err)
		os.Exit(1)
	}
}

// cniFlags are the flags run and ready share: the conflist and where the
// node's CNI dirs are mounted.
type cniFlags struct {
	conflist, binDir, confDir, name, binary string
}

func (c *cniFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.conflist, "conflist", "/etc/kurma/config/00-kurma.conflist", "the conflist to install")
	fs.StringVar(&c.name, "conflist-name", "", "its file name in the CNI config dir (default: the --conflist file's name)")
	fs.StringVar(&c.binDir, "cni-bin-dir", "/host/opt/cni/bin", "the node's CNI bin dir, as mounted")
	fs.StringVar(&c.confDir, "cni-conf-dir", "/host/etc/cni/net.d", "the node's CNI config dir, as mounted")
	fs.StringVar(&c.binary, "kurma-cni", "/opt/kurma/bin/kurma-cni", "kurma-cni in this image")
}

func (c *cniFlags) cni() (k8snode.CNI, error) {
	b, err := os.ReadFile(c.conflist)
	if err != nil {
		return k8snode.CNI{}, err
	}
	name := c.name
	if name == "" {
		name = c.conflist[strings.LastIndex(c.conflist, "/")+1:]
	}
	return k8snode.CNI{Binary: c.binary, Conflist: b, BinDir: c.binDir, ConfDir: c.confDir, ConflistName: name}, nil
}

func prepareHost(args []string) error {
	fs := flag.NewFlagSet("prepare-host", flag.ExitOnError)
	ns := fs.String("mount-ns", "", "the runtime's mount namespace (default /proc/<parent pid>/ns/mnt; the pod needs hostPID)")
	_ = fs.Parse(args)
	if fs.NArg() == 0 {
		return errors.New("prepare-host: name the directories")
	}
	if *ns == "" {
		ppid := os.Getppid()
		if ppid == 0 {
			return errors.New("prepare-host: this process has no parent in its PID namespace: run the pod with hostPID: true, or give --mount-ns")
		}
		*ns = fmt.Sprintf("/proc/%d/ns/mnt", ppid)
	}
	done, err := k8snode.MakeShared(*ns, fs.Args())
	for _, s := range done {
		switch s.Made {
		case "":
			fmt.Printf("%s: on the shared mount %s\n", s.Dir, s.Mount)
		case "bind":
			fmt.Printf("%s: bound on itself and made shared (its mount was not)\n", s.Dir)
		default:
			fmt.Printf("%s: made its mount shared\n", s.Dir)
		}
	}
	return err
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var c cniFlags
	c.register(fs)
	tmpl := fs.String("template", "/etc/kurma/config/kurmad.json", "kurmad's config template ("+k8snode.PodCIDRPlaceholder+" stands for the node's pod CIDR; docs/runtimes.md lists every placeholder)")
	clusterCIDRs := fs.String("cluster-cidrs", "", "the cluster's pod CIDRs, comma-separated, at most one per family (what __CLUSTER_CIDR__ and __CLUSTER_CIDRS__ stand for)")
	out := fs.String("config", "/etc/kurma/kurmad.json", "where the rendered config goes")
	kurmad := fs.String("kurmad", "/opt/kurma/bin/kurmad", "kurmad's path")
	watch := fs.Bool("networks", true, "add the cluster's Network objects (networks.kurma.dev) to kurmad's config and keep them applied")
	agent := fs.String("agent-socket", "/run/kurma/kurma-node.sock", "where kurma-node answers kurma-cni (the conflist's \"node_agent\")")
	authFile := fs.String("auth-file", "/etc/kurma/auth.json", "the registry credentials of the Networks' pull secrets, for kurmad")
	socket := fs.String("socket", api.DefaultSocket, "kurmad's API socket")
	certsDir := fs.String("certs-dir", "/var/lib/kurma/images/.containers/certs.d", "the registries' TLS roots kurmad reads (<state_dir>/images/.containers/certs.d), for resolving Networks' images")
	credsDir := fs.String("credentials-dir", "/run/kurma/credentials", "where each network with kubernetes_credentials gets its own token (kurmad's KURMA_CREDENTIALS_DIR)")
	tokenLife := fs.Duration("token-expiration", k8snode.DefaultTokenExpiration, "the life asked of each network's token (the API server takes at least 10m)")
	tokenRefresh := fs.Duration("token-refresh", 0, "replace each network's token this long after it was issued, when sooner than 80% of its life (default: at 80%)")
	installNets := fs.String("install-networks", "/etc/kurma/config/networks.yaml", "the install's Network objects (the cluster network first), created when missing; absent file: none")
	nadImage := fs.String("nad-image", "file:///opt/kurma/images/cni-netplugin.aci", "the plugin image serving Multus' NetworkAttachmentDefinitions that name none (annotation kurma.dev/image); empty: serve none")
	routes := fs.Bool("route-networks", true, "route the blocks of the Networks kurma spans across the nodes (spec.scope cluster with spec.subnet) in this node's network namespace")
	_ = fs.Parse(args)

	log := logrus.New()
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339Nano})
	cni, err := c.cni()
	if err != nil {
		return err
	}
	cluster, err := k8snode.InCluster("")
	if err != nil {
		return err
	}
	var cidrs []string
	for _, c := range strings.Split(*clusterCIDRs, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cidrs = append(cidrs, c)
		}
	}
	if err := k8snode.CheckClusterCIDRs(cidrs); err != nil {
		return fmt.Errorf("run: --cluster-cidrs: %w", err)
	}
	n := &k8snode.Node{
		NodeName: os.Getenv("NODE_NAME"), PodName: os.Getenv("POD_NAME"), PodNamespace: os.Getenv("POD_NAMESPACE"),
		ClusterCIDRs: cidrs,
		Template:     *tmpl, Config: *out, Kurmad: *kurmad, KurmadArgs: fs.Args(),
		CNI: cni, Cluster: cluster, API: api.NewClient(*socket), Log: log.WithField("component", "kurma-node"),
	}
	if n.NodeName == "" || n.PodName == "" || n.PodNamespace == "" {
		return errors.New("run: NODE_NAME, POD_NAME and POD_NAMESPACE must be set (the downward API: spec.nodeName, metadata.name, metadata.namespace)")
	}
	ca, err := os.ReadFile(filepath.Join(k8snode.ServiceAccountDir, "ca.crt"))
	if err != nil {
		return fmt.Errorf("run: the cluster's CA, for the networks' credentials: %w", err)
	}
	n.Credentials = &k8snode.Credentials{Cluster: cluster, Namespace: n.PodNamespace, Root: *credsDir, CA: ca,
		Expiration: *tokenLife, Refresh: *tokenRefresh, Kurmad: api.NewClient(*socket), Log: log.WithField("component", "credentials")}
	if *watch {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return fmt.Errorf("run: --networks: %w", err)
		}
		n.AgentSocket, n.InstallNetworks = *agent, *installNets
		var router k8snode.Router
		if *routes {
			router = k8snode.KernelRouter{}
		}
		n.Networks, err = k8snode.NewNetworkWatcher(rc, k8snode.WatcherOptions{
			NodeName: n.NodeName, Namespace: n.PodNamespace, Config: *out, AuthFile: *authFile,
			BaseDir: filepath.Dir(*out), Kurmad: api.NewClient(*socket), CertsDir: *certsDir, Credentials: n.Credentials,
			Router: router, NADImage: *nadImage, Log: log.WithField("component", "networks"),
		})
		if err != nil {
			return fmt.Errorf("run: --networks: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return n.Run(ctx)
}

func ready(args []string) error {
	fs := flag.NewFlagSet("ready", flag.ExitOnError)
	var c cniFlags
	c.register(fs)
	_ = fs.Parse(args)
	cni, err := c.cni()
	if err != nil {
		return err
	}
	if err := k8snode.Status(cni.Conflist); err != nil {
		return err
	}
	if !cni.Installed() {
		installed := filepath.Join(c.confDir, cni.ConflistName)
		if _, err := os.Stat(installed); err == nil {
			// The ConfigMap's conflist changed since kurma-node installed
			// its own: the kubelet updates the mounted file, kurma-node
			// installs it at its next start.
			return fmt.Errorf("the networks run, but %s is not %s: restart the DaemonSet to install the edited conflist", installed, c.conflist)
		}
		return fmt.Errorf("the networks run, but %s is not installed yet", installed)
	}
	return nil
}

func live(args []string) error {
	fs := flag.NewFlagSet("live", flag.ExitOnError)
	sock := fs.String("socket", api.DefaultSocket, "kurmad's API socket")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for an answer")
	_ = fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	info, err := api.NewClient(*sock).Info(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("kurmad %s serves\n", info.Version)
	return nil
}
