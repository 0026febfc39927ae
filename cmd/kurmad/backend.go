package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/podnet"
)

// The daemon is the API's Backend: these methods translate between the
// parts' own types and the wire types, and map the parts' sentinel errors to
// API errors with their status and code.

func (d *daemon) Info(ctx context.Context) (api.Info, error) {
	return api.Info{
		Version:  version,
		StateDir: d.cfg.StateDir,
		RunDir:   d.cfg.RunDir,
		Socket:   d.socket,
		Networks: len(d.cfg.Networks),
		Pods:     len(d.pods.List()),
		Uptime:   time.Since(d.started).Round(time.Second).String(),
	}, nil
}

func (d *daemon) CreatePod(ctx context.Context, req api.CreatePodRequest) (*api.Pod, error) {
	p, err := d.pods.Create(ctx, podnet.CreateRequest{Name: req.Name, Networks: req.Networks})
	if err != nil {
		return nil, apiError(err)
	}
	return wirePod(p), nil
}

func (d *daemon) ListPods(ctx context.Context) ([]api.Pod, error) {
	pods := d.pods.List()
	out := make([]api.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, *wirePod(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (d *daemon) GetPod(ctx context.Context, id string) (*api.Pod, error) {
	p, err := d.pods.Get(id)
	if err != nil {
		return nil, apiError(err)
	}
	return wirePod(p), nil
}

func (d *daemon) DeletePod(ctx context.Context, id string) error {
	return apiError(d.pods.Delete(ctx, id))
}

func (d *daemon) Networks(ctx context.Context) ([]api.Network, error) {
	var out []api.Network
	for _, s := range d.containers.Status() {
		n := api.Network{
			Name:     s.Name,
			State:    s.State,
			Image:    s.Image,
			Restarts: s.Restarts,
			Pid:      s.Pid,
			Reason:   s.Reason,
		}
		if cn, ok := d.cfg.Network(s.Name); ok {
			n.Default = cn.Default
		}
		out = append(out, n)
	}
	return out, nil
}

func (d *daemon) Images(ctx context.Context) ([]api.Image, error) {
	imgs, err := d.fetcher.List()
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, d.wireImage(img))
	}
	return out, nil
}

func (d *daemon) PullImage(ctx context.Context, uri string, progress func(done, total int64)) (*api.Image, error) {
	img, err := d.fetcher.FetchWithProgress(ctx, uri, progress)
	if err != nil {
		return nil, &api.Error{Status: http.StatusBadGateway, Code: "pull_failed", Message: err.Error()}
	}
	w := d.wireImage(img)
	return &w, nil
}

func (d *daemon) RemoveImage(ctx context.Context, id string) error {
	if users := d.imageUsers(id); len(users) > 0 {
		return &api.Error{Status: http.StatusConflict, Code: "conflict",
			Message: fmt.Sprintf("image %s is used by network(s) %v", id, users)}
	}
	return apiError(d.fetcher.Remove(id))
}

func (d *daemon) imageUsers(id string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var users []string
	for name, img := range d.images {
		if img == id {
			users = append(users, name)
		}
	}
	sort.Strings(users)
	return users
}

func (d *daemon) wireImage(img *imagefetch.Image) api.Image {
	w := api.Image{
		ID:      img.ID,
		Name:    img.Name,
		Version: img.Version,
		Format:  img.Format,
		Source:  img.Source,
		Size:    img.Size,
		Fetched: img.Fetched,
		InUse:   d.imageUsers(img.ID),
	}
	if v := img.Verified; v != nil {
		w.Verified = &api.ImageVerification{Mode: string(v.Mode), Method: v.Method, Key: v.Key, Policy: v.Policy}
	}
	return w
}

func wirePod(p *podnet.Pod) *api.Pod {
	out := &api.Pod{ID: p.ID, Name: p.Name, Netns: p.Netns, Created: p.Created, Error: p.Error}
	out.Networks = make([]api.Attachment, 0, len(p.Networks))
	for _, a := range p.Networks {
		var res json.RawMessage
		if a.Result != nil {
			res, _ = json.Marshal(a.Result)
		}
		out.Networks = append(out.Networks, api.Attachment{Name: a.Name, Interface: a.Interface, Image: a.Image, Result: res})
	}
	return out
}

// apiError maps the parts' sentinel errors to API errors.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return err
	}
	status, code := http.StatusInternalServerError, "internal"
	switch {
	case errors.Is(err, podnet.ErrUnknownNetwork), errors.Is(err, networkpod.ErrUnknownNetwork):
		status, code = http.StatusBadRequest, "unknown_network"
	case errors.Is(err, podnet.ErrBadRequest):
		status, code = http.StatusBadRequest, "bad_request"
	case errors.Is(err, podnet.ErrNotFound), errors.Is(err, imagefetch.ErrNotFound):
		status, code = http.StatusNotFound, "not_found"
	case errors.Is(err, networkpod.ErrUnavailable):
		status, code = http.StatusServiceUnavailable, "network_unavailable"
	case errors.Is(err, networkpod.ErrTimeout):
		status, code = http.StatusGatewayTimeout, "plugin_timeout"
	case errors.Is(err, networkpod.ErrPluginFailed):
		status, code = http.StatusBadGateway, "plugin_failed"
	}
	return &api.Error{Status: status, Code: code, Message: err.Error()}
}
