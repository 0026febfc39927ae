package api

// The check route's wire types and client, as issue 11's part B defines
// them (GET /v1/pods/{id}/check, served on its branch): kurma-cni's CHECK
// calls it. They are written here the same so that kurma-cni builds before
// that branch is merged; merging keeps one copy.

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// PodCheck is the outcome of a pod's check: each attachment's
// /opt/network/check.
type PodCheck struct {
	Time time.Time `json:"time"`
	// Degraded is set while a network's plugin says the pod's attachment
	// is not as its add left it.
	Degraded bool           `json:"degraded"`
	Networks []NetworkCheck `json:"networks"`
}

// Check outcomes of one network (NetworkCheck.Outcome).
const (
	CheckPassed  = "passed"  // the plugin's check succeeded
	CheckFailed  = "failed"  // the plugin answered with an error: the pod is degraded
	CheckUnknown = "unknown" // no verdict: the network is not running, the call timed out, no error object
	CheckSkipped = "skipped" // not asked: the image has no check, or the config's CNI version has none
)

// NetworkCheck is one attachment's check outcome.
type NetworkCheck struct {
	Name      string `json:"name"`
	Interface string `json:"interface"`
	Outcome   string `json:"outcome"`
	Message   string `json:"message,omitempty"`
}

// CheckPod runs the pod's check (each network's /opt/network/check) and
// returns the pod with the outcome in Check. The check endpoint is
// GET /v1/pods/{id}/check.
func (c *Client) CheckPod(ctx context.Context, id string) (*Pod, error) {
	var pod Pod
	if err := c.call(ctx, http.MethodGet, "/v1/pods/"+url.PathEscape(id)+"/check", nil, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}
