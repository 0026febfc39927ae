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

.PHONY: all build images image test lint bench demo deps clean k8s-build k8s-test k8s-bench k8s-e2e k8s-conformance flanneld man

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

# cni-netplugin and the flannel image (cni-netplugin's rootfs plus flanneld).
images: deps flanneld
	$(GO) run ./images/build -out images/out -host-tool nft -flanneld $(FLANNEL_DIR)/out/flanneld

# kurma's own image (kurmad, kurma-node, ... and cni-netplugin.aci, flannel.aci), for
# Kubernetes (deploy/kubernetes): images/out/kurma/ (OCI layout) and
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

# The Kubernetes rows of the performance goals: a Deployment 0→30 through
# kurma vs the same plugins as the node's own CNI; with K8S_NODES=2 (or
# more) the cross-node rows: pod-to-pod RTT and throughput and a Deployment
# 0→30 over the nodes, kurma's flannel manifest vs the same flanneld and
# plugins on the nodes. Run `make image` first.
k8s-bench: deps k8s-build $(if $(filter 1,$(K8S_NODES)),,flanneld)
	@test -f images/out/kurma.tar || { echo "k8s-bench: images/out/kurma.tar is missing: run make image first" >&2; exit 1; }
	cd $(K8S_DIR) && K8S_NODES=$(K8S_NODES) $(GO) run ./cmd/k8sbench $(K8SBENCHFLAGS)

# Kubernetes' own e2e suite, limited to its network tests
# (test/k8s/conformance), and the ginkgo CLI of the version it links (a
# tool of test/k8s/go.mod, as agnhost is).
k8s-e2e:
	cd $(K8S_DIR) && $(GO) test -c -vet=off -o out/e2e.test ./conformance
	cd $(K8S_DIR) && CGO_ENABLED=0 $(GO) build -o out/ginkgo github.com/onsi/ginkgo/v2/ginkgo

# Opt-in (not part of `make test`): Kubernetes' own sig-network
# conformance, NetworkPolicy and dual-stack tests on a K8S_NODES-node
# cluster (2 unless K8S_NODES is given), first against the reference
# plugins on the nodes (the baseline), then against kurma's flannel
# manifest as shipped; results in test/k8s/out/conformance. Run `make
# image` first. See docs/runtimes.md, "make k8s-conformance".
CONFORMANCE_NODES := $(if $(filter command line environment,$(origin K8S_NODES)),$(K8S_NODES),2)
k8s-conformance: deps k8s-build flanneld k8s-e2e
	@scripts/need-packages docker-registry=docker-registry skopeo=skopeo dig=bind9-dnsutils nslookup=bind9-dnsutils \
		nc.openbsd=netcat-openbsd curl=curl iperf=iperf dash=dash bash=bash
	@test -f images/out/kurma.tar || { echo "k8s-conformance: images/out/kurma.tar is missing: run make image first" >&2; exit 1; }
	cd $(K8S_DIR) && K8S_NODES=$(CONFORMANCE_NODES) KURMA_REQUIRE_ROOT=1 $(GO) test -count=1 -timeout 300m -v -run '^TestConformance$$' .

# flanneld: TestAllowlistsCoverFlanneld runs it under strace.
test: deps lint build images flanneld
	KURMA_REQUIRE_ROOT=1 $(GO) test -tags $(TESTTAGS) $(TESTFLAGS) $(PKGS)
	cd $(FLANNEL_DIR) && $(GO) test -count=1 .

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet -tags $(TAGS) $(PKGS)
	$(GO) vet -tags $(TESTTAGS) ./pkg/podnet/
	cd $(K8S_DIR) && $(GO) vet . ./cmd/pause ./cmd/k8sbench ./cmd/netbench
	cd $(FLANNEL_DIR) && $(GO) vet .

bench: deps build images
	@scripts/need-packages skopeo=skopeo || echo "bench: skopeo could not be installed; its pull row will be skipped" >&2
	$(GO) run -tags $(TAGS) ./test/bench $(BENCHFLAGS)

demo: deps build images
	scripts/demo.sh

clean:
	rm -rf bin images/out $(K8S_DIR)/out $(FLANNEL_DIR)/out
