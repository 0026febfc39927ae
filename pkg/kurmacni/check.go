package kurmacni

import (
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/kurma-project/kurma/pkg/api"
)

// Check has kurmad check the attachment: it finds the runtime's pod and
// runs each network's check (GET /v1/pods/{id}/check), and compares the
// runtime's prevResult, when it gives one, with what kurmad attached (see
// checkPrevResult): a prevResult that lacks an interface or an address
// kurma-cni's ADD returned fails CHECK. A network whose
// plugin's check failed fails CHECK with the plugin's message; one that
// gave no verdict (not running, timed out) is "try again later", and so
// is a pod kurmad cannot check now (409 conflict: it is being created or
// deleted, or its teardown failed and waits for a retry); no attachment is
// code 3.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	c, err := p.newCall(args, "CHECK")
	if err != nil {
		return err
	}
	defer c.done()
	if e := c.conf.parsePrevResult(); e != nil {
		return e
	}
	if c.conf.PrevResult == nil {
		// CNI's CHECK is of an ADD's result: without it there is
		// nothing to check against, and passing would say all is well.
		return types.NewError(types.ErrInvalidNetworkConfig,
			"kurma-cni: CHECK needs \"prevResult\", the result of the container's ADD (the runtime sends it; libcni from its cache)", "")
	}
	pods, err := c.client.FindPods(c.ctx, c.ref())
	if err != nil {
		return c.fail(err)
	}
	if len(pods) == 0 {
		return types.NewError(types.ErrUnknownContainer,
			fmt.Sprintf("kurma-cni: kurmad holds no attachment of container %s as %s on %q", args.ContainerID, args.IfName, c.conf.Name), "")
	}
	for _, pod := range pods {
		checked, err := c.client.CheckPod(c.ctx, pod.ID)
		if api.IsCode(err, api.CodeConflict) {
			return types.NewError(types.ErrTryAgainLater, "kurma-cni: "+err.Error(), "kurmad at "+c.conf.socket()+": "+api.CodeConflict)
		}
		if err != nil {
			return c.fail(err)
		}
		if e := checkOutcome(checked); e != nil {
			return e
		}
		if e := checkPrevResult(c.conf.PrevResult, checked, args.Netns); e != nil {
			return e
		}
	}
	return nil
}

// checkOutcome is nil when every network of the checked pod passed (or
// was not asked); otherwise the CNI error CHECK answers.
func checkOutcome(pod *api.Pod) *types.Error {
	if pod.Check == nil {
		return types.NewError(types.ErrInternal, fmt.Sprintf("kurma-cni: kurmad did not check pod %s", pod.ID), "")
	}
	var failed, unknown []string
	for _, n := range pod.Check.Attachments {
		desc := fmt.Sprintf("network %q (%s): %s", n.Network, n.Interface, n.Message)
		switch n.Outcome {
		case api.CheckFailed:
			failed = append(failed, desc)
		case api.CheckUnknown:
			unknown = append(unknown, desc)
		}
	}
	switch {
	case len(failed) > 0:
		return types.NewError(types.ErrInternal, "kurma-cni: check failed: "+strings.Join(failed, "; "), "")
	case len(unknown) > 0:
		return types.NewError(types.ErrTryAgainLater, "kurma-cni: no verdict: "+strings.Join(unknown, "; "), "")
	}
	return nil
}

// checkPrevResult is nil when prev (the runtime's prevResult; nil when it
// gave none) holds every interface and address kurmad's attachments of
// pod give, as ADD returned them (interfaces in the runtime's netns): the
// CNI spec has CHECK consult prevResult, and a runtime whose cached result
// says other addresses than the container has gets code 999 naming the
// first one missing. Plugins after kurma-cni in a chain may add to the
// result, so more in prev is no error.
func checkPrevResult(prev types.Result, pod *api.Pod, netns string) *types.Error {
	if prev == nil {
		return nil
	}
	fail := func(format string, args ...any) *types.Error {
		return types.NewError(types.ErrInternal, "kurma-cni: check failed: prevResult "+fmt.Sprintf(format, args...), "")
	}
	got, err := current.NewResultFromResult(prev)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "kurma-cni: prevResult", err.Error())
	}
	for _, a := range pod.Attachments {
		want, err := mergeResults(nil, []api.Attachment{a}, pod.Netns, netns)
		if err != nil {
			return types.NewError(types.ErrDecodingFailure, "kurma-cni: kurmad's result", err.Error())
		}
		for _, wi := range want.Interfaces {
			if wi.Sandbox != "" && !slices.ContainsFunc(got.Interfaces, func(g *current.Interface) bool { return g.Name == wi.Name && g.Sandbox == wi.Sandbox }) {
				return fail("lacks network %q's interface %s in %s", a.Network, wi.Name, wi.Sandbox)
			}
		}
		for _, wip := range want.IPs {
			if !slices.ContainsFunc(got.IPs, func(g *current.IPConfig) bool { return g.Address.String() == wip.Address.String() }) {
				return fail("lacks network %q's address %s (on %s)", a.Network, wip.Address.String(), a.Interface)
			}
		}
	}
	return nil
}
