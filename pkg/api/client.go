package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultSocket is where kurmad listens unless told otherwise.
const DefaultSocket = "/run/kurma/kurmad.sock"

// SocketIn is where kurmad puts its API socket in run dir runDir when its
// --socket does not say.
func SocketIn(runDir string) string { return filepath.Join(runDir, "kurmad.sock") }

// Client talks to kurmad over its unix socket. Every error response is
// returned as an *Error; a daemon that cannot be reached gives an error
// that says so and names the socket.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the API socket at socketPath.
func NewClient(socketPath string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConns:          4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0, // pod create and pulls may legitimately take minutes
	}
	return &Client{socket: socketPath, hc: &http.Client{Transport: tr}}
}

// Info returns the daemon's description.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	err := c.call(ctx, routeInfo.request(nil), nil, &info)
	return info, err
}

// CreatePod creates a pod and attaches the requested networks. The pod
// it returns carries each attachment's result, not its raw result (it
// asks for the short answer, see PreferMinimal): GetPod has both.
func (c *Client) CreatePod(ctx context.Context, req CreatePodRequest) (*Pod, error) {
	return c.createPod(ctx, req, PreferMinimal)
}

// CreatePodFull is CreatePod whose pod also carries each attachment's raw
// result, as the add printed it (kurmactl pod create -o json prints it).
func (c *Client) CreatePodFull(ctx context.Context, req CreatePodRequest) (*Pod, error) {
	return c.createPod(ctx, req, "")
}

