package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// NDJSONType is the media type a client sends in Accept on POST /v1/images
// to receive pull progress as newline-delimited JSON.
const NDJSONType = "application/x-ndjson"

// progressInterval throttles streamed pull progress.
const progressInterval = 100 * time.Millisecond

// Server is the kurmad HTTP API, an http.Handler over a Backend, serving
// Routes. Every error is a JSON object {"error": "...", "code": "..."}; see the
// Code constants for the codes and their statuses.
type Server struct {
	backend   Backend
	log       logrus.FieldLogger
	mux       *http.ServeMux
	opts      ServerOptions
	closing   chan struct{} // closed when Serve begins its shutdown: long polls answer
	closeOnce sync.Once
}

// Defaults of ServerOptions' timeouts.
const (
	// DefaultReadTimeout bounds reading a request, headers and body (at
	// most MaxBodySize): a client that stalls mid-request loses its
	// connection instead of holding it and a goroutine forever.
	DefaultReadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection no request used
	// for this long; longer than Client's own idle timeout (30 s), so the
	// client, not the server, closes an idle connection first and never
	// sends a request on one the server is closing.
	DefaultIdleTimeout = 2 * time.Minute
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Logger receives the request log (debug) and failed requests; nil →
	// the logrus standard logger.
	Logger logrus.FieldLogger
	// ReadTimeout and IdleTimeout (0 → DefaultReadTimeout,
	// DefaultIdleTimeout) bound reading a request and an idle
	// connection. Neither limits how long a handler runs or a response
	// streams (a pod create or a pull may take minutes).
	ReadTimeout, IdleTimeout time.Duration
	// OnRequest, when set, hears of every request once answered: its
	// route (the pattern it matched, "GET /v1/pods/{id}", or "" for none),
	// its status and how long it took (kurmad's API metrics).
	OnRequest func(route string, status int, d time.Duration)
}

// NewServer returns a Server serving b.
func NewServer(b Backend, opts ServerOptions) *Server {
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	s := &Server{backend: b, log: opts.Logger, opts: opts, closing: make(chan struct{})}
	if s.log == nil {
		s.log = logrus.StandardLogger()
	}
	m := http.NewServeMux()
	s.route(m)
	s.mux = m
	return s
}

// ServeHTTP routes r, answering unknown paths and methods with JSON errors,
// recovering handler panics as 500 and logging every request at debug.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	var pattern string
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.WithFields(logrus.Fields{"method": r.Method, "path": r.URL.Path, "panic": p}).
				Errorf("api: handler panicked\n%s", debug.Stack())
			if !sw.wroteHeader {
				s.writeJSON(sw, r, http.StatusInternalServerError,
					&Error{Code: CodeInternal, Message: fmt.Sprintf("internal error: %v", p)})
			}
		}
		s.log.WithFields(logrus.Fields{
			"method":   r.Method,
			"path":     r.URL.Path,
			"status":   sw.statusCode(),
			"duration": time.Since(start).Round(time.Microsecond),
		}).Debug("api request")
		if s.opts.OnRequest != nil {
			s.opts.OnRequest(pattern, sw.statusCode(), time.Since(start))
		}
	}()

	// Routed once: a route's handler takes the real writer back from
	// unrouted; the mux's own 404/405 (and redirects for unclean paths)
	// are plain text, so they only reach the recorder, and are answered
	// in JSON instead.
	rec := &headerRecorder{header: http.Header{}}
	u := &unrouted{headerRecorder: rec, routed: sw}
	s.mux.ServeHTTP(u, r)
	// r.Pattern alone does not tell: the mux sets it to the cleaned path
	// of the redirect it answers an unclean one with (/v1/pods/../info).
	if u.served {
		pattern = r.Pattern
		return
	}
	switch rec.status {
	case http.StatusMethodNotAllowed:
		if allow := rec.header.Get("Allow"); allow != "" {
			sw.Header().Set("Allow", allow)
		}
		s.writeError(sw, r, Errorf(CodeMethodNotAllowed, "method %s not allowed on %s (allowed: %s)",
			r.Method, r.URL.Path, rec.header.Get("Allow")))
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		s.writeError(sw, r, Errorf(CodeNotFound, "no route %s %s (did you mean %s?)",
			r.Method, r.URL.Path, rec.header.Get("Location")))
	default:
		s.writeError(sw, r, Errorf(CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	}
}

// unrouted is the writer the mux gets: what its own fallback handlers
// write goes to the recorder; a route's handler writes to routed.
type unrouted struct {
	*headerRecorder
	routed http.ResponseWriter
	served bool // a route's handler took routed
}

// Serve serves the API on l until ctx is done, then stops accepting,
// waits up to grace for requests in flight and closes the rest. It returns
// nil after a shutdown caused by ctx.
func (s *Server) Serve(ctx context.Context, l net.Listener, grace time.Duration) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: min(10*time.Second, s.opts.ReadTimeout),
		ReadTimeout:       s.opts.ReadTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		ErrorLog:          newStdLogger(s.log),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	s.closeOnce.Do(func() { close(s.closing) })
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		s.log.WithError(err).Warn("api: requests still running at shutdown; closing them")
		hs.Close()
	}
	<-errc
	return nil
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	info, err := s.backend.Info(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, info)
}

