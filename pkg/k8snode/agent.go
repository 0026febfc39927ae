package k8snode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kurma-project/kurma/pkg/kurmacni"
)

// The node agent: kurma-node's answers to kurma-cni on the node, on a
// unix socket beside kurmad's (the conflist's "node_agent"; the protocol
// is kurmacni's, nodeagent.go): whether a pod's namespace may join its
// networks, and its attachments, which become its network-status
// annotation.

// Reasons of the Events a pod kurma-node refuses gets.
const (
	// RefusedReason: a network does not admit the pod's namespace.
	RefusedReason = "NetworkRefused"
	// NotFoundReason: a network the pod's Multus annotation names is
	// neither a NetworkAttachmentDefinition nor a kurma network.
	NotFoundReason = "NetworkNotFound"
	// UnavailableReason: the network the pod names is one kurma cannot
	// serve (a NetworkAttachmentDefinition it refuses), or being deleted.
	UnavailableReason = "NetworkUnavailable"
)

// ServeAgent serves kurma-cni's calls on the unix socket sock until ctx
// ends.
func (w *NetworkWatcher) ServeAgent(ctx context.Context, sock string) error {
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		l.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+kurmacni.AccessPath, w.serveAccess)
	mux.HandleFunc("POST "+kurmacni.AttachedPath, w.serveAttached)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	err = srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func agentAnswer(rw http.ResponseWriter, code int, msg string) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	_ = json.NewEncoder(rw).Encode(kurmacni.AgentError{Message: msg})
}

func (w *NetworkWatcher) serveAccess(rw http.ResponseWriter, r *http.Request) {
	var req kurmacni.AccessRequest
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 64<<10)).Decode(&req); err != nil || req.Namespace == "" || req.Pod == "" {
		agentAnswer(rw, http.StatusBadRequest, "kurma-node: an access request names a pod's namespace, name and networks")
		return
	}
	resolved, denied := w.resolve(req.Namespace, req.References)
	var err error
	if denied == nil {
		denied, err = w.access(r.Context(), req.Namespace, append(slices.Clone(req.Networks), resolved...))
	}
	if err != nil {
		agentAnswer(rw, http.StatusServiceUnavailable, "kurma-node: "+err.Error())
		return
	}
	if denied != nil {
		w.event(r.Context(), req.Namespace, req.Pod, req.UID, denied.EventReason(), denied.Error())
		w.Log.WithFields(logrus.Fields{"pod": req.Namespace + "/" + req.Pod, "network": denied.Network}).Info(denied.Error())
		agentAnswer(rw, http.StatusForbidden, denied.Error())
		return
	}
	w.admit(r.Context(), append(slices.Clone(req.Networks), resolved...))
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(kurmacni.AccessAnswer{Networks: resolved})
}

// resolve names the kurmad network serving each of a pod's Multus
// references, as Multus finds them: the NetworkAttachmentDefinition of
// the reference's namespace, the pod's (namespace) when it names none;
// else, for a reference without a namespace, the kurma network of its
// name (a Network object or the ConfigMap's). A reference to nothing, or
// to a NAD kurma cannot serve, refuses the pod, naming it and why.
func (w *NetworkWatcher) resolve(namespace string, refs []kurmacni.NetworkRef) ([]string, *AccessDenied) {
	if len(refs) == 0 {
		return nil, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		ns := r.Namespace
		if ns == "" {
			ns = namespace
		}
		ref := ns + "/" + r.Name
		deny := func(reason, format string, args ...any) *AccessDenied {
			return &AccessDenied{Network: ref, Namespace: namespace, Reason: reason, Message: fmt.Sprintf(
				"network %q (pod annotation %s): ", r.String(), kurmacni.MultusNetworksAnnotation) + fmt.Sprintf(format, args...)}
		}
		if d, ok := w.nads[ref]; ok {
			if d.Err != nil {
				return nil, deny(UnavailableReason, "%v", d.Err)
			}
			out = append(out, d.Network)
			continue
		}
		if r.Namespace == "" {
			if o := w.object(r.Name); o != nil && !o.Deleting() || slices.Contains(w.baseNames, r.Name) {
				out = append(out, r.Name)
				continue
			}
		}
		why := "no NetworkAttachmentDefinition " + ref
		if w.nadInformer == nil {
			why = "the cluster has no NetworkAttachmentDefinition CRD (" + NADCRD + ") kurma serves"
			if w.NADImage == "" {
				why = "kurma-node serves no NetworkAttachmentDefinitions (no --nad-image)"
			}
		}
		if r.Namespace == "" {
			why += fmt.Sprintf(", and no kurma network %q", r.Name)
		}
		return nil, deny(NotFoundReason, "%s", why)
	}
	return out, nil
}

