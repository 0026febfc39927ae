package k8snode

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSameStatus: a node's entry written again with the same words is the
// same (its pod count compared by value: a deleting Network's entry is
// made anew on every pass), and a changed count is not. Counted by
// pointer, a deleting Network's entry was rewritten on every pass and its
// status.pods, written only after an unchanged pass, never was.
func TestSameStatus(t *testing.T) {
	two, alsoTwo, three := 2, 2, 3
	at := metav1.NewTime(time.Unix(1000, 0))
	later := metav1.NewTime(time.Unix(2000, 0))
	for _, c := range []struct {
		name string
		a, b NodeStatus
		same bool
	}{
		{"the same count in two values", NodeStatus{Node: "n1", State: StateDeleting, Pods: &two, LastTransitionTime: at},
			NodeStatus{Node: "n1", State: StateDeleting, Pods: &alsoTwo, LastTransitionTime: later}, true},
		{"another count", NodeStatus{Node: "n1", State: StateDeleting, Pods: &two}, NodeStatus{Node: "n1", State: StateDeleting, Pods: &three}, false},
		{"a count and none", NodeStatus{Node: "n1", State: StateDeleting, Pods: &two}, NodeStatus{Node: "n1", State: StateDeleting}, false},
		{"no count, another reason", NodeStatus{Node: "n1", Reason: "a"}, NodeStatus{Node: "n1", Reason: "b"}, false},
		{"no count, the same", NodeStatus{Node: "n1", Reason: "a", LastTransitionTime: at}, NodeStatus{Node: "n1", Reason: "a"}, true},
	} {
		if got := sameStatus(c.a, c.b); got != c.same {
			t.Errorf("%s: sameStatus %v, want %v", c.name, got, c.same)
		}
	}
}