func (s *Server) listPods(w http.ResponseWriter, r *http.Request) {
	ref, filter, aerr := runtimeRefFromQuery(r.URL.Query())
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	if enc, ok := s.backend.(PodsEncoder); ok && !filter {
		body, err := enc.EncodedPods(r.Context())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeBody(w, http.StatusOK, body)
		return
	}
	pods, err := s.backend.ListPods(r.Context())
	if err == nil && filter {
		pods = slices.DeleteFunc(pods, func(p Pod) bool { return !ref.matches(&p) })
	}
	writeList(s, w, r, pods, err)
}

func (s *Server) createPod(w http.ResponseWriter, r *http.Request) {
	data, aerr := readBody(w, r, MaxBodySize)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	req, aerr := decodeCreatePod(data)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	pod, err := s.backend.CreatePod(r.Context(), req)
	if err == nil && pod == nil {
		err = errors.New("backend returned no pod")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if prefersMinimal(r) {
		s.writeMinimalPod(w, r, pod)
		return
	}
	s.writeJSON(w, r, http.StatusCreated, pod)
}

// PreferMinimal is the Prefer header (RFC 7240) a client sends on POST
// /v1/pods to get the pod with each attachment's result once: without the
// raw_result beside it (GET /v1/pods/{id} has it) and without the
// deprecated "networks", which repeats every result for clients of the
// previous release. A client that does not send it gets the full answer,
// as every /v1 client did before; kurmad answers Preference-Applied when
// it applied it.
const PreferMinimal = "return=minimal"

// prefersMinimal says whether r's Prefer header holds return=minimal.
func prefersMinimal(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(v, ",") {
			if name, _, _ := strings.Cut(pref, ";"); strings.EqualFold(strings.TrimSpace(name), PreferMinimal) {
				return true
			}
		}
	}
	return false
}

// writeMinimalPod answers a create with pod and each result once (see
// PreferMinimal).
func (s *Server) writeMinimalPod(w http.ResponseWriter, r *http.Request, pod *Pod) {
	p := *pod
	p.Attachments = slices.Clone(pod.Attachments)
	for i := range p.Attachments {
		p.Attachments[i].RawResult, p.Attachments[i].RawResultTruncated = "", false
	}
	w.Header().Set("Preference-Applied", PreferMinimal)
	// A plain pod: Answer would add the deprecated "networks".
	s.writeJSON(w, r, http.StatusCreated, minimalPod{&p})
}

// minimalPod is a pod that Answer leaves as it is.
type minimalPod struct{ *Pod }

func (s *Server) getPod(w http.ResponseWriter, r *http.Request) {
	pod, err := s.backend.GetPod(r.Context(), r.PathValue("id"))
	s.writePod(w, r, pod, err)
}

