package api

import "context"

// Backend is what the API serves: package daemon implements it over
// podnet, networkpod and imagefetch. An error that is an *Error is sent
// with its Status and Code; any other error becomes 500 "internal".
type Backend interface {
	Info(ctx context.Context) (Info, error)
	CreatePod(ctx context.Context, req CreatePodRequest) (*Pod, error)
	ListPods(ctx context.Context) ([]Pod, error)
	GetPod(ctx context.Context, id string) (*Pod, error)
	DeletePod(ctx context.Context, id string) error
	// CheckPod runs the pod's check and returns it with the outcome
	// (CodeConflict for a pod that is not ready).
	CheckPod(ctx context.Context, id string) (*Pod, error)
	// PodCalls returns the pod's last plugin calls, oldest first.
	PodCalls(ctx context.Context, id string) ([]PluginCall, error)
	// Networks returns every generation of every network (GET
	// /v1/networks): the config's networks in config order, then those
	// only pods still use; a network's generations newest first.
	Networks(ctx context.Context) ([]Generation, error)
	Images(ctx context.Context) ([]Image, error)
	// PullImage fetches uri into the store. progress may be nil; when not,
	// the backend calls it as bytes arrive (total <= 0 when unknown).
	PullImage(ctx context.Context, uri string, progress func(done, total int64)) (*Image, error)
	// RemoveImage refuses (CodeConflict) while a network uses the image.
	RemoveImage(ctx context.Context, id string) error
	// DeleteRuntimePods deletes the pods ref selects and returns their
	// IDs; none selected is no error (a runtime's DEL is idempotent).
	DeleteRuntimePods(ctx context.Context, ref RuntimeRef) ([]string, error)
	// GCRuntimePods deletes the pods of req.Network whose attachment is
	// not in req.ValidAttachments and returns their IDs.
	GCRuntimePods(ctx context.Context, req GCRequest) ([]string, error)
	Operator
}

// PodsEncoder is a Backend that keeps each pod's answer encoded: GET
// /v1/pods (without a runtime filter) then answers EncodedPods' bytes as
// they are, rather than encoding ListPods' pods on every request (1000
// pods are about 1 MB of JSON). They must be what encoding ListPods' pods
// gives.
type PodsEncoder interface {
	EncodedPods(ctx context.Context) ([]byte, error)
}

// Prober is a Backend that can ask networks' plugins for their status now:
// GET /v1/networks?probe=NAME (kurma-cni's STATUS) then answers from a
// fresh probe of each named network rather than one up to status_interval
// old.
type Prober interface {
	ProbeNetworks(ctx context.Context, names []string)
}
