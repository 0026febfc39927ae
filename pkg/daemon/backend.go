package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/podnet"
)

// backend is the API's Backend over a daemon's parts: it turns their types
// into the wire types and their errors into API errors (apiError).
type backend struct{ d *Daemon }

func (b backend) Info(ctx context.Context) (api.Info, error) {
	d := b.d
	return api.Info{
		Version:  d.opts.Version,
		StateDir: d.cfg.StateDir,
		RunDir:   d.cfg.RunDir,
		Socket:   d.opts.Socket,
		Networks: len(d.cfg.Networks),
		Pods:     len(d.pods.List()),
		Uptime:   time.Since(d.started).Round(time.Second).String(),
	}, nil
}

func (b backend) CreatePod(ctx context.Context, req api.CreatePodRequest) (*api.Pod, error) {
	p, err := b.d.pods.Create(ctx, podnet.CreateRequest{Name: req.Name, Networks: req.Networks,
		RuntimeConfig: runtimeConfig(req.RuntimeConfig), Runtime: podRuntime(req.Runtime)})
	if err != nil {
		return nil, apiError(err)
	}
	return wirePod(p), nil
}

func (b backend) ListPods(ctx context.Context) ([]api.Pod, error) {
	pods := b.d.pods.List()
	out := make([]api.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, *wirePod(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (b backend) GetPod(ctx context.Context, id string) (*api.Pod, error) {
	p, err := b.d.pods.Get(id)
	if err != nil {
		return nil, apiError(err)
	}
	return wirePod(p), nil
}

func (b backend) DeletePod(ctx context.Context, id string) error {
	return apiError(b.d.pods.Delete(ctx, id))
}

func (b backend) Networks(ctx context.Context) ([]api.Network, error) {
	var out []api.Network
	for _, s := range b.d.containers.Status() {
		n := api.Network{
			Name:     s.Name,
			State:    s.State,
			Image:    s.Image,
			Restarts: s.Restarts,
			Pid:      s.Pid,
			Reason:   s.Reason,
			Since:    s.Since,
		}
		if cn, ok := b.d.cfg.Network(s.Name); ok {
			n.Default = cn.Default
		}
		out = append(out, n)
	}
	return out, nil
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
	img, err := b.d.fetcher.FetchWithProgress(ctx, uri, progress)
	if err != nil {
		return nil, &api.Error{Status: api.StatusFor(api.CodePullFailed), Code: api.CodePullFailed, Message: err.Error(), Err: err}
	}
	w := b.wireImage(img)
	return &w, nil
}

// RemoveImage refuses an image a network runs from: its plugin container
// (and every later del of its pods) needs the rootfs.
func (b backend) RemoveImage(ctx context.Context, id string) error {
	if users := b.d.images.users(id); len(users) > 0 {
		return &api.Error{Status: api.StatusFor(api.CodeConflict), Code: api.CodeConflict,
			Message: fmt.Sprintf("image %s is used by network(s) %v", id, users)}
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
		InUse:   b.d.images.users(img.ID),
	}
	if v := img.Verified; v != nil {
		w.Verified = &api.ImageVerification{Mode: string(v.Mode), Method: v.Method, Key: v.Key, Policy: v.Policy}
	}
	return w
}

func wirePod(p *podnet.Pod) *api.Pod {
	out := &api.Pod{ID: p.ID, Name: p.Name, Netns: p.Netns, Created: p.Created, Error: p.Error, Runtime: wireRuntime(p.Runtime)}
	out.Networks = make([]api.Attachment, 0, len(p.Networks))
	for _, a := range p.Networks {
		var res json.RawMessage
		if a.Result != nil {
			res, _ = json.Marshal(a.Result)
		}
		out.Networks = append(out.Networks, api.Attachment{Name: a.Name, Interface: a.Interface, Image: a.Image, Result: res,
			RawResult: a.RawResult, RawResultTruncated: a.RawTruncated})
	}
	return out
}
