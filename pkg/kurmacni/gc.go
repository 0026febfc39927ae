package kurmacni

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/pkg/api"
)

// GC has kurmad delete, through the plugins' own del, every attachment it
// holds that this runtime (the owner, as ADD names it) made under this CNI
// network name and that is not in cni.dev/valid-attachments. Another
// runtime's attachments are never touched, even under the same name: each
// runtime lists only its own.
//
// A GC that carries no list at all (cnitool's, libcni's GCNetworkList with
// no arguments) says nothing about which attachments are valid: it
// releases nothing, and says so on stderr. A null or empty list is a
// runtime saying none is valid.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	c, err := p.newCall(args, "GC")
	if err != nil {
		return err
	}
	defer c.done()
	valid, listed, e := validAttachments(c.conf)
	if e != nil {
		return e
	}
	if !listed {
		fmt.Fprintf(p.stderr(), "kurma-cni: GC of %q without cni.dev/valid-attachments: nothing released (a runtime that lists its valid attachments has the others released)\n", c.conf.Name)
		return nil
	}
	req := api.GCRequest{Network: c.conf.Name, Owner: p.owner(c.conf), ValidAttachments: valid}
	if _, err := c.client.GCRuntimePods(c.ctx, req); err != nil {
		return c.fail(err)
	}
	return nil
}

// validAttachments reads the GC's list of valid attachments (listed false
// when the config carries none; a null list is an empty one): a CNI error
// 6 when it is not a list of attachments.
func validAttachments(conf *NetConf) (valid []api.ValidAttachment, listed bool, e *types.Error) {
	raw := conf.RawValidAttachments
	if len(raw) == 0 {
		raw = conf.RawAttachments
	}
	if len(raw) == 0 {
		return nil, false, nil
	}
	var list []types.GCAttachment
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, true, types.NewError(types.ErrDecodingFailure, `kurma-cni: "cni.dev/valid-attachments" is not a list of {"containerID", "ifname"}`, err.Error())
	}
	valid = []api.ValidAttachment{}
	for _, a := range list {
		valid = append(valid, api.ValidAttachment{ContainerID: a.ContainerID, Interface: a.IfName})
	}
	return valid, true, nil
}

func (p *Plugin) stderr() io.Writer {
	if p.Stderr != nil {
		return p.Stderr
	}
	return os.Stderr
}
