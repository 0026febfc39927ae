//go:build !kurma_failpoints

package podnet

// failpointsBuilt tells the tests whether failpoints fire in this build.
const failpointsBuilt = false

// failpoint is a failpoint in builds with the kurma_failpoints tag; here,
// nothing.
func failpoint(string, string) {}

// failpointAfter is a failpoint in builds with the kurma_failpoints tag;
// here, nothing (wait is not called either).
func failpointAfter(string, func() error) {}
