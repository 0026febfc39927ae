package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/api/apitest"
)

// TestRuntimeRoutes: a runtime's pod is created with its identity and
// capability arguments, found and deleted by that identity (a second
// delete finds nothing and succeeds), and GC deletes exactly the pods of
// its owner on its CNI network missing from the valid list.
func TestRuntimeRoutes(t *testing.T) {
	b := newBackend()
	c := api.NewClient(apitest.Serve(t, b))
	ctx := context.Background()
	mk := func(ctr, network string) *api.Pod {
		t.Helper()
		p, err := c.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"mynet"},
			RuntimeConfig: map[string]map[string]json.RawMessage{"mynet": {"portMappings": json.RawMessage(`[{"hostPort":8080,"containerPort":80}]`)}},
			Runtime:       &api.Runtime{Owner: "podman", ContainerID: ctr, Interface: "net0", Network: network, Netns: "/run/netns/" + ctr}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p1, p2, p3 := mk("c1", "cni1"), mk("c2", "cni1"), mk("c3", "cni2")
	if p1.Runtime == nil || p1.Runtime.Owner != "podman" || p1.Attachments[0].Interface != "net0" {
		t.Errorf("runtime pod %+v", p1)
	}
	if got := b.Created()[0].RuntimeConfig["mynet"]["portMappings"]; string(got) != `[{"hostPort":8080,"containerPort":80}]` {
		t.Errorf("runtime_config reached the backend as %s", got)
	}
	if _, err := c.CreatePod(ctx, api.CreatePodRequest{Networks: []string{"mynet"},
		Runtime: &api.Runtime{ContainerID: "c1", Interface: "net0", Network: "cni1", Netns: "/run/netns/c1"}}); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("second ADD: %v, want conflict", err)
	}

	found, err := c.FindPods(ctx, api.RuntimeRef{ContainerID: "c2"})
	if err != nil || len(found) != 1 || found[0].ID != p2.ID {
		t.Errorf("FindPods(c2) = %+v, %v", found, err)
	}
	if found, err := c.FindPods(ctx, api.RuntimeRef{ContainerID: "c2", Network: "cni2"}); err != nil || len(found) != 0 {
		t.Errorf("FindPods(c2 on cni2) = %+v, %v; want none", found, err)
	}

	ref := api.RuntimeRef{ContainerID: "c1", Interface: "net0", Network: "cni1"}
	if ids, err := c.DeleteRuntimePods(ctx, ref); err != nil || !slices.Equal(ids, []string{p1.ID}) {
		t.Errorf("DeleteRuntimePods = %v, %v", ids, err)
	}
	if ids, err := c.DeleteRuntimePods(ctx, ref); err != nil || len(ids) != 0 {
		t.Errorf("second DeleteRuntimePods = %v, %v; want none, no error", ids, err)
	}

	mk("c4", "cni1")
	ids, err := c.GCRuntimePods(ctx, api.GCRequest{Network: "cni1", Owner: "podman", ValidAttachments: []api.ValidAttachment{{ContainerID: "c4", Interface: "net0"}}})
	if err != nil || !slices.Equal(ids, []string{p2.ID}) {
		t.Errorf("GCRuntimePods = %v, %v; want only %s", ids, err, p2.ID)
	}
	if _, err := c.GetPod(ctx, p3.ID); err != nil {
		t.Errorf("GC of cni1 removed cni2's pod: %v", err)
	}
}

// TestErrorCarriesCNI: a plugin's CNI error object travels in the error
// response and comes back in the client's *api.Error.
func TestErrorCarriesCNI(t *testing.T) {
	b := newBackend()
	b.Hook = func(method, _ string) error {
		if method == "CreatePod" {
			return &api.Error{Code: api.CodePluginFailed, Message: "network \"mynet\": add failed",
				CNI: &api.CNIError{Code: 11, Msg: "try again", Details: "busy"}}
		}
		return nil
	}
	_, err := api.NewClient(apitest.Serve(t, b)).CreatePod(context.Background(), api.CreatePodRequest{})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 502 || ae.CNI == nil || *ae.CNI != (api.CNIError{Code: 11, Msg: "try again", Details: "busy"}) {
		t.Fatalf("CreatePod error = %#v", err)
	}
}

// TestClientUnreachableIsTyped: no kurmad on the socket, or one that closes the
// connection without answering, is ErrUnreachable naming the socket.
func TestClientUnreachableIsTyped(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "none.sock")
	_, err := api.NewClient(sock).Info(context.Background())
	if !errors.Is(err, api.ErrUnreachable) || !strings.Contains(err.Error(), sock) {
		t.Errorf("no socket: %v; want ErrUnreachable naming %s", err, sock)
	}
	closing := filepath.Join(dir, "closing.sock")
	l, err := net.Listen("unix", closing)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	_, err = api.NewClient(closing).Info(context.Background())
	if !errors.Is(err, api.ErrUnreachable) || !strings.Contains(err.Error(), closing) {
		t.Errorf("connection closed: %v; want ErrUnreachable naming %s", err, closing)
	}
}
