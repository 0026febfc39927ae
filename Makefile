# kurma — see README.md. Everything builds with the containers_image_openpgp tag
# so containers/image never needs gpgme (cgo) on the build machine.
GO       ?= go
TAGS     := containers_image_openpgp
# Tests also compile in pkg/podnet's failpoints (KURMA_FAILPOINT); release
# builds never do.
TESTTAGS := $(TAGS),kurma_failpoints
GOBUILD  := $(GO) build -tags $(TAGS)
PKGS     := ./...
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# Packages that touch the same kernel objects run one at a time; tests inside
# a package pick their own names (docs/architecture.md, "a test that touches the kernel").
TESTFLAGS ?= -count=1 -timeout 15m -p 1

.PHONY: all build images images-arm64 netplugin image test lint bench demo deps clean k8s-build k8s-test k8s-bench k8s-e2e k8s-conformance k8s-anp-e2e k8s-anp-conformance k8s-coredns k8s-netpol-test flanneld netpol man

all: build

deps:
	@scripts/need-packages ping=iputils-ping ip=iproute2 jq=jq nsenter=util-linux nft=nftables \
		podman=podman runc=runc containerd=containerd busybox=busybox-static \
		mkfs.ext4=e2fsprogs strace=strace etcd=etcd-server

# kurmad and kurma-init need cgo (libcontainer's nsenter); kurmactl does not, and starts
# faster without it (no dynamic loader, no libc init): it is pure Go, as in
# kurma's image (images/builder.CompileKurma).
build:
	@mkdir -p bin
	$(GOBUILD) -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/kurmad
	$(GOBUILD) -o bin/ ./cmd/kurma-init
	CGO_ENABLED=0 $(GOBUILD) -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/kurmactl
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/kurma-agent ./plugins/cni-wrapper ./cmd/kurma-cni

# kurmactl's man pages, generated from its commands: bin/man/.
man: build
	bin/kurmactl man bin/man

# cni-netplugin, the flannel image (cni-netplugin's rootfs plus flanneld) and
# the netpol image (kurma-netpol).
images: deps flanneld netpol
	$(GO) run ./images/build -out images/out -host-tool nft -flanneld $(FLANNEL_DIR)/out/flanneld \
		-netpol $(NETPOL_DIR)/out/kurma-netpol

# cni-netplugin alone: what make demo and README's install run (the flannel
# and netpol images are for Kubernetes, and building flanneld takes minutes).
netplugin: deps
	$(GO) run ./images/build -out images/out -host-tool nft

# The plugin images for arm64 in images/out/arm64/, every binary
# cross-compiled (all are pure Go), without the nft host tool (this host's
# program). kurma's own image for arm64 is built on an arm64 host: kurmad is
# cgo and the image carries the host's mkfs.ext4.
images-arm64:
	cd $(FLANNEL_DIR) && CGO_ENABLED=0 GOARCH=arm64 $(GO) build -trimpath \
		-ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=v0.28.10" -o out/arm64/flanneld .
	cd $(NETPOL_DIR) && CGO_ENABLED=0 GOARCH=arm64 $(GO) build -trimpath -ldflags "-s -w" -o out/arm64/kurma-netpol .
	$(GO) run ./images/build -arch arm64 -out images/out/arm64 -flanneld $(FLANNEL_DIR)/out/arm64/flanneld \
		-netpol $(NETPOL_DIR)/out/arm64/kurma-netpol

# kurma's own image (kurmad, kurma-node, ... and cni-netplugin.aci, flannel.aci,
# netpol.aci), for Kubernetes (deploy/kubernetes): images/out/kurma/ (OCI layout) and
# images/out/kurma.tar (ctr images import, podman load), tagged
# kurma.dev/kurma:$(VERSION) and :latest.
image: images
	$(GO) run ./images/build -out images/out -kurma -version $(VERSION)

# flanneld: kurma's own main (plugins/flannel) on the packages of the flannel
# release pinned in plugins/flannel/go.mod (vxlan and host-gw, nftables), its
# own module: kurma's go.mod does not carry flannel's dependencies.
FLANNEL_DIR := plugins/flannel
flanneld:
	cd $(FLANNEL_DIR) && CGO_ENABLED=0 $(GO) build -trimpath \
		-ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=v0.28.10" -o out/flanneld .

# kurma-netpol, the netpol image's daemon (NetworkPolicy on
# kube-network-policies, the release pinned in plugins/netpol/go.mod), a
# static binary from a module of its own: kurma's go.mod does not carry
# client-go.
NETPOL_DIR := plugins/netpol
netpol:
	cd $(NETPOL_DIR) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o out/kurma-netpol .