func (w *NetworkWatcher) serveAttached(rw http.ResponseWriter, r *http.Request) {
	var rep kurmacni.AttachedReport
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 256<<10)).Decode(&rep); err != nil || rep.Namespace == "" || rep.Pod == "" {
		agentAnswer(rw, http.StatusBadRequest, "kurma-node: an attachment report names a pod's namespace and name")
		return
	}
	w.reports.add(rep)
	rw.WriteHeader(http.StatusAccepted)
}

// reportQueue writes pods' network-status annotations, each pod's latest
// report, retried with backoff (1 s doubling to 1 min) until written or
// the pod is gone: a failed write never fails a sandbox.
type reportQueue struct {
	cs  kubernetes.Interface
	log logrus.FieldLogger
	// rename is how the annotation names a kurmad network (nil: as is).
	rename func(string) string

	mu      sync.Mutex
	pending map[string]kurmacni.AttachedReport // by namespace/name
	tries   map[string]int
	wake    chan struct{}
}

func newReportQueue(cs kubernetes.Interface, log logrus.FieldLogger) *reportQueue {
	return &reportQueue{cs: cs, log: log, pending: map[string]kurmacni.AttachedReport{}, tries: map[string]int{}, wake: make(chan struct{}, 1)}
}

func (q *reportQueue) add(rep kurmacni.AttachedReport) {
	q.mu.Lock()
	key := rep.Namespace + "/" + rep.Pod
	q.pending[key] = rep
	q.tries[key] = 0
	q.mu.Unlock()
	q.poke()
}

func (q *reportQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run writes the pending reports until ctx ends.
func (q *reportQueue) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		q.mu.Lock()
		batch := make(map[string]kurmacni.AttachedReport, len(q.pending))
		for k, v := range q.pending {
			if q.tries[k] >= 0 {
				batch[k] = v
				q.tries[k] = -1 - q.tries[k] // in flight
			}
		}
		q.mu.Unlock()
		for key, rep := range batch {
			err := q.write(ctx, rep)
			q.mu.Lock()
			cur, still := q.pending[key]
			tries := -1 - q.tries[key]
			switch {
			case !still || cur.ContainerID != rep.ContainerID || q.tries[key] >= 0:
				// A newer report came meanwhile: it is written next.
			case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err):
				// Written, or the pod is gone or another of its name (its
				// UID differs): nothing to retry.
				delete(q.pending, key)
				delete(q.tries, key)
			default:
				tries++
				q.tries[key] = -1 - tries // waits for its timer
				delay := min(time.Second<<min(tries-1, 6), time.Minute)
				q.log.WithError(err).WithFields(logrus.Fields{"pod": key, "retry_in": delay}).Warn("writing the pod's network-status annotation")
				time.AfterFunc(delay, func() {
					q.mu.Lock()
					if t, ok := q.tries[key]; ok && t < 0 {
						q.tries[key] = -1 - t
					}
					q.mu.Unlock()
					q.poke()
				})
			}
			q.mu.Unlock()
		}
	}
}

// write patches the pod's network-status annotation; the pod's UID, when
// known, is a precondition (a pod of that name made since is not
// written).
func (q *reportQueue) write(ctx context.Context, rep kurmacni.AttachedReport) error {
	if q.rename != nil {
		rep.Status = slices.Clone(rep.Status)
		for i := range rep.Status {
			rep.Status[i].Name = q.rename(rep.Status[i].Name)
		}
	}
	status, err := json.Marshal(rep.Status)
	if err != nil {
		return err
	}
	meta := map[string]any{"annotations": map[string]string{kurmacni.NetworkStatusAnnotation: string(status)}}
	if rep.UID != "" {
		meta["uid"] = rep.UID
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = q.cs.CoreV1().Pods(rep.Namespace).Patch(wctx, rep.Pod, ktypes.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kurma-node"})
	return err
}
