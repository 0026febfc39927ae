package kurmacni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/pkg/api"
)

// ErrNotAvailable is CNI's STATUS code 50: the plugin cannot service an
// ADD now (libcni has no constant for it).
const ErrNotAvailable uint = 50

// Plugin is kurma-cni: one function per CNI verb, for skel.
type Plugin struct {
	// Stdout receives ADD's result.
	Stdout io.Writer
	// Stderr receives notes for whoever runs the runtime; nil → os.Stderr.
	Stderr io.Writer
	// Caller names the runtime when the config has no "owner"; nil →
	// CallerName.
	Caller func() string
}

// Funcs are the plugin's verbs, for skel.PluginMainFuncs (VERSION is
// skel's).
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, GC: p.GC, Status: p.Status}
}

// call is one verb's parsed input, its kurmad client and its deadline
// (see deadline.go): done must be called when the verb returns.
type call struct {
	ctx    context.Context
	done   context.CancelFunc
	verb   string
	args   *skel.CmdArgs
	conf   *NetConf
	client *api.Client
}

func (p *Plugin) newCall(args *skel.CmdArgs, verb string) (*call, error) {
	conf, e := parseConf(args.StdinData)
	if e != nil {
		return nil, e
	}
	ctx, done := callContext(conf, verb)
	return &call{ctx: ctx, done: done, verb: verb, args: args, conf: conf, client: api.NewClient(conf.socket())}, nil
}

// fail is the CNI error of the call's failed request to kurmad (see
// cniError).
func (c *call) fail(err error) *types.Error {
	return cniError(err, c.conf, deadline(c.conf, c.verb))
}

// Add attaches the container to every network of the config, in order,
// in its netns (kurmad bind-mounts it: the runtime keeps it), and prints
// one result: the prevResult, if kurma-cni is chained after another
// plugin, with each network's result after it, in the runtime's version.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	c, err := p.newCall(args, "ADD")
	if err != nil {
		return err
	}
	defer c.done()
	if e := c.conf.parsePrevResult(); e != nil {
		return e
	}
	sel, e := c.conf.podNetworks(c.args.IfName)
	if e != nil {
		return e
	}
	pairs, err := cniArgs(args.Args)
	if err != nil {
		return err
	}
	k8s, isK8s := kubernetesPod(pairs)
	agent := isK8s && c.conf.NodeAgent != ""
	var resolved []string
	if agent {
		if resolved, e = c.checkAccess(k8s, sel); e != nil {
			return e
		}
	}
	if e := sel.resolve(resolved); e != nil {
		return e
	}
	req, err := c.createRequest(p.owner(c.conf), pairs, sel)
	if err != nil {
		return err
	}
	pod, err := c.client.CreatePod(c.ctx, req)
	if err != nil {
		return c.fail(err)
	}
	if agent {
		c.reportAttached(k8s, pod, p.stderr())
	}
	res, err := mergeResults(c.conf.PrevResult, pod.Attachments, pod.Netns, args.Netns)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "kurma-cni: kurmad's result", err.Error())
	}
	out, err := res.GetAsVersion(c.conf.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("kurma-cni: the result cannot be given as version %s", c.conf.CNIVersion), err.Error())
	}
	return out.PrintTo(p.Stdout)
}

// Del deletes what kurmad holds for the attachment (container ID, ifname,
// the runtime's network name): nothing is no error, as CNI wants of DEL.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	c, err := p.newCall(args, "DEL")
	if err != nil {
		return err
	}
	defer c.done()
	if _, err := c.client.DeleteRuntimePods(c.ctx, c.ref()); err != nil {
		return c.fail(err)
	}
	return nil
}

// Status answers whether every network of the config can take an ADD:
// kurmad answers and shows it running once it asked its plugin's status
// now (not as of the last status_interval); otherwise code 50 naming the
// network and its state, or the socket.
//
// A kurmad that does not answer within the deadline is "try again later"
// (11), as for every verb; one that is not running is 50.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	c, err := p.newCall(args, "STATUS")
	if err != nil {
		return err
	}
	defer c.done()
	nets, err := c.client.ProbeNetworks(c.ctx, c.conf.Networks)
	if api.IsCode(err, api.CodeUnknownNetwork) {
		// A network kurmad does not have (yet: on a node, kurma-node
		// may not have merged it) is not available, as networkStatus
		// says below, rather than a config error.
		nets, err = c.client.Networks(c.ctx)
	}
	if err != nil {
		e := c.fail(err)
		if e.Code == types.ErrTryAgainLater && !errors.Is(err, context.DeadlineExceeded) {
			e.Code = ErrNotAvailable
		}
		return e
	}
	for _, name := range c.conf.Networks {
		if e := networkStatus(nets, name); e != nil {
			return e
		}
	}
	return nil
}

