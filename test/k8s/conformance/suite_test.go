// Package conformance is `make k8s-conformance`'s test binary: Kubernetes'
// own e2e suite, as the release pinned in this module ships it, limited to
// the packages that hold the network tests. It is built with
// `go test -c` into out/e2e.test and run by TestConformance (the parent
// package) through ginkgo against each side's cluster; it is never run
// as a plain `go test` of this module (its TestMain needs a cluster's
// kubeconfig).
package conformance

import (
	"flag"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	testingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	"k8s.io/kubernetes/test/fixtures"

	// The suites judged (test/e2e imports test/e2e/common, whose network
	// package holds the "Networking Granular Checks").
	_ "k8s.io/kubernetes/test/e2e/network"
	_ "k8s.io/kubernetes/test/e2e/network/netpol"

	// What upstream's suite links for its node, debug and metrics hooks.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	testfiles.AddFileSource(testingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(fixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// TestE2E runs the specs ginkgo's focus and skip select.
func TestE2E(t *testing.T) { e2e.RunE2ETests(t) }