// writePod answers with the pod, or the error (a backend that returned
// neither did not find it).
func (s *Server) writePod(w http.ResponseWriter, r *http.Request, pod *Pod, err error) {
	if err == nil && pod == nil {
		err = Errorf(CodeNotFound, "pod %q not found", r.PathValue("id"))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, pod)
}

// checkPod runs the pod's check: a GET, as the runtime's CNI CHECK it
// serves, since it changes nothing but the outcome kurmad shows.
func (s *Server) checkPod(w http.ResponseWriter, r *http.Request) {
	pod, err := s.backend.CheckPod(r.Context(), r.PathValue("id"))
	s.writePod(w, r, pod, err)
}

func (s *Server) podCalls(w http.ResponseWriter, r *http.Request) {
	calls, err := s.backend.PodCalls(r.Context(), r.PathValue("id"))
	writeList(s, w, r, calls, err)
}

func (s *Server) deletePod(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("force") {
		s.removePod(w, r)
		return
	}
	if err := s.backend.DeletePod(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// deleteRuntimePods is a runtime's DEL: it deletes the pods of one
// attachment, and answers 200 with their IDs, none included.
func (s *Server) deleteRuntimePods(w http.ResponseWriter, r *http.Request) {
	ref, ok, aerr := runtimeRefFromQuery(r.URL.Query())
	if aerr == nil && !ok {
		aerr = Errorf(CodeBadRequest, "DELETE /v1/pods needs container_id (and interface, network) to select a runtime's pods; delete a pod by ID with DELETE /v1/pods/{id}")
	}
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	ids, err := s.backend.DeleteRuntimePods(r.Context(), ref)
	s.writeDeleted(w, r, ids, err)
}

func (s *Server) gcRuntimePods(w http.ResponseWriter, r *http.Request) {
	data, aerr := readBody(w, r, MaxBodySize)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	req, aerr := decodeGC(data)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	ids, err := s.backend.GCRuntimePods(r.Context(), req)
	s.writeDeleted(w, r, ids, err)
}

func (s *Server) writeDeleted(w http.ResponseWriter, r *http.Request, ids []string, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ids == nil {
		ids = []string{}
	}
	s.writeJSON(w, r, http.StatusOK, Deleted{Deleted: ids})
}

func (s *Server) networks(w http.ResponseWriter, r *http.Request) {
	if !s.waitNetworks(w, r) {
		return
	}
	names := r.URL.Query()["probe"]
	if len(names) > 0 {
		if p, ok := s.backend.(Prober); ok {
			p.ProbeNetworks(r.Context(), names)
		}
	}
	nets, err := s.backend.Networks(r.Context())
	if err == nil {
		err = unknownProbed(names, nets)
	}
	writeList(s, w, r, nets, err)
}

// unknownProbed is the error of a ?probe= naming a network nets does not
// list: asked of nothing, it would otherwise pass for one that answered.
func unknownProbed(names []string, nets []Generation) error {
	for _, name := range names {
		if !slices.ContainsFunc(nets, func(g Generation) bool { return g.Network == name }) {
			var known []string
			for _, g := range nets {
				if !slices.Contains(known, g.Network) {
					known = append(known, g.Network)
				}
			}
			list := strings.Join(known, ", ")
			if list == "" {
				list = "none"
			}
			return Errorf(CodeUnknownNetwork, "probe: unknown network %q (known networks: %s)", name, list)
		}
	}
	return nil
}

func (s *Server) images(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.backend.Images(r.Context())
	writeList(s, w, r, imgs, err)
}

// writeList answers 200 with list, [] rather than null when it is empty,
// or the error.
func writeList[T any](s *Server, w http.ResponseWriter, r *http.Request, list []T, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if list == nil {
		list = []T{}
	}
	s.writeJSON(w, r, http.StatusOK, list)
}

func (s *Server) pullImage(w http.ResponseWriter, r *http.Request) {
	data, aerr := readBody(w, r, MaxBodySize)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	req, aerr := decodePull(data)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	if !acceptsNDJSON(r) {
		img, err := s.backend.PullImage(r.Context(), req.URI, nil)
		if err == nil && img == nil {
			err = errors.New("backend returned no image")
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, r, http.StatusOK, img)
		return
	}

	// Streaming: the status is 200 before the pull starts, so the outcome
	// is the last line, an image or an error.
	st := &ndjsonStream{w: w, rc: http.NewResponseController(w)}
	w.Header().Set("Content-Type", NDJSONType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	st.flush()
	defer func() {
		// The status is out: a panic can only be reported in-band, then
		// ServeHTTP logs it.
		if p := recover(); p != nil {
			st.mu.Lock()
			if !st.closed {
				st.closed = true
				st.writeLocked(pullEvent{Error: fmt.Sprintf("internal error: %v", p), Code: CodeInternal})
			}
			st.mu.Unlock()
			panic(p)
		}
	}()
	img, err := s.backend.PullImage(r.Context(), req.URI, st.progress)
	if err == nil && img == nil {
		err = errors.New("backend returned no image")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	if err != nil {
		e := s.toAPIError(r, err)
		st.writeLocked(pullEvent{Error: e.Message, Code: e.Code})
		return
	}
	st.writeLocked(pullEvent{Image: img})
}

func acceptsNDJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), NDJSONType) {
				return true
			}
		}
	}
	return false
}