// networkStatus is nil when a generation of network name runs in nets
// (kurmad lists one per generation: while a newer one replaces an older
// one, the one serving adds runs). Otherwise it is "not available" (50)
// with the newest generation's state and reason: starting, unavailable
// (its plugin's status says it cannot serve adds), failed, ...
func networkStatus(nets []api.Generation, name string) *types.Error {
	var newest *api.Generation
	for i, n := range nets {
		if n.Network != name {
			continue
		}
		if n.State == api.StateRunning {
			return nil
		}
		if newest == nil || n.Generation > newest.Generation {
			newest = &nets[i]
		}
	}
	if newest == nil {
		return types.NewError(ErrNotAvailable, fmt.Sprintf("kurma-cni: kurmad has no network %q", name), "")
	}
	msg := fmt.Sprintf("kurma-cni: network %q is not ready: %s", name, newest.State)
	if newest.Reason != "" {
		msg += ": " + newest.Reason
	}
	return types.NewError(ErrNotAvailable, msg, "")
}

// ref is the attachment's identity in kurmad: the runtime's.
func (c *call) ref() api.RuntimeRef {
	return api.RuntimeRef{ContainerID: c.args.ContainerID, Interface: c.args.IfName, Network: c.conf.Name}
}

// createRequest is ADD's pod: the runtime's identity and netns, its pod
// name from CNI_ARGS' (pairs) K8S_POD_NAMESPACE/K8S_POD_NAME, its networks
// (sel: the cluster network first, then those of the pod's annotations,
// see podNetworks, resolved), CNI_ARGS as every network's arguments (they
// become CNI_ARGS in there) and each annotated network's own, the
// capability arguments for every network and the interfaces the
// annotations name.
func (c *call) createRequest(owner string, pairs [][2]string, sel *podSelection) (api.CreatePodRequest, error) {
	req := api.CreatePodRequest{Name: podName(pairs),
		Runtime: &api.Runtime{Owner: owner, ContainerID: c.args.ContainerID, Interface: c.args.IfName, Network: c.conf.Name, Netns: c.args.Netns}}
	var forward []string
	for _, kv := range pairs {
		if kv[0] != "IgnoreUnknown" {
			forward = append(forward, kv[0]+"="+kv[1])
		}
	}
	rc := c.conf.capabilityArgs()
	for _, n := range sel.networks {
		args := slices.Clone(forward)
		for _, a := range sel.args[n] {
			k, _, _ := strings.Cut(a, "=")
			if slices.ContainsFunc(args, func(f string) bool { return strings.HasPrefix(f, k+"=") }) {
				return api.CreatePodRequest{}, types.NewError(types.ErrInvalidNetworkConfig,
					fmt.Sprintf("kurma-cni: pod annotation %s: network %q: cni-args %q is the runtime's own CNI_ARGS", NetworksAnnotation, n, k), "")
			}
			args = append(args, a)
		}
		ref := n
		if len(args) > 0 {
			ref += ":" + strings.Join(args, ";")
		}
		req.Networks = append(req.Networks, ref)
		nrc := maps.Clone(rc)
		for k, v := range sel.runtimeConfig[n] {
			if nrc == nil {
				nrc = map[string]json.RawMessage{}
			}
			nrc[k] = v
		}
		if len(nrc) > 0 {
			if req.RuntimeConfig == nil {
				req.RuntimeConfig = map[string]map[string]json.RawMessage{}
			}
			req.RuntimeConfig[n] = nrc
		}
	}
	req.Interfaces = sel.interfaces
	return req, nil
}

// capabilityArgs are the runtime's capability arguments that go on to the
// networks: all of them but those it passed as null (libcni does for a
// capability the runtime has no value for), dropped as if absent, and the
// pod's annotations, which are kurma-cni's own input (and would only be
// dropped, and logged, by kurmad for every network that does not declare
// them).
func (c *NetConf) capabilityArgs() map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(c.RuntimeConfig))
	for k, v := range c.RuntimeConfig {
		if t := bytes.TrimSpace(v); len(t) == 0 || string(t) == "null" || k == PodAnnotationsCapability {
			continue
		}
		out[k] = v
	}
	return out
}

// cniArgs splits CNI_ARGS ("K=V;K2=V2") into pairs.
func cniArgs(s string) ([][2]string, error) {
	var out [][2]string
	for _, pair := range strings.Split(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("kurma-cni: CNI_ARGS: %q is not a KEY=VALUE pair", pair), "")
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// podName is the pod's name in kurmad: NAMESPACE/NAME from Kubernetes'
// CNI_ARGS, NAME alone without a namespace, else none.
func podName(pairs [][2]string) string {
	var ns, name string
	for _, kv := range pairs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			ns = kv[1]
		case "K8S_POD_NAME":
			name = kv[1]
		}
	}
	if name == "" || ns == "" {
		return name
	}
	return ns + "/" + name
}

func (p *Plugin) owner(c *NetConf) string {
	if c.Owner != "" {
		return c.Owner
	}
	if p.Caller != nil {
		return p.Caller()
	}
	return CallerName()
}

// CallerName is the name of the process that ran kurma-cni: the runtime
// that links libcni (podman, ctr, containerd, crio, cnitool), as its
// /proc/<ppid>/comm says; "" when unreadable.
func CallerName() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", os.Getppid()))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