func (c *Client) createPod(ctx context.Context, req CreatePodRequest, prefer string) (*Pod, error) {
	var pod Pod
	resp, err := c.doPrefer(ctx, routeCreatePod.request(nil), req, "application/json", prefer)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := decodeResponse(resp, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

// ListPods lists every pod.
func (c *Client) ListPods(ctx context.Context) ([]Pod, error) {
	var pods []Pod
	err := c.call(ctx, routeListPods.request(nil), nil, &pods)
	return pods, err
}

// GetPod returns one pod by its full ID.
func (c *Client) GetPod(ctx context.Context, id string) (*Pod, error) {
	var pod Pod
	if err := c.call(ctx, routeGetPod.request(nil, id), nil, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

// FindPods lists the pods of a runtime's attachment (ref.ContainerID, and
// ref.Interface and ref.Network when not empty).
func (c *Client) FindPods(ctx context.Context, ref RuntimeRef) ([]Pod, error) {
	var pods []Pod
	err := c.call(ctx, routeFindPods.request(ref.query()), nil, &pods)
	return pods, err
}

// DeleteRuntimePods deletes the pods of a runtime's attachment and returns
// their IDs; none is no error.
func (c *Client) DeleteRuntimePods(ctx context.Context, ref RuntimeRef) ([]string, error) {
	var d Deleted
	err := c.call(ctx, routeDeleteRuntimePods.request(ref.query()), nil, &d)
	return d.Deleted, err
}

// GCRuntimePods deletes the pods of req.Network whose attachment is not in
// req.ValidAttachments and returns their IDs.
func (c *Client) GCRuntimePods(ctx context.Context, req GCRequest) ([]string, error) {
	var d Deleted
	err := c.call(ctx, routeGCRuntimePods.request(nil), req, &d)
	return d.Deleted, err
}

func (ref RuntimeRef) query() url.Values {
	q := url.Values{"container_id": {ref.ContainerID}}
	if ref.Interface != "" {
		q.Set("interface", ref.Interface)
	}
	if ref.Network != "" {
		q.Set("network", ref.Network)
	}
	return q
}

// DeletePod detaches every network of a pod and removes it.
func (c *Client) DeletePod(ctx context.Context, id string) error {
	return c.call(ctx, routeDeletePod.request(nil, id), nil, nil)
}

// CheckPod runs the pod's check (each network's /opt/network/check) and
// returns the pod with the outcome in Check. The check endpoint is
// GET /v1/pods/{id}/check.
func (c *Client) CheckPod(ctx context.Context, id string) (*Pod, error) {
	var pod Pod
	if err := c.call(ctx, routeCheckPod.request(nil, id), nil, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

// PodCalls returns the pod's last plugin calls, oldest first.
func (c *Client) PodCalls(ctx context.Context, id string) ([]PluginCall, error) {
	var calls []PluginCall
	err := c.call(ctx, routePodCalls.request(nil, id), nil, &calls)
	return calls, err
}

// Networks lists every generation of every network and its state (GET
// /v1/networks), one entry each.
func (c *Client) Networks(ctx context.Context) ([]Generation, error) {
	var nets []Generation
	err := c.call(ctx, routeNetworks.request(nil), nil, &nets)
	return nets, err
}

// ProbeNetworks is Networks answered after kurmad asked the plugins of
// the named networks for their status (GET /v1/networks?probe=NAME...):
// their state is as of now, not of the last status_interval.
func (c *Client) ProbeNetworks(ctx context.Context, names []string) ([]Generation, error) {
	var nets []Generation
	err := c.call(ctx, routeProbeNetworks.request(url.Values{"probe": names}), nil, &nets)
	return nets, err
}

// Images lists the images in the daemon's store.
func (c *Client) Images(ctx context.Context) ([]Image, error) {
	var imgs []Image
	err := c.call(ctx, routeImages.request(nil), nil, &imgs)
	return imgs, err
}

// RemoveImage removes an image from the store.
func (c *Client) RemoveImage(ctx context.Context, id string) error {
	return c.call(ctx, routeRemoveImage.request(nil, id), nil, nil)
}

// PullImage fetches uri into the daemon's store. When progress is not nil
// the pull is streamed and progress is called as the daemon reports it.
func (c *Client) PullImage(ctx context.Context, uri string, progress func(done, total int64)) (*Image, error) {
	if progress == nil {
		var img Image
		if err := c.call(ctx, routePullImage.request(nil), PullRequest{URI: uri}, &img); err != nil {
			return nil, err
		}
		return &img, nil
	}
	resp, err := c.do(ctx, routePullImage.request(nil), PullRequest{URI: uri}, NDJSONType)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), NDJSONType) {
		var img Image
		if err := decodeResponse(resp, &img); err != nil {
			return nil, err
		}
		return &img, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev pullEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("kurmad sent an unreadable pull event %q: %w", excerpt(line), err)
		}
		switch {
		case ev.Error != "" || ev.Code != "":
			code := ev.Code
			if code == "" {
				code = CodeInternal
			}
			return nil, &Error{Status: StatusFor(code), Code: code, Message: ev.Error}
		case ev.Image != nil:
			return ev.Image, nil
		case ev.Progress != nil:
			progress(ev.Progress.Done, ev.Progress.Total)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, c.wrapTransport(ctx, fmt.Errorf("reading pull progress: %w", err))
	}
	return nil, errors.New("kurmad closed the pull stream without a result (did it stop?)")
}

// call sends in (if not nil) as JSON and decodes a 2xx body into out (if
// not nil).
func (c *Client) call(ctx context.Context, t target, in, out any) error {
	resp, err := c.do(ctx, t, in, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeResponse(resp, out)
}

func (c *Client) do(ctx context.Context, t target, in any, accept string) (*http.Response, error) {
	return c.doPrefer(ctx, t, in, accept, "")
}

// doPrefer is do with a Prefer header, when prefer is not empty.
func (c *Client) doPrefer(ctx context.Context, t target, in any, accept, prefer string) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, t.method, "http://kurmad"+t.path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.wrapTransport(ctx, err)
	}
	return resp, nil
}

// ErrUnreachable is wrapped by every error of a call that did not get an
// answer from kurmad: the socket could not be dialled (no kurmad, not
// root) or the connection broke before the answer (kurmad stopped or died
// during the call). kurma-cni answers these with CNI's "try again later".
var ErrUnreachable = errors.New("kurmad unreachable")

// transportError is a call that got no answer; its message is for a user,
// and it matches ErrUnreachable and its cause.
type transportError struct {
	msg string
	err error
}

func (e *transportError) Error() string { return e.msg }
func (e *transportError) Unwrap() []error {
	return []error{ErrUnreachable, e.err}
}

// wrapTransport turns a failure to talk to the socket into a message a
// user can act on.
func (c *Client) wrapTransport(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		cause := unwrapSyscall(err)
		switch {
		case errors.Is(err, fs.ErrPermission):
			return &transportError{fmt.Sprintf("cannot reach kurmad at %s: permission denied (the API is root-only: run as root)", c.socket), cause}
		case errors.Is(err, syscall.ECONNREFUSED) && !isSocket(c.socket):
			// connect(2) to a file that is no socket is refused too:
			// no kurmad to start, but a wrong path.
			return &transportError{fmt.Sprintf("cannot reach kurmad at %s: it is not a socket (%s): name kurmad's API socket", c.socket, fileKind(c.socket)), cause}
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
			return &transportError{fmt.Sprintf("cannot reach kurmad at %s: %v (is kurmad running?)", c.socket, cause), cause}
		}
		return &transportError{fmt.Sprintf("cannot reach kurmad at %s: %v", c.socket, cause), cause}
	}
	return &transportError{fmt.Sprintf("talking to kurmad at %s: %v", c.socket, err), err}
}

// isSocket reports whether path is a unix socket (or cannot be looked at).
func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err != nil || fi.Mode().Type() == fs.ModeSocket
}

// fileKind names what is at path: "a regular file", "a directory", ...
func fileKind(path string) string {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err.Error()
	case fi.Mode().IsRegular():
		return "a regular file"
	case fi.IsDir():
		return "a directory"
	}
	return "a " + fi.Mode().Type().String() + " file"
}

func unwrapSyscall(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

func decodeResponse(resp *http.Response, out any) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading kurmad's response: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e Error
		if json.Unmarshal(data, &e) != nil || (e.Message == "" && e.Code == "") {
			return &Error{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode),
				Message: fmt.Sprintf("kurmad: HTTP %d: %s", resp.StatusCode, excerpt(data))}
		}
		e.Status = resp.StatusCode
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
		return &e
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("kurmad sent an unreadable response %q: %w", excerpt(data), err)
	}
	return nil
}

func codeForStatus(status int) string {
	for code, s := range codeStatus {
		if s == status && code != CodeUnknownNetwork {
			return code
		}
	}
	return CodeInternal
}

func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
