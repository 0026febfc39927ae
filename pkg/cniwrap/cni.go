package cniwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/netplugin"
)

// ErrorObject is the error object printed on stdout. It is types.Error plus
// the cniVersion the spec asks for.
type ErrorObject struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`
}

// call is one verb: the config read from stdin, the runtime config libcni
// gets (add, del and check), and where the answer goes.
type call struct {
	ctx        context.Context
	log        logrus.FieldLogger
	cni        *libcni.CNIConfig
	list       *libcni.NetworkConfigList
	rt         *libcni.RuntimeConf
	stdout     io.Writer
	cniVersion string
	exec       invoke.Exec // runs the plugins, for libcni and checkOne
	env        Env
	// flannelPending: the config has "flannel" plugins that could not be
	// resolved yet (no subnet.env): gc then does what needs no
	// subnet.env (resolveFlannelForGC).
	flannelPending error
	// taken holds the values of the keys kurmad adds to the config of some
	// verbs (prevResult for check, the valid attachments for gc), removed
	// from the config before it is parsed.
	taken map[string]json.RawMessage
}

// verbs are the wrapper's functions, one per verb of the contract
// (netplugin.Verbs says what each takes).
var verbs = map[string]func(*call) int{
	"add":    (*call).add,
	"check":  (*call).check,
	"del":    (*call).del,
	"gc":     (*call).gc,
	"status": (*call).status,
}

// Keys kurmad adds to the config on stdin for one verb (see docs/plugin-contract.md,
// runtimeConfig); the wrapper takes them out before parsing.
const (
	keyPrevResult       = "prevResult"
	keyValidAttachments = "cni.dev/valid-attachments"
	// keyAttachments is the name CNI 1.1.0's spec text used by mistake;
	// libcni sends both, so the wrapper accepts either.
	keyAttachments = "cni.dev/attachments"
	// keyRuntimeConfig holds a pod's capability arguments (see
	// capabilityArgs).
	keyRuntimeConfig = "runtimeConfig"
)

// runCommand reads the config and arguments of a CNI verb and runs it;
// it returns the exit code.
func runCommand(ctx context.Context, env Env, exec invoke.Exec, v netplugin.Verb, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, code := newCall(ctx, env, exec, v.Name, v.Pod, args, stdin, stdout, stderr)
	if c == nil {
		return code
	}
	// del and check resolve a flannel config per attachment, from the
	// config its add was cached with.
	switch v.Name {
	case "add":
		code = c.resolveFlannel(types.ErrTryAgainLater)
	case "gc":
		c.resolveFlannelForGC()
	case "status":
		code = c.resolveFlannel(errPluginNotAvailable)
	}
	if code != 0 {
		return code
	}
	return verbs[v.Name](c)
}

// newCall parses stdin and args; on a problem it writes the error object
// and returns nil and the exit code.
func newCall(ctx context.Context, env Env, exec invoke.Exec, verb string, attaches bool, args []string, stdin io.Reader, stdout, stderr io.Writer) (*call, int) {
	confBytes, err := io.ReadAll(stdin)
	c := &call{ctx: ctx, log: newLogger(stderr).WithField("op", verb), stdout: stdout, cniVersion: configVersion(confBytes)}
	if err != nil {
		return nil, c.fail(types.NewError(types.ErrIOFailure, "cannot read the config on stdin", err.Error()),
			fmt.Errorf("cannot read the config on stdin: %w", err))
	}
	if code := c.setArgs(verb, attaches, args, confBytes); code != 0 {
		return nil, code
	}
	confBytes, c.taken = takeKeys(confBytes, keyPrevResult, keyValidAttachments, keyAttachments, keyRuntimeConfig)
	if c.rt != nil {
		if c.rt.CapabilityArgs, err = capabilityArgs(c.taken); err != nil {
			return nil, c.fail(types.NewError(types.ErrInvalidNetworkConfig, "invalid network config on stdin", err.Error()),
				fmt.Errorf("invalid network config on stdin: %w", err))
		}
	}
	if c.list, err = ParseConfig(confBytes); err != nil {
		code := types.ErrInvalidNetworkConfig
		var se *json.SyntaxError
		if errors.As(err, &se) || len(confBytes) == 0 {
			code = types.ErrDecodingFailure
		}
		return nil, c.fail(types.NewError(code, "invalid network config on stdin", err.Error()),
			fmt.Errorf("invalid network config on stdin: %w", err))
	}
	c.cniVersion = c.list.CNIVersion
	c.log = c.log.WithField("network", c.list.Name)
	if c.rt != nil {
		c.log = c.log.WithField("container", c.rt.ContainerID)
	}
	c.exec = exec
	c.env = env
	c.cni = libcni.NewCNIConfigWithCacheDir(env.CNIPath, env.CacheDir, exec)
	return c, 0
}

// setArgs checks the verb's arguments and, for a verb that attaches, sets
// the runtime config from them; it returns a non-zero exit code on a
// problem.
func (c *call) setArgs(verb string, attaches bool, args []string, confBytes []byte) int {
	if !attaches {
		if len(args) != 0 {
			err := fmt.Errorf("usage: %s (config on stdin, no arguments); got %d arguments", verb, len(args))
			return c.fail(types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), ""), err)
		}
		return 0
	}
	if len(args) < 2 || len(args) > 3 {
		err := fmt.Errorf("usage: %s <netns path> <container id> [ifname] (config on stdin); got %d arguments", verb, len(args))
		return c.fail(types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), ""), err)
	}
	c.rt = &libcni.RuntimeConf{ContainerID: args[1], NetNS: args[0], Args: CNIArgs(confBytes)}
	if len(args) == 3 {
		c.rt.IfName = args[2]
	}
	return 0
}

// takeKeys removes keys from the top of the JSON object b and returns the
// rest and the values taken. b is returned as it is when it holds none of
// them (or is not an object: parsing reports that).
func takeKeys(b []byte, keys ...string) ([]byte, map[string]json.RawMessage) {
	mentioned := func(k string) bool { return bytes.Contains(b, []byte(`"`+k+`"`)) }
	if !slices.ContainsFunc(keys, mentioned) {
		return b, nil // add and del without capability arguments, the hot path: no decoding
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil {
		return b, nil
	}
	taken := map[string]json.RawMessage{}
	for _, k := range keys {
		if v, ok := top[k]; ok {
			taken[k] = v
			delete(top, k)
		}
	}
	if len(taken) == 0 {
		return b, nil
	}
	out, err := json.Marshal(top)
	if err != nil {
		return b, nil
	}
	return out, taken
}

// fail prints e as the error object, logs cause and returns exit code 1.
func (c *call) fail(e *types.Error, cause error) int {
	writeJSON(c.stdout, ErrorObject{CNIVersion: c.cniVersion, Code: e.Code, Msg: e.Msg, Details: e.Details})
	c.log.WithField("code", e.Code).Error(cause.Error())
	return 1
}

// add attaches the network (ifname: the one given or the first free ethN)
// and prints the plugins' result in the version they produced.
func (c *call) add() int {
	netnsPath := c.rt.NetNS
	if err := checkNetns(netnsPath); err != nil {
		return c.fail(types.NewError(types.ErrInvalidNetNS, err.Error(), ""), err)
	}
	if c.rt.IfName == "" {
		var err error
		if c.rt.IfName, err = freeIfname(netnsPath); err != nil {
			return c.fail(types.NewError(types.ErrInvalidNetNS, err.Error(), ""), err)
		}
	}
	res, err := c.cni.AddNetworkList(c.ctx, c.list, c.rt)
	if err != nil {
		return c.fail(asCNIError(err), fmt.Errorf("network %q: add %s in %s: %w", c.list.Name, c.rt.IfName, netnsPath, err))
	}
	if err := res.PrintTo(c.stdout); err != nil {
		return c.fail(types.NewError(types.ErrIOFailure, "cannot write the result", err.Error()), err)
	}
	_, _ = io.WriteString(c.stdout, "\n")
	c.log.WithField("interface", c.rt.IfName).Debug("added")
	return 0
}

// check checks the attachment given, or every cached one of this container
// and network, against the result its add gave: the one in libcni's cache,
// or, when the cache holds none (it was lost), the prevResult kurmad put in
// the config.
func (c *call) check() int {
	netnsPath := c.rt.NetNS
	if err := checkNetns(netnsPath); err != nil {
		return c.fail(types.NewError(types.ErrInvalidNetNS, err.Error(), ""), err)
	}
	ifnames, err := knownIfnames(c.cni, c.list, c.rt)
	if err != nil {
		return c.fail(types.NewError(types.ErrInternal, err.Error(), ""), err)
	}
	if len(ifnames) == 0 {
		err := fmt.Errorf("network %q: check: no attachment of container %s is known (no ifname given and none cached)", c.list.Name, c.rt.ContainerID)
		return c.fail(types.NewError(types.ErrUnknownContainer, err.Error(), ""), err)
	}
	for _, name := range ifnames {
		r := *c.rt
		r.IfName = name
		if err := c.checkOne(&r); err != nil {
			return c.fail(asCNIError(err), fmt.Errorf("network %q: check %s in %s: %w", c.list.Name, name, netnsPath, err))
		}
	}
	return 0
}

// checkOne checks one attachment with libcni, or with the given prevResult
// when libcni's cache has no result for it.
func (c *call) checkOne(rt *libcni.RuntimeConf) error {
	list, err := c.attachmentList(rt)
	if err != nil {
		return err
	}
	prev, given := c.taken[keyPrevResult]
	if !given {
		return c.cni.CheckNetworkList(c.ctx, list, rt)
	}
	if cached, err := c.cni.GetNetworkListCachedResult(list, rt); err != nil || cached != nil {
		return c.cni.CheckNetworkList(c.ctx, list, rt)
	}
	if gte, err := version.GreaterThanOrEqualTo(list.CNIVersion, "0.4.0"); err != nil || !gte {
		return c.cni.CheckNetworkList(c.ctx, list, rt) // says why not
	}
	res, err := create.CreateFromBytes(prev)
	if err == nil {
		res, err = res.GetAsVersion(list.CNIVersion)
	}
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "prevResult on stdin is not a usable CNI result", err.Error())
	}
	c.log.WithField("interface", rt.IfName).Info("no cached result: checking against the prevResult on stdin")
	args := &invoke.Args{Command: "CHECK", ContainerID: rt.ContainerID, NetNS: rt.NetNS, PluginArgs: rt.Args,
		IfName: rt.IfName, Path: strings.Join(c.cni.Path, string(os.PathListSeparator))}
	for _, p := range list.Plugins {
		path, err := c.exec.FindInPath(p.Network.Type, c.cni.Path)
		if err != nil {
			return err
		}
		conf, err := libcni.InjectConf(p, map[string]any{"name": list.Name, "cniVersion": list.CNIVersion, keyPrevResult: res})
		if err != nil {
			return err
		}
		if err := invoke.ExecPluginWithoutResult(c.ctx, path, conf.Bytes, args, c.exec); err != nil {
			return fmt.Errorf("plugin %s failed (check): %w", p.Network.Type, err)
		}
	}
	return nil
}

// del detaches the attachment given, or every cached one of this container
// and network. It succeeds when the netns is already gone: the spec says to
// call the plugins anyway with an empty CNI_NETNS so IPAM releases the
// address, and a plugin must then succeed for what is already gone (its
// error is not second-guessed by its text).
func (c *call) del() int {
	netnsPath := c.rt.NetNS
	if err := checkNetns(netnsPath); err != nil {
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errNoNetns) {
			return c.fail(types.NewError(types.ErrInvalidNetNS, err.Error(), ""), err)
		}
		c.rt.NetNS = ""
	}
	ifnames, err := knownIfnames(c.cni, c.list, c.rt)
	if err != nil {
		return c.fail(types.NewError(types.ErrInternal, err.Error(), ""), err)
	}
	if len(ifnames) == 0 {
		c.log.Info("nothing to delete: no ifname given and no cached attachment")
		return 0
	}
	// Every attachment is attempted even when one fails; the first
	// failure is reported.
	var firstErr error
	for _, name := range ifnames {
		r := *c.rt
		r.IfName = name
		list, err := c.attachmentList(&r)
		if err == nil {
			err = c.cni.DelNetworkList(c.ctx, list, &r)
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("network %q: del %s in %s: %w", c.list.Name, name, netnsPath, err)
		}
	}
	if firstErr != nil {
		return c.fail(asCNIError(firstErr), firstErr)
	}
	return 0
}

// DefaultCNIVersion is the version the wrapper reads a config as when it
// names none: kurma passes a network's config as written, so the image
// decides, and this one speaks the version its plugins and libcni are at
// home with. A conflist's "cniVersions" list, when there is one, is
// libcni's to resolve instead.
const DefaultCNIVersion = "1.0.0"

// ParseConfig reads a single-plugin config or a conflist and returns it as a
// list, so one code path serves both. A config without "cniVersion" (or
// with an empty one) is read as DefaultCNIVersion, in add, del, check and
// setup alike, so libcni caches an add's result under the version del and
// check read it back with. Runtime args (`args`) given at the top of a
// conflist are handed down to each plugin, since libcni only passes a
// plugin its own object.
func ParseConfig(b []byte) (*libcni.NetworkConfigList, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, err
	}
	if v, ok := top["cniVersion"]; (!ok || string(v) == `""`) && top["cniVersions"] == nil {
		top["cniVersion"], _ = json.Marshal(DefaultCNIVersion)
		var err error
		if b, err = json.Marshal(top); err != nil {
			return nil, err
		}
	}
	if _, ok := top["plugins"]; ok {
		list, err := libcni.ConfListFromBytes(b)
		if err != nil {
			return nil, err
		}
		if len(list.Plugins) == 0 {
			return nil, errors.New("conflist has no plugins")
		}
		if raw, ok := top["args"]; ok {
			var args map[string]any
			if err := json.Unmarshal(raw, &args); err != nil {
				return nil, fmt.Errorf("args: %w", err)
			}
			for i, p := range list.Plugins {
				if list.Plugins[i], err = mergeArgs(p, args); err != nil {
					return nil, fmt.Errorf("plugins[%d]: %w", i, err)
				}
			}
		}
		return list, nil
	}
	conf, err := libcni.ConfFromBytes(b)
	if err != nil {
		return nil, err
	}
	if conf.Network.Name == "" {
		return nil, errors.New(`missing "name"`)
	}
	list, err := libcni.ConfListFromConf(conf)
	if err != nil {
		return nil, err
	}
	// libcni reads these list-level switches from a conflist only; a
	// single config may set them too.
	for key, sw := range map[string]*bool{"disableCheck": &list.DisableCheck, "disableGC": &list.DisableGC} {
		if raw, ok := top[key]; ok {
			if err := json.Unmarshal(raw, sw); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
	}
	return list, nil
}

// mergeArgs adds the list-level args to a plugin's config; the plugin's own
// keys win.
func mergeArgs(p *libcni.PluginConfig, listArgs map[string]any) (*libcni.PluginConfig, error) {
	var raw map[string]any
	if err := json.Unmarshal(p.Bytes, &raw); err != nil {
		return nil, err
	}
	own, _ := raw["args"].(map[string]any)
	merged := map[string]any{}
	for k, v := range listArgs {
		merged[k] = v
	}
	for k, v := range own {
		lv, lok := merged[k].(map[string]any)
		ov, ook := v.(map[string]any)
		if lok && ook {
			m := map[string]any{}
			for kk, vv := range lv {
				m[kk] = vv
			}
			for kk, vv := range ov {
				m[kk] = vv
			}
			merged[k] = m
			continue
		}
		merged[k] = v
	}
	return libcni.InjectConf(p, map[string]any{"args": merged})
}

// CNIArgs turns the scalar values of the config's `args.cni` into CNI_ARGS
// pairs, for plugins that only read CNI_ARGS (host-local's IP=, static's
// IP/MAC/GATEWAY=, bridge/tuning/macvlan's MAC=). IgnoreUnknown=1 comes first
// so plugins that parse CNI_ARGS strictly accept keys meant for others.
func CNIArgs(conf []byte) [][2]string {
	var c struct {
		Args struct {
			CNI map[string]any `json:"cni"`
		} `json:"args"`
	}
	if json.Unmarshal(conf, &c) != nil || len(c.Args.CNI) == 0 {
		return nil
	}
	keys := make([]string, 0, len(c.Args.CNI))
	for k := range c.Args.CNI {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out [][2]string
	for _, k := range keys {
		var v string
		switch x := c.Args.CNI[k].(type) {
		case string:
			v = x
		case float64, bool:
			v = fmt.Sprint(x)
		default:
			continue // lists and objects only make sense inside args.cni
		}
		if k == "" || strings.ContainsAny(k, "=;") || strings.Contains(v, ";") {
			continue
		}
		out = append(out, [2]string{k, v})
	}
	if len(out) == 0 {
		return nil
	}
	return append([][2]string{{"IgnoreUnknown", "1"}}, out...)
}

// knownIfnames returns the interface to act on for del/check: the one given,
// or else every interface the libcni cache holds for this container and
// network.
func knownIfnames(cni *libcni.CNIConfig, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) ([]string, error) {
	if rt.IfName != "" {
		return []string{rt.IfName}, nil
	}
	atts, err := cni.GetCachedAttachments(rt.ContainerID)
	if err != nil {
		return nil, fmt.Errorf("reading the CNI cache: %w", err)
	}
	var names []string
	for _, a := range atts {
		if a.Network == list.Name {
			names = append(names, a.IfName)
		}
	}
	return names, nil
}

// asCNIError returns the *types.Error inside err with err's context added to
// the details, or a generic one.
func asCNIError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		out := *te
		if out.Details == "" && err.Error() != te.Error() {
			out.Details = err.Error()
		}
		return &out
	}
	code := types.ErrInternal
	var notFound *PluginNotFoundError
	if errors.Is(err, libcni.ErrorCheckNotSupp) {
		code = types.ErrIncompatibleCNIVersion
	} else if errors.As(err, &notFound) {
		code = types.ErrInvalidNetworkConfig
	} else if errors.Is(err, ErrFlannelNotReady) {
		code = types.ErrTryAgainLater
	}
	return types.NewError(code, err.Error(), "")
}

// configVersion is the config's cniVersion, best effort (for error objects
// written before the config is known to be valid).
func configVersion(b []byte) string {
	var c struct {
		CNIVersion string `json:"cniVersion"`
	}
	if json.Unmarshal(b, &c) != nil || c.CNIVersion == "" {
		return DefaultCNIVersion
	}
	return c.CNIVersion
}

func writeJSON(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	_, _ = w.Write(append(b, '\n'))
}
