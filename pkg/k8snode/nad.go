package k8snode

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kurma-project/kurma/pkg/netconfig"
)

// Multus' NetworkAttachmentDefinitions (k8s.cni.cncf.io/v1, namespaced):
// a cluster written for Multus keeps its networks as these, and its pods
// name them in k8s.v1.cni.cncf.io/networks. When their CRD is present,
// kurma-node serves each NAD as a kurmad network of its own (NADNetwork),
// whose plugin config is the NAD's spec.config, run in kurma's own plugin
// image (or the one its kurma.dev/image annotation names), and resolves a
// pod's references to it (agent.go). As for Multus, a NAD is found by the
// pods of its namespace by its name, and by any pod as namespace/name.

// NADGVR is the NetworkAttachmentDefinition resource; NADCRD its CRD's
// name.
var NADGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// NADCRD is the name of the NetworkAttachmentDefinition CRD.
const NADCRD = "network-attachment-definitions.k8s.cni.cncf.io"

// NADImageAnnotation on a NetworkAttachmentDefinition names the plugin
// image that serves it, in any form kurmad takes; absent, kurma's own
// (kurma-node run --nad-image).
const NADImageAnnotation = "kurma.dev/image"

// nadPrefix starts the kurmad name of every NAD's network.
const nadPrefix = "nad."

// NADNetwork is the name of the kurmad network serving the
// NetworkAttachmentDefinition namespace/name: nad.<namespace>.<name>, or,
// when that is longer than a network name may be, nad.<namespace>. or
// nad. and a digest of both.
func NADNetwork(namespace, name string) string {
	n := nadPrefix + namespace + "." + name
	if len(n) <= netconfig.MaxNameLen {
		return n
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	h := hex.EncodeToString(sum[:8])
	if n = nadPrefix + namespace + "." + h; len(n) <= netconfig.MaxNameLen {
		return n
	}
	return nadPrefix + h
}

// nad is a NetworkAttachmentDefinition as kurma-node serves it.
type nad struct {
	Namespace, Name string
	// Network is its kurmad network (NADNetwork), Object that network as
	// a Network, for Merge; Err why it cannot be served.
	Network string
	Object  *NetworkObject
	Err     error
}

func (n *nad) ref() string { return n.Namespace + "/" + n.Name }

// nadOf reads a NetworkAttachmentDefinition: its spec.config (a CNI
// config or conflist, as JSON text) becomes the plugin config of a
// Network named NADNetwork, run in the image its NADImageAnnotation
// names, else image. Keys kurmad sets itself (image, default, ...) are
// refused in it, as in a Network's spec.config; its "name" is the NAD's.
func nadOf(u *unstructured.Unstructured, image string) *nad {
	n := &nad{Namespace: u.GetNamespace(), Name: u.GetName()}
	n.Network = NADNetwork(n.Namespace, n.Name)
	if a := u.GetAnnotations()[NADImageAnnotation]; a != "" {
		image = a
	}
	raw, _, _ := unstructured.NestedString(u.Object, "spec", "config")
	if strings.TrimSpace(raw) == "" {
		n.Err = fmt.Errorf("NetworkAttachmentDefinition %s has no spec.config: kurma serves a NAD whose spec.config holds its CNI config (not one read from a file on the node)", n.ref())
		return n
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		n.Err = fmt.Errorf("NetworkAttachmentDefinition %s: spec.config is not a JSON object: %v", n.ref(), err)
		return n
	}
	delete(cfg, "name")
	for k := range cfg {
		if _, ok := specKeys[k]; ok {
			n.Err = fmt.Errorf("NetworkAttachmentDefinition %s: spec.config.%s: a key kurma sets itself; remove it (the image is the %s annotation's)", n.ref(), k, NADImageAnnotation)
			return n
		}
	}
	o := &NetworkObject{Spec: NetworkSpec{Image: image, Config: cfg}}
	o.Metadata.Name = n.Network
	o.Metadata.Generation = u.GetGeneration()
	o.Metadata.ResourceVersion = u.GetResourceVersion()
	n.Object = o
	return n
}