# The k8s-test cluster's binary: Kubernetes at the version pinned in
# test/k8s/go.mod (its own module: kurma's go.mod does not carry it).
K8S_DIR := test/k8s
k8s-build:
	cd $(K8S_DIR) && $(GO) build -trimpath -ldflags "-s -w" -o out/kube ./cmd/kube

# Opt-in (not part of `make test`): a single-node cluster on this machine,
# kurma's image imported, deploy/kubernetes/kurma.yaml applied as shipped;
# with K8S_NODES=2 (or more) an N-node dual-stack cluster, each node in
# namespaces of its own, flannel run on the nodes directly and then kurma's
# flannel manifest applied as shipped. Run `make image` first. See
# docs/runtimes.md, "Kubernetes".
K8S_NODES ?= 1
K8S_TEST  := $(if $(filter 1,$(K8S_NODES)),TestKurmaOnKubernetes,TestKurmaAcrossNodes)
k8s-test: deps k8s-build $(if $(filter 1,$(K8S_NODES)),,flanneld)
	@scripts/need-packages docker-registry=docker-registry skopeo=skopeo
	@test -f images/out/kurma.tar || { echo "k8s-test: images/out/kurma.tar is missing: run make image first" >&2; exit 1; }
	cd $(K8S_DIR) && K8S_NODES=$(K8S_NODES) KURMA_REQUIRE_ROOT=1 $(GO) test -count=1 -timeout 60m -v -run '^$(K8S_TEST)$$' .

# Opt-in: kurma-netpol run directly on a single-node cluster whose CNI is
# the reference plugins (bridge, host-local from images/out/bin), with the
# admin kubeconfig, as the NetworkPolicy conformance baseline runs it:
# default-deny, allow-from-label and delete, timed. See docs/runtimes.md.
k8s-netpol-test: deps k8s-build images
	cd $(K8S_DIR) && KURMA_REQUIRE_ROOT=1 $(GO) test -count=1 -timeout 30m -v -run '^TestNetpolDirect$$' .

# The Kubernetes rows of the performance goals: a Deployment 0→30 through
# kurma vs the same plugins as the node's own CNI; with K8S_NODES=2 (or
# more) the cross-node rows: pod-to-pod RTT and throughput and a Deployment
# 0→30 over the nodes, kurma's flannel manifest vs the same flanneld and
# plugins on the nodes. Run `make image` first.
k8s-bench: deps k8s-build $(if $(filter 1,$(K8S_NODES)),,flanneld netpol)
	@test -f images/out/kurma.tar || { echo "k8s-bench: images/out/kurma.tar is missing: run make image first" >&2; exit 1; }
	cd $(K8S_DIR) && K8S_NODES=$(K8S_NODES) $(GO) run ./cmd/k8sbench $(K8SBENCHFLAGS)

# Kubernetes' own e2e suite, limited to its network tests
# (test/k8s/conformance), and the ginkgo CLI of the version it links (a
# tool of test/k8s/go.mod, as agnhost is).
k8s-e2e:
	cd $(K8S_DIR) && $(GO) test -c -vet=off -o out/e2e.test ./conformance
	cd $(K8S_DIR) && CGO_ENABLED=0 $(GO) build -o out/ginkgo github.com/onsi/ginkgo/v2/ginkgo

# CoreDNS, static, where BuildE2EImages (test/k8s/e2eimages.go, its
# coreDNSModule) looks for it: the tests build images inside namespaces
# of their own, which may have no route to the module proxy.
COREDNS_MODULE := github.com/coredns/coredns@v1.12.4
k8s-coredns:
	@test -x $(K8S_DIR)/out/e2e-images/coredns-bin/coredns || { mkdir -p $(K8S_DIR)/out/e2e-images && \
		cd $(K8S_DIR)/out/e2e-images && CGO_ENABLED=0 GOBIN=$$PWD/coredns-bin GOFLAGS=-mod=mod \
		$(GO) install -trimpath -ldflags "-s -w" $(COREDNS_MODULE); }

