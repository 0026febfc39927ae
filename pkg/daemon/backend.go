package daemon

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/imagefetch/imageref"
	"github.com/kurma-project/kurma/pkg/podnet"
	"github.com/kurma-project/kurma/pkg/state"
)

// backend is the API's Backend over a daemon's parts: it turns their types
// into the wire types and their errors into API errors (apiError).
type backend struct{ d *Daemon }

func (b backend) Info(ctx context.Context) (api.Info, error) {
	d := b.d
	return api.Info{
		Version:   d.opts.Version,
		StateDir:  d.config().StateDir,
		RunDir:    d.config().RunDir,
		Socket:    d.opts.Socket,
		Config:    d.opts.ConfigPath,
		Networks:  len(d.config().Networks),
		Pods:      d.pods.Count(),
		Teardowns: d.pods.Pending(),
		GCWaiting: d.pods.WaitingGCs(),
		Uptime:    time.Since(d.started).Round(time.Second).String(),
	}, nil
}

func (b backend) CreatePod(ctx context.Context, req api.CreatePodRequest) (*api.Pod, error) {
	p, err := b.d.pods.Create(ctx, podnet.CreateRequest{Name: req.Name, Networks: req.Networks,
		RuntimeConfig: runtimeConfig(req.RuntimeConfig), Interfaces: req.Interfaces, Runtime: podRuntime(req.Runtime)})
	if err != nil {
		return nil, apiError(err)
	}
	return wirePod(p, nil), nil
}

