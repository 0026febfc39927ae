// Command kurma-netpol enforces Kubernetes NetworkPolicy for kurma, per
// network, with sigs.k8s.io/kube-network-policies as its policy engine. It
// is the main executable of kurma's netpol plugin image and, under the
// names add, check, del, gc and status, that image's /opt/network
// executables (it dispatches on argv[0], as cni-wrapper does).
//
//	kurma-netpol [--config FILE] [--kubeconfig FILE] [--node-name NAME]   the daemon
//	kurma-netpol add|check|del|gc|status [args]                           a verb, config on stdin
//
// The daemon reads its config (a JSON object: policy_networks,
// cluster_network, queue, fail_open, ...) on stdin, as kurmad gives it, or
// from --config; it talks to the API server with in-cluster credentials
// (KUBERNETES_SERVICE_HOST/PORT and the service account directory, which
// kurmad mounts for a network with kubernetes_credentials) or --kubeconfig.
// It runs until SIGTERM or SIGINT, then removes its nftables table and
// exits 0.
//
// Kept in a module of its own (plugins/netpol) so kurma's go.mod never
// carries client-go and the library.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	npaclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/kurma-project/kurma/plugins/netpol/internal/config"
	"github.com/kurma-project/kurma/plugins/netpol/internal/enforcer"
	"github.com/kurma-project/kurma/plugins/netpol/internal/verbs"
)

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

func run(argv []string, stdin io.Reader, stdout, stderr io.Writer) int {
	name := filepath.Base(argv[0])
	if slices.Contains(verbs.Names, name) {
		return verbs.Run(name, argv[1:], stdin, stdout, stderr, enforcer.ReadyFile)
	}
	if len(argv) > 1 && slices.Contains(verbs.Names, argv[1]) {
		return verbs.Run(argv[1], argv[2:], stdin, stdout, stderr, enforcer.ReadyFile)
	}
	return daemon(argv, stdin, stdout, stderr)
}

func daemon(argv []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kurma-netpol", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile := fs.String("config", "", "read the config from this file rather than stdin")
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig file, rather than in-cluster credentials")
	nodeName := fs.String("node-name", "", "this node's name (default $NODE_NAME, else the hostname)")
	readyFile := fs.String("ready-file", "", "the readiness file (default /run/kurma-netpol/<network>.ready)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	verbosity := fs.Int("v", 0, "klog verbosity of kube-network-policies' lines (2 logs every packet's verdict)")
	version := fs.Bool("version", false, "print the versions kurma-netpol was built from and exit")
	if err := fs.Parse(argv[1:]); err != nil {
		return 2
	}
	if *version {
		printVersion(stdout)
		return 0
	}
	log, err := newLog(stderr, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "kurma-netpol: --log-level: %v\n", err)
		return 2
	}
	cfg, err := readConfig(*configFile, stdin)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	node := *nodeName
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		if node, err = os.Hostname(); err != nil {
			log.WithError(err).Error("no node name: set --node-name or NODE_NAME")
			return 1
		}
	}
	if *readyFile == "" {
		*readyFile = enforcer.ReadyFile(cfg.Name)
	}
	opts := enforcer.Options{Config: cfg, NodeName: node, ReadyFile: *readyFile, Log: log, Verbosity: *verbosity}
	if opts.Client, opts.NPAClient, err = clients(*kubeconfig, cfg); err != nil {
		log.WithField("network", cfg.Name).Error(err.Error())
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := enforcer.Run(ctx, opts); err != nil {
		log.Error(err.Error())
		return 1
	}
	return 0
}

// newLog is the daemon's logrus log on w at level.
func newLog(w io.Writer, level string) (*logrus.Entry, error) {
	logger := logrus.New()
	logger.SetOutput(w)
	logger.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	l, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	logger.SetLevel(l)
	return logrus.NewEntry(logger).WithField("component", "kurma-netpol"), nil
}

// readConfig parses the config from file, or from stdin when file is "".
func readConfig(file string, stdin io.Reader) (*config.Config, error) {
	in, source := stdin, "stdin"
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		defer f.Close()
		in, source = f, file
	}
	cfg, err := config.Parse(in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return cfg, nil
}

// clients are the API server's clients: the core types in protobuf, and
// the admin policies' (JSON only, as CRDs) when cfg turns those on.
func clients(kubeconfig string, cfg *config.Config) (kubernetes.Interface, npaclient.Interface, error) {
	rc, err := restConfig(kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("Kubernetes credentials: %w", err)
	}
	rc.UserAgent = "kurma-netpol"
	npaConfig := rest.CopyConfig(rc)
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("Kubernetes client: %w", err)
	}
	if !cfg.AdminNetworkPolicy && !cfg.BaselineAdminNetworkPolicy {
		return client, nil, nil
	}
	npa, err := npaclient.NewForConfig(npaConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("policy.networking.k8s.io client: %w", err)
	}
	return client, npa, nil
}

// restConfig is the API server's address and credentials: from kubeconfig
// when given, else in-cluster.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster (give the network kubernetes_credentials, or run with --kubeconfig): %w", err)
	}
	return rc, nil
}

func printVersion(w io.Writer) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(w, "kurma-netpol (no build info)")
		return
	}
	fmt.Fprintf(w, "kurma-netpol %s\n", bi.GoVersion)
	for _, d := range bi.Deps {
		if d.Path == "sigs.k8s.io/kube-network-policies" || d.Path == "k8s.io/client-go" {
			fmt.Fprintf(w, "%s %s\n", d.Path, d.Version)
		}
	}
}
