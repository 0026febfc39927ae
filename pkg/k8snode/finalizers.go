package k8snode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// A Network in use is not gone silently: each node that holds pods of a
// Network keeps a finalizer of its own on the object (NodeFinalizer),
// put there before the node's first pod joins it (when kurma-cni asks
// kurma-node, agent.go) and taken off once kurmad counts no pod of it on
// the node (report). A Network deleted while pods hold it stays, marked
// deleting, each node's status entry saying how many still do
// (StateDeleting), until the last node's finalizer goes. A deleted Node's
// finalizers go with its status entries (prune).

// FinalizerPrefix starts every node's finalizer.
const FinalizerPrefix = "node.kurma.dev/"

// accessHold is how long a node keeps its finalizer for a pod let into a
// Network though kurmad counts none yet: the pod's ADD follows its access
// check within kurma-cni's timeout. It ends early once kurmad counts a
// pod of the network.
const accessHold = 2 * time.Minute

// NodeFinalizer is node's finalizer on the Networks its pods hold:
// node.kurma.dev/<node>, or, for a name longer than a finalizer's 63
// characters, its first 46 and a digest.
func NodeFinalizer(node string) string {
	if len(node) <= 63 {
		return FinalizerPrefix + node
	}
	sum := sha256.Sum256([]byte(node))
	return FinalizerPrefix + strings.TrimRight(node[:46], ".-") + "-" + hex.EncodeToString(sum[:8])
}

// keepFinalizer puts this node's finalizer on o while pods here hold it
// (but on an object being deleted, which takes no new finalizer), and
// takes it off once none does and no pod was let in lately (accessHold).
// False when a write failed.
func (w *NetworkWatcher) keepFinalizer(ctx context.Context, o *NetworkObject, pods int) bool {
	mine := NodeFinalizer(w.NodeName)
	has := slices.Contains(o.Metadata.Finalizers, mine)
	if pods > 0 {
		// kurmad counts the pods let in: no hold is needed any more.
		w.mu.Lock()
		delete(w.accessed, o.Metadata.Name)
		w.mu.Unlock()
	}
	switch {
	case pods > 0 && !has && !o.Deleting():
		return w.setFinalizer(ctx, o, true) == nil
	case pods == 0 && has && !w.holding(o.Metadata.Name):
		return w.setFinalizer(ctx, o, false) == nil
	}
	return true
}

// holding reports whether a pod was let into network lately, and if so
// when to look again (holdAt).
func (w *NetworkWatcher) holding(network string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	until := w.accessed[network].Add(accessHold)
	if time.Now().After(until) {
		delete(w.accessed, network)
		return false
	}
	if w.holdAt.IsZero() || until.Before(w.holdAt) {
		w.holdAt = until
	}
	return true
}

// setFinalizer adds (on) or removes this node's finalizer of o: a merge
// patch of the finalizers bound to the object's resourceVersion; on a
// conflict the object is read again and the patch made once more.
func (w *NetworkWatcher) setFinalizer(ctx context.Context, o *NetworkObject, on bool) error {
	mine := NodeFinalizer(w.NodeName)
	fins, rv := o.Metadata.Finalizers, o.Metadata.ResourceVersion
	for try := 0; ; try++ {
		want := slices.DeleteFunc(slices.Clone(fins), func(f string) bool { return f == mine })
		if on {
			want = append(want, mine)
		}
		if slices.Equal(want, fins) {
			return nil
		}
		if want == nil {
			want = []string{}
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": rv, "finalizers": want}})
		if err != nil {
			return err
		}
		_, err = w.dyn.Resource(NetworkGVR).Patch(ctx, o.Metadata.Name, ktypes.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kurma-node/" + w.NodeName})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsConflict(err) && try == 0 {
			cur, gerr := w.dyn.Resource(NetworkGVR).Get(ctx, o.Metadata.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if on && cur.GetDeletionTimestamp() != nil {
				return nil
			}
			fins, rv = cur.GetFinalizers(), cur.GetResourceVersion()
			continue
		}
		log := w.Log.WithFields(logrus.Fields{"network": o.Metadata.Name, "finalizer": mine})
		if err != nil {
			log.WithError(err).Warn("keeping this node's finalizer on the Network")
			return err
		}
		if on {
			log.Info("pods on this node hold the Network: put this node's finalizer on it")
		} else {
			log.Info("no pod on this node holds the Network: took this node's finalizer off it")
		}
		return nil
	}
}

// admit notes that a pod is let into the Network objects among networks
// (their finalizers stay for accessHold) and puts this node's finalizer on
// each that lacks it, before the pod's ADD: a Network deleted meanwhile
// then waits for the pod. A failed write is logged and tried again by
// report; the pod is let in.
func (w *NetworkWatcher) admit(ctx context.Context, networks []string) {
	for _, name := range networks {
		o := w.object(name)
		if o == nil || o.Deleting() {
			continue
		}
		w.mu.Lock()
		w.accessed[name] = time.Now()
		w.mu.Unlock()
		if !slices.Contains(o.Metadata.Finalizers, NodeFinalizer(w.NodeName)) {
			_ = w.setFinalizer(ctx, o, true)
		}
	}
}

// DropFinalizers takes this node's finalizer off every Network: kurma is
// being uninstalled from the node, and nothing here will take it off
// later. A failure (kurma's access already gone with its RBAC) is
// logged: `kubectl patch` removes what stays (docs/runtimes.md).
func (w *NetworkWatcher) DropFinalizers(ctx context.Context) {
	for _, o := range w.objects() {
		if slices.Contains(o.Metadata.Finalizers, NodeFinalizer(w.NodeName)) {
			_ = w.setFinalizer(ctx, o, false)
		}
	}
}
