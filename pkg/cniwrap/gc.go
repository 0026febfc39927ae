package cniwrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// gc removes what this network holds for attachments that are no longer
// valid, in two stages:
//
//  1. every attachment of this network in libcni's cache that is not among
//     the valid ones on stdin (cni.dev/valid-attachments) is deleted with
//     the config and arguments its add was cached with (not today's
//     config, which may have changed since), and with an empty CNI_NETNS
//     when its netns is gone, as del does. This stage needs no particular
//     cniVersion: it is how leases and NAT rules of pods whose records
//     kurmad lost are released, since no reference plugin implements GC;
//  2. libcni's GCNetworkList, which sends GC to every plugin when the
//     config's cniVersion is 1.1.0 or later (and does nothing below). It is
//     told that the attachments whose delete failed in stage 1 are valid:
//     they stay cached, and the next gc retries them.
//
// A config with "disableGC": true is left alone. The exit code is 1 when a
// delete or a plugin's GC failed.
func (c *call) gc() int {
	if c.list.DisableGC {
		c.log.Info("disableGC is set: nothing done")
		return 0
	}
	valid, err := c.validAttachments()
	if err != nil {
		return c.fail(types.NewError(types.ErrDecodingFailure, err.Error(), ""), err)
	}
	kept, errs := c.deleteStale(valid)
	if err := c.gcPlugins(append(valid, kept...)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return c.fail(asCNIError(err), fmt.Errorf("network %q: gc: %w", c.list.Name, err))
	}
	return 0
}

// gcPlugins is stage 2 of gc, libcni's GCNetworkList, but for a flannel
// config not resolved yet: below cniVersion 1.1.0 it has nothing left to
// do (stage 1 deleted what was stale), from 1.1.0 on it needs the
// plugins flannel stands for, so it fails until flanneld is ready.
func (c *call) gcPlugins(valid []types.GCAttachment) error {
	if c.flannelPending != nil {
		if gte, _ := version.GreaterThanOrEqualTo(c.list.CNIVersion, "1.1.0"); gte {
			return c.flannelPending
		}
		return nil
	}
	return c.cni.GCNetworkList(c.ctx, c.list, &libcni.GCArgs{ValidAttachments: valid})
}

// validAttachments reads the valid attachments kurmad put in the config;
// none given means none is valid.
func (c *call) validAttachments() ([]types.GCAttachment, error) {
	raw, ok := c.taken[keyValidAttachments]
	if !ok {
		raw, ok = c.taken[keyAttachments]
	}
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var valid []types.GCAttachment
	if err := json.Unmarshal(raw, &valid); err != nil {
		return nil, fmt.Errorf("%s: %w", keyValidAttachments, err)
	}
	return valid, nil
}

// deleteStale deletes every cached attachment of this network that is not
// in valid (stage 1 of gc); it returns those whose delete failed, with the
// errors.
func (c *call) deleteStale(valid []types.GCAttachment) (kept []types.GCAttachment, errs []error) {
	cached, err := c.cni.GetCachedAttachments("")
	if err != nil {
		return nil, []error{fmt.Errorf("reading the CNI cache: %w", err)}
	}
	isValid := make(map[types.GCAttachment]bool, len(valid))
	for _, v := range valid {
		isValid[v] = true
	}
	deleted := 0
	for _, a := range cached {
		id := types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName}
		if a.Network != c.list.Name || isValid[id] {
			continue
		}
		log := c.log.WithField("container", a.ContainerID).WithField("interface", a.IfName)
		if err := c.deleteCached(a); err != nil {
			log.WithError(err).Warn("stale attachment: delete failed; kept for the next gc")
			kept = append(kept, id)
			errs = append(errs, fmt.Errorf("stale attachment %s %s: %w", a.ContainerID, a.IfName, err))
			continue
		}
		log.Info("stale attachment deleted")
		deleted++
	}
	if deleted > 0 || len(kept) > 0 {
		c.log.WithField("deleted", deleted).WithField("failed", len(kept)).Info("stale attachments")
	}
	return kept, errs
}

// deleteCached runs DEL for a cached attachment with its cached config
// (today's when that cannot be read) and arguments.
func (c *call) deleteCached(a *libcni.NetworkAttachment) error {
	list, err := ParseConfig(a.Config)
	if err != nil || list.Name != c.list.Name {
		list = c.list
	}
	rt := &libcni.RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName,
		Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs}
	if err := checkNetns(rt.NetNS); err != nil && (errors.Is(err, os.ErrNotExist) || errors.Is(err, errNoNetns)) {
		rt.NetNS = "" // as CNI says for a netns that is gone: the plugin releases what it can
	}
	return c.cni.DelNetworkList(c.ctx, list, rt)
}

// status asks the plugins whether they can serve an add (CNI STATUS). libcni
// sends STATUS only for a config of cniVersion 1.1.0 or later; below, CNI
// has no such question and the wrapper answers ready once every plugin is
// in CNI_PATH. That is setup's first check, made again here: the first
// status runs beside setup (both start with the container), not after it,
// so a plugin setup is about to fail on must not read as ready. A missing
// plugin fails with code 50; a plugin's error object (code 50: cannot
// serve adds; 51: existing attachments may be affected too) is printed as
// it is, with exit code 1.
func (c *call) status() int {
	for _, t := range PluginTypes(c.list) {
		if msg := pluginMissing(c.env, c.exec, t); msg != "" {
			return c.fail(types.NewError(errPluginNotAvailable, msg, ""), fmt.Errorf("network %q: status: %s", c.list.Name, msg))
		}
	}
	if err := c.cni.GetStatusNetworkList(c.ctx, c.list); err != nil {
		return c.fail(asCNIError(err), fmt.Errorf("network %q: status: %w", c.list.Name, err))
	}
	return 0
}