// ndjsonStream writes pull events; the backend may call progress from any
// goroutine, even (wrongly) after PullImage returned, so writes are
// serialized and refused once the handler is done.
type ndjsonStream struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	mu     sync.Mutex
	closed bool
	last   time.Time
}

func (st *ndjsonStream) progress(done, total int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	now := time.Now()
	if now.Sub(st.last) < progressInterval && !(total > 0 && done >= total) {
		return
	}
	st.last = now
	st.writeLocked(pullEvent{Progress: &Progress{Done: done, Total: total}})
}

func (st *ndjsonStream) writeLocked(ev pullEvent) {
	line, err := json.Marshal(ev)
	if err != nil {
		line, _ = json.Marshal(pullEvent{Error: "encoding pull event: " + err.Error(), Code: CodeInternal})
	}
	// A write error means the client went away; the request context is
	// canceled and the pull stops on its own.
	_, _ = st.w.Write(append(line, '\n'))
	st.flush()
}

func (st *ndjsonStream) flush() { _ = st.rc.Flush() }

func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) {
	if err := s.backend.RemoveImage(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// toAPIError turns a backend error into what is sent: an *Error as is
// (status filled from its code when missing), anything else as internal.
func (s *Server) toAPIError(r *http.Request, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		out := *e
		if out.Code == "" {
			out.Code = CodeInternal
		}
		if out.Status < 400 || out.Status > 599 {
			out.Status = StatusFor(out.Code)
		}
		if out.Message == "" {
			out.Message = http.StatusText(out.Status)
		}
		if out.Status >= 500 {
			s.log.WithFields(logrus.Fields{"method": r.Method, "path": r.URL.Path, "code": out.Code}).
				WithError(err).Warn("api request failed")
		}
		return &out
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return &Error{Status: 499, Code: CodeInternal, Message: "request canceled by the client"}
	}
	s.log.WithFields(logrus.Fields{"method": r.Method, "path": r.URL.Path}).
		WithError(err).Error("api request failed")
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := s.toAPIError(r, err)
	s.writeJSON(w, r, e.Status, e)
}

func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(Answer(v))
	if err != nil {
		s.log.WithFields(logrus.Fields{"method": r.Method, "path": r.URL.Path}).
			WithError(err).Error("api: encoding response")
		status = http.StatusInternalServerError
		body, _ = json.Marshal(&Error{Code: CodeInternal, Message: "encoding response: " + err.Error()})
	}
	writeBody(w, status, append(body, '\n'))
}

// writeBody answers status with body, JSON ending in a newline.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// statusWriter records the status for the access log and whether the
// header went out (after which a panic can no longer become a 500).
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) statusCode() int {
	if !w.wroteHeader {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach Flush on the real writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headerRecorder captures what the mux's fallback handlers would send.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }
func (h *headerRecorder) WriteHeader(code int) {
	if h.status == 0 {
		h.status = code
	}
}
func (h *headerRecorder) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return len(b), nil
}
