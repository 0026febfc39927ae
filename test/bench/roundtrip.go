package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The anchor of the HTTP + JSON share of a create: a POST between two Go
// processes on a unix socket, the client's the bench's own HTTP stack, the
// server a copy of the bench (-roundtrip-serve) that reads the body and
// answers 201 with a pod-sized JSON body, with roundTripIdle between
// requests as a create's plugin call leaves kurmad idle. It is what the
// transport and the two processes' wake-ups cost on this machine, before
// kurmad does anything.

const (
	roundTripIdle = 35 * time.Millisecond
	roundTrips    = 200
)

// roundTripServe is the server: it serves on sock until killed.
func roundTripServe(sock string) error {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	body := `{"id":"` + strings.Repeat("0", 36) + `","attachments":[` + strings.Repeat(`{"x":"`+strings.Repeat("y", 60)+`"},`, 15) + `{}]}`
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, body)
	}))
}

// roundTrip times roundTrips POSTs to a roundTripServe copy of the bench
// started under dir.
func roundTrip(ctx context.Context, dir string) (dist, error) {
	sock := filepath.Join(dir, "roundtrip.sock")
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	srv := exec.CommandContext(ctx, self, "-roundtrip-serve", sock)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	post := func() error {
		resp, err := c.Post("http://kurmad/v1/pods", "application/json", strings.NewReader(`{"networks":["bench0"]}`))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for post() != nil { // the server's socket is not there yet
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the round-trip server did not answer on %s", sock)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var out dist
	for range roundTrips {
		time.Sleep(roundTripIdle)
		start := time.Now()
		if err := post(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
