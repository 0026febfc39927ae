package kurmacni

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
)

// Networks chosen per pod. Kubernetes has no field for a pod's networks;
// as multus does, a pod names them in an annotation, and the runtime
// hands kurma-cni the pod's annotations as a capability argument:
// containerd's CRI and CRI-O both pass them, as a JSON object, under
// PodAnnotationsCapability when the conflist's entry declares it
// ("capabilities": {"io.kubernetes.cri.pod-annotations": true}).
const (
	// NetworksAnnotation names the kurma networks a pod attaches to, in
	// order, separated by commas: "webnet,mynet". The first gets the
	// runtime's interface name (CNI_IFNAME). Without it, the pod gets the
	// networks of the conflist's "network".
	NetworksAnnotation = "kurma.dev/networks"
	// PodAnnotationsCapability is the capability argument (runtimeConfig
	// key) under which containerd and CRI-O pass a pod's annotations.
	PodAnnotationsCapability = "io.kubernetes.cri.pod-annotations"
)

// podNetworks are the kurma networks ADD attaches, in order: those the
// pod's NetworksAnnotation names, when the runtime passed it, else the
// config's "network". A malformed annotation is CNI code 7 naming it;
// networks it names that kurmad does not have fail in kurmad before
// anything is attached (400 unknown_network, also code 7).
func (c *NetConf) podNetworks() (Networks, *types.Error) {
	raw, ok := c.RuntimeConfig[PodAnnotationsCapability]
	if !ok {
		return c.Networks, nil
	}
	var annotations map[string]string
	if err := json.Unmarshal(raw, &annotations); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: runtimeConfig %q must be an object of strings (the pod's annotations)", PodAnnotationsCapability), err.Error())
	}
	value, ok := annotations[NetworksAnnotation]
	if !ok {
		return c.Networks, nil
	}
	return parseNetworksAnnotation(value)
}

// parseNetworksAnnotation reads NetworksAnnotation's value: network names
// separated by commas, blanks around them ignored, each a valid kurma
// network name, none twice.
func parseNetworksAnnotation(value string) (Networks, *types.Error) {
	invalid := func(format string, args ...any) *types.Error {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("kurma-cni: pod annotation %s=%q: ", NetworksAnnotation, value)+fmt.Sprintf(format, args...), "")
	}
	if strings.TrimSpace(value) == "" {
		return nil, invalid(`names no network; list kurma networks separated by commas, e.g. "webnet,mynet", or remove the annotation`)
	}
	var out Networks
	for i, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, invalid("entry %d is empty", i)
		}
		if e := utils.ValidateNetworkName(name); e != nil {
			return nil, invalid("%q is not a kurma network's name: %s", name, e.Msg)
		}
		if slices.Contains(out, name) {
			return nil, invalid("%q is listed twice", name)
		}
		out = append(out, name)
	}
	return out, nil
}
