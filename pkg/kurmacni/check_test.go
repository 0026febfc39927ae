package kurmacni

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kurma-project/kurma/pkg/api"
)

// serveCheck serves the two routes CHECK uses, as kurmad serves them once
// issue 11's check route is there: GET /v1/pods?container_id=… and GET
// /v1/pods/{id}/check, whose pod's check outcome is outcomes[id].
func serveCheck(t *testing.T, outcomes map[string][]api.NetworkCheck) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kcnichk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kurmad.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/pods", func(w http.ResponseWriter, r *http.Request) {
		pods := []api.Pod{}
		if id := r.URL.Query().Get("container_id"); outcomes[id] != nil {
			pods = append(pods, api.Pod{ID: id, Runtime: &api.PodRuntime{ContainerID: id, IfName: "eth0"}})
		}
		_ = json.NewEncoder(w).Encode(pods)
	})
	m.HandleFunc("GET /v1/pods/{id}/check", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		pod := api.Pod{ID: id, Check: &api.PodCheck{Networks: outcomes[id]}}
		for _, n := range outcomes[id] {
			pod.Check.Degraded = pod.Check.Degraded || n.Outcome == api.CheckFailed
		}
		_ = json.NewEncoder(w).Encode(pod)
	})
	srv := &http.Server{Handler: m}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return sock
}

// TestCheck: CHECK passes when every network's check passed or was not
// asked; a failed one is the plugin's message; no verdict is code 11; an
// attachment kurmad does not hold is code 3.
func TestCheck(t *testing.T) {
	nc := func(outcome, msg string) api.NetworkCheck {
		return api.NetworkCheck{Name: "mynet", Interface: "eth0", Outcome: outcome, Message: msg}
	}
	sock := serveCheck(t, map[string][]api.NetworkCheck{
		"ok":       {nc(api.CheckPassed, ""), {Name: "other", Interface: "eth1", Outcome: api.CheckSkipped}},
		"degraded": {nc(api.CheckFailed, "CNI error 7: veth not found")},
		"unknown":  {nc(api.CheckUnknown, "network unavailable")},
	})
	p := newPlugin(io.Discard)
	check := func(ctr string) error {
		return p.Check(&skel.CmdArgs{ContainerID: ctr, IfName: "eth0", StdinData: conf("1.0.0", sock, "mynet", nil)})
	}
	if err := check("ok"); err != nil {
		t.Errorf("CHECK of a pod that passed: %v", err)
	}
	checkCNIError(t, check("degraded"), types.ErrInternal, `network "mynet" (eth0): CNI error 7: veth not found`)
	checkCNIError(t, check("unknown"), types.ErrTryAgainLater, "network unavailable")
	checkCNIError(t, check("gone"), types.ErrUnknownContainer, "holds no attachment of container gone")
	var e *types.Error
	if err := p.Check(&skel.CmdArgs{ContainerID: "ok", IfName: "eth0", StdinData: conf("1.0.0", filepath.Join(filepath.Dir(sock), "none.sock"), "mynet", nil)}); !errors.As(err, &e) || e.Code != types.ErrTryAgainLater {
		t.Errorf("CHECK with kurmad down: %v, want code 11", err)
	}
}