# Opt-in (not part of `make test`): Kubernetes' own sig-network
# conformance, NetworkPolicy and dual-stack tests on a K8S_NODES-node
# cluster (2 unless K8S_NODES is given), first against the reference
# plugins on the nodes (the baseline), then against kurma's flannel
# manifest as shipped; results in test/k8s/out/conformance. Run `make
# image` first. See docs/runtimes.md, "make k8s-conformance".
CONFORMANCE_NODES := $(if $(filter command line environment,$(origin K8S_NODES)),$(K8S_NODES),2)
k8s-conformance: deps k8s-build flanneld netpol k8s-e2e k8s-coredns
	@scripts/need-packages docker-registry=docker-registry skopeo=skopeo dig=bind9-dnsutils nslookup=bind9-dnsutils \
		nc.openbsd=netcat-openbsd curl=curl iperf=iperf dash=dash bash=bash
	@test -f images/out/kurma.tar || { echo "k8s-conformance: images/out/kurma.tar is missing: run make image first" >&2; exit 1; }
	cd $(K8S_DIR) && K8S_NODES=$(CONFORMANCE_NODES) KURMA_REQUIRE_ROOT=1 $(GO) test -count=1 -timeout 300m -v -run '^TestConformance$$' .

# network-policy-api's conformance suite for AdminNetworkPolicy and
# BaselineAdminNetworkPolicy (policy.networking.k8s.io/v1alpha1, what
# kube-network-policies v0.8.0 implements): its test binary, built from
# the module proxy in a throwaway module (never copied into this repo),
# as out/anp-conformance.test. v0.1.7 is the last release whose suite tests
# v1alpha1; v0.3.0's tests ClusterNetworkPolicy (docs/runtimes.md).
NPAPI_VERSION := v0.1.7
ANP_SUITE_DIR := $(K8S_DIR)/out/anp-suite
k8s-anp-e2e:
	@mkdir -p $(ANP_SUITE_DIR)
	cd $(ANP_SUITE_DIR) && { test -f go.mod || $(GO) mod init kurma.test/anp-suite; } && \
		$(GO) get -t sigs.k8s.io/network-policy-api/conformance@$(NPAPI_VERSION) && \
		$(GO) test -c -vet=off -o ../anp-conformance.test sigs.k8s.io/network-policy-api/conformance

# Opt-in (not part of `make test`): that suite on a K8S_NODES-node
# dual-stack cluster (2 unless K8S_NODES is given) with the release's
# CRDs, first against the baseline (the reference plugins and the policy
# daemon on the nodes directly, ANP and BANP on), then against kurma's
# flannel manifest with its policy network's admin_network_policy and
# baseline_admin_network_policy on; results in test/k8s/out/anp-conformance.
# Run `make image` first. See docs/runtimes.md, "make k8s-anp-conformance".
k8s-anp-conformance: deps k8s-build flanneld netpol k8s-anp-e2e k8s-coredns
	@scripts/need-packages nc.openbsd=netcat-openbsd curl=curl dig=bind9-dnsutils nslookup=bind9-dnsutils \
		iperf=iperf dash=dash bash=bash
	@test -f images/out/kurma.tar || { echo "k8s-anp-conformance: images/out/kurma.tar is missing: run make image first" >&2; exit 1; }
	cd $(K8S_DIR) && K8S_NODES=$(CONFORMANCE_NODES) KURMA_REQUIRE_ROOT=1 $(GO) test -count=1 -timeout 240m -v -run '^TestAdminNetworkPolicyConformance$$' .

# flanneld: TestAllowlistsCoverFlanneld runs it under strace.
test: deps lint build images flanneld
	KURMA_REQUIRE_ROOT=1 $(GO) test -tags $(TESTTAGS) $(TESTFLAGS) $(PKGS)
	cd $(FLANNEL_DIR) && $(GO) test -count=1 .
	cd $(NETPOL_DIR) && KURMA_REQUIRE_ROOT=1 $(GO) test $(TESTFLAGS) ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet -tags $(TAGS) $(PKGS)
	$(GO) vet -tags $(TESTTAGS) ./pkg/podnet/
	cd $(K8S_DIR) && $(GO) vet . ./cmd/pause ./cmd/k8sbench ./cmd/netbench
	cd $(FLANNEL_DIR) && $(GO) vet .
	cd $(NETPOL_DIR) && $(GO) vet ./...

bench: deps build images
	@scripts/need-packages skopeo=skopeo || echo "bench: skopeo could not be installed; its pull row will be skipped" >&2
	$(GO) run -tags $(TAGS) ./test/bench $(BENCHFLAGS)

# It builds what it runs itself (make build, make netplugin), step by step.
demo: deps
	@scripts/demo.sh

clean:
	rm -rf bin images/out $(K8S_DIR)/out $(FLANNEL_DIR)/out $(NETPOL_DIR)/out
