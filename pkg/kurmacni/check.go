package kurmacni

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// Check asks kurmad to check the attachment: it finds the pod of the
// runtime's attachment and has kurmad run each network's check (GET
// /v1/pods/{id}/check), whose failure is the plugin's CNI error.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	c, err := p.newCall(args)
	if err != nil {
		return err
	}
	pods, err := c.client.FindPods(c.ctx, c.ref())
	if err != nil {
		return cniError(err, c.conf)
	}
	if len(pods) == 0 {
		return types.NewError(types.ErrUnknownContainer,
			fmt.Sprintf("kurma-cni: kurmad holds no attachment of container %s as %s on %q", args.ContainerID, args.IfName, c.conf.Name), "")
	}
	for _, pod := range pods {
		if _, err := c.client.CheckPod(c.ctx, pod.ID); err != nil {
			return cniError(err, c.conf)
		}
	}
	return nil
}
