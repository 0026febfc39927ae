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
# a package pick their own names (see internal/testutil).
TESTFLAGS ?= -count=1 -timeout 15m -p 1

.PHONY: all build images test lint bench demo deps clean

all: build

deps:
	@scripts/need-packages ping=iputils-ping ip=iproute2 jq=jq nsenter=util-linux nft=nftables \
		podman=podman runc=runc containerd=containerd busybox=busybox-static

build:
	@mkdir -p bin
	$(GOBUILD) -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/kurmad ./cmd/kurmactl
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/kurma-agent ./plugins/cni-wrapper ./cmd/kurma-cni

images: deps
	$(GO) run ./images/build -out images/out -host-tool nft

test: deps lint build images
	KURMA_REQUIRE_ROOT=1 $(GO) test -tags $(TESTTAGS) $(TESTFLAGS) $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet -tags $(TAGS) $(PKGS)
	$(GO) vet -tags $(TESTTAGS) ./pkg/podnet/

bench: deps build images
	@scripts/need-packages skopeo=skopeo || echo "bench: skopeo could not be installed; its pull row will be skipped" >&2
	$(GO) run -tags $(TAGS) ./test/bench $(BENCHFLAGS)

demo: deps build images
	scripts/demo.sh

clean:
	rm -rf bin images/out
