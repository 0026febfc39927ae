package k8snode

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
)

// PodCIDRPlaceholder stands, in the kurmad config template, for the
// node's pod CIDR: the Node's spec.podCIDR, which the controller-manager
// allocates (--allocate-node-cidrs) or the cluster's installer sets.
const PodCIDRPlaceholder = "__NODE_POD_CIDR__"

// ErrNoPodCIDR means the Node has no spec.podCIDR yet.
var ErrNoPodCIDR = errors.New("the node has no pod CIDR (spec.podCIDR) yet")

// Render is the kurmad config for node: the template with every
// PodCIDRPlaceholder replaced by the node's pod CIDR. A template without
// the placeholder is used as it is; one with it fails with ErrNoPodCIDR
// until the node has one.
func Render(template []byte, node *NodeObject) ([]byte, error) {
	if !bytes.Contains(template, []byte(PodCIDRPlaceholder)) {
		return template, nil
	}
	cidr := node.Spec.PodCIDR
	if cidr == "" {
		return nil, fmt.Errorf("node %q: %w", node.Metadata.Name, ErrNoPodCIDR)
	}
	if _, err := netip.ParsePrefix(cidr); err != nil {
		return nil, fmt.Errorf("node %q: spec.podCIDR %q: %w", node.Metadata.Name, cidr, err)
	}
	return bytes.ReplaceAll(template, []byte(PodCIDRPlaceholder), []byte(cidr)), nil
}
