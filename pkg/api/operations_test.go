package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// TestOperationRoutes: reload, network retry and removal by force, through
// the client; force takes a boolean.
func TestOperationRoutes(t *testing.T) {
	b := newBackend()
	sock := apitest.Serve(t, b)
	c := api.NewClient(sock)
	ctx := context.Background()

	res, err := c.Reload(ctx)
	if err != nil || len(res.Unchanged) != 3 || res.Added == nil {
		t.Fatalf("Reload = %+v, %v", res, err)
	}
	nets, err := c.RetryNetwork(ctx, "other")
	if err != nil || len(nets) != 1 || nets[0].Network != "other" {
		t.Fatalf("RetryNetwork = %+v, %v", nets, err)
	}
	_, err = c.RetryNetwork(ctx, "nope")
	wantAPIError(t, err, 400, api.CodeUnknownNetwork, `unknown network "nope"`)

	pod, err := c.CreatePod(ctx, api.CreatePodRequest{})
	if err != nil {
		t.Fatal(err)
	}
	removal, err := c.RemovePod(ctx, pod.ID)
	if err != nil || removal.ID != pod.ID || removal.Left == nil {
		t.Fatalf("RemovePod = %+v, %v", removal, err)
	}
	_, err = c.RemovePod(ctx, pod.ID)
	wantAPIError(t, err, 404, api.CodeNotFound, pod.ID)

	pod, err = c.CreatePod(ctx, api.CreatePodRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"force=false", "force=0"} {
		if status, body := raw(t, sock, http.MethodDelete, "/v1/pods/"+pod.ID+"?"+q, "", nil); status != http.StatusNoContent && status != http.StatusNotFound {
			t.Errorf("DELETE ?%s: %d %s, want a plain delete", q, status, body)
		}
	}
	if status, body := raw(t, sock, http.MethodDelete, "/v1/pods/x?force=maybe", "", nil); status != http.StatusBadRequest {
		t.Errorf("DELETE ?force=maybe: %d %s, want 400", status, body)
	}
}