func (b backend) ListPods(ctx context.Context) ([]api.Pod, error) {
	pods := b.d.pods.ListAll()
	out := make([]api.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, *wirePod(p, b.d.pods.LastCheck(p.ID)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (b backend) GetPod(ctx context.Context, id string) (*api.Pod, error) {
	p, err := b.d.pods.Get(id)
	if err != nil {
		return nil, apiError(err)
	}
	return wirePod(p, b.d.pods.LastCheck(id)), nil
}

func (b backend) DeletePod(ctx context.Context, id string) error {
	return apiError(b.d.pods.Delete(ctx, id))
}

func (b backend) CheckPod(ctx context.Context, id string) (*api.Pod, error) {
	p, c, err := b.d.pods.Check(ctx, id)
	if err != nil {
		return nil, apiError(err)
	}
	return wirePod(p, c), nil
}

func (b backend) PodCalls(ctx context.Context, id string) ([]api.PluginCall, error) {
	if _, err := b.d.pods.Get(id); err != nil {
		return nil, apiError(err)
	}
	calls := b.d.transcripts.Calls(id)
	out := make([]api.PluginCall, 0, len(calls))
	for _, c := range calls {
		out = append(out, api.PluginCall{
			Network: c.Network, Generation: c.Generation, Path: c.Path, Args: c.Args,
			Stdin: c.Stdin, StdinTruncated: c.StdinTruncated,
			Stdout: c.Stdout, StdoutTruncated: c.StdoutTruncated,
			Stderr: c.Stderr, StderrTruncated: c.StderrTruncated,
			ExitCode: c.ExitCode, Signal: c.Signal, Error: c.Error,
			Started: c.Start.UTC(), DurationMS: float64(c.Duration.Microseconds()) / 1000,
			Pid: c.Pid, InProcess: c.InProcess,
		})
	}
	return out, nil
}

func (b backend) Networks(ctx context.Context) ([]api.Generation, error) {
	return b.d.nets.Generations(), nil
}

// NetworksRevision is the revision of what Networks lists and a channel
// closed at its next change (api.NetworksWatcher).
func (b backend) NetworksRevision() (string, <-chan struct{}) {
	return b.d.nets.Revision()
}

// ProbeNetworks asks the plugin of each running generation of the named
// networks for its status now (api.Prober).
func (b backend) ProbeNetworks(ctx context.Context, names []string) {
	b.d.nets.Probe(ctx, names...)
}

func (b backend) Images(ctx context.Context) ([]api.Image, error) {
	imgs, err := b.d.fetcher.List()
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, b.wireImage(img))
	}
	return out, nil
}

func (b backend) PullImage(ctx context.Context, uri string, progress func(done, total int64)) (*api.Image, error) {
	// As the config's check: a path without file:// gets its "did you
	// mean", rather than a failed appc discovery.
	if _, msg := imageref.Resolve(uri, "/"); msg != "" {
		return nil, apiError(&marked{fmt.Errorf("image %s", msg), errBadImageRef})
	}
	img, err := b.d.fetcher.FetchWithProgress(ctx, uri, progress)
	if err != nil {
		return nil, apiError(&marked{err, errPullFailed})
	}
	w := b.wireImage(img)
	return &w, nil
}

// RemoveImage refuses an image a network runs from: its plugin container
// (and every later del of its pods) needs the rootfs.
func (b backend) RemoveImage(ctx context.Context, id string) error {
	if users := b.d.nets.ImageUsers(id); len(users) > 0 {
		return apiError(&marked{fmt.Errorf("image %s is used by network(s) %v", id, users), errImageInUse})
	}
	return apiError(b.d.fetcher.Remove(id))
}

func (b backend) wireImage(img *imagefetch.Image) api.Image {
	w := api.Image{
		ID:      img.ID,
		Name:    img.Name,
		Version: img.Version,
		Format:  img.Format,
		Source:  img.Source,
		Size:    img.Size,
		Fetched: img.Fetched,
		InUse:   b.d.nets.ImageUsers(img.ID),
	}
	if v := img.Verified; v != nil {
		w.Verified = &api.ImageVerification{Mode: string(v.Mode), Method: v.Method, Key: v.Key, Policy: v.Policy}
	}
	return w
}

// wirePod is the journal's record of a pod, with its last check, as the
// API answers it: each attachment's result is the normalized CNI 1.1.0
// result as journaled, its bytes sent as they are.
func wirePod(p *state.Pod, check *podnet.PodCheck) *api.Pod {
	out := &api.Pod{ID: p.ID, Name: p.Name, Netns: p.Netns, Created: p.Created, Error: p.Error, Check: wireCheck(check),
		Runtime: wireRuntime(p.Runtime), State: string(p.Phase)}
	out.Attachments = make([]api.Attachment, 0, len(p.Attachments))
	for _, a := range p.Attachments {
		out.Attachments = append(out.Attachments, api.Attachment{Network: a.Network, Interface: a.Interface, Image: a.Image,
			Result: a.Result, RawResult: a.RawResult, RawResultTruncated: a.RawResultTruncated})
	}
	return out
}

func (b backend) Reload(ctx context.Context) (*api.ReloadResult, error) {
	res, err := b.d.Reload(ctx)
	return res, apiError(err)
}

func (b backend) PlanReload(ctx context.Context) (*api.ReloadResult, error) {
	res, err := b.d.PlanReload(ctx)
	return res, apiError(err)
}

// RetryNetwork tries every failed generation of the network again now: a
// fetch waiting for its next attempt, a container waiting to restart.
func (b backend) RetryNetwork(ctx context.Context, name string) ([]api.Generation, error) {
	gens, err := b.d.nets.Retry(name)
	return gens, apiError(err)
}

// RemovePod removes a pod even when its dels fail, then runs the gc of
// each network whose del did not succeed (see gcAfterForce).
func (b backend) RemovePod(ctx context.Context, id string) (*api.PodRemoval, error) {
	left, err := b.d.pods.ForceDelete(ctx, id)
	if err != nil {
		return nil, apiError(err)
	}
	res := &api.PodRemoval{ID: id, Left: []api.Leftover{}}
	var ran []string
	for _, l := range left {
		res.Left = append(res.Left, api.Leftover{Network: l.Network, Interface: l.Interface, Error: l.Err.Error()})
		if l.Network != "" && !slices.Contains(ran, l.Network) {
			ran = append(ran, l.Network)
			b.d.gcAfterForce(ctx, l.Network)
		}
	}
	return res, nil
}

func wireCheck(c *podnet.PodCheck) *api.PodCheck {
	if c == nil {
		return nil
	}
	out := &api.PodCheck{Time: c.Time, Degraded: c.Degraded, Attachments: make([]api.AttachmentCheck, 0, len(c.Attachments))}
	for _, n := range c.Attachments {
		out.Attachments = append(out.Attachments, api.AttachmentCheck(n))
	}
	return out
}
