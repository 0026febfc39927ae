package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kurma-project/kurma/pkg/metrics"
	"github.com/kurma-project/kurma/pkg/netplugin"
	"github.com/kurma-project/kurma/pkg/networkpod"
	"github.com/kurma-project/kurma/pkg/transcript"
)

func TestOutcome(t *testing.T) {
	netErr := func(err error) error { return &netplugin.NetworkError{Network: "n", Op: netplugin.AddPath, Err: err} }
	for err, want := range map[error]string{
		nil: metrics.OutcomeOK,
		netErr(&netplugin.ExecError{ExitCode: 1}): metrics.OutcomeFailed,
		netErr(netplugin.ErrTimeout):              metrics.OutcomeTimeout,
		netErr(netplugin.ErrUnavailable):          metrics.OutcomeUnavailable,
		netErr(context.Canceled):                  metrics.OutcomeError,
	} {
		if got := outcome(err); got != want {
			t.Errorf("outcome(%v) = %s, want %s", err, got, want)
		}
	}
}

// onCall keeps the transcript of a pod's calls (add, del, check: the pod
// is argv[1]), redacted, and of nothing else.
func TestOnCallTranscripts(t *testing.T) {
	d := &Daemon{transcripts: transcript.New(transcript.Options{RedactKeys: []string{"secret"}})}
	pod := "6d1f9a3c-0000-4000-8000-000000000001"
	for _, c := range []*networkpod.Call{
		{Network: "n", Path: netplugin.AddPath, Args: []string{"/run/kurma/netns/" + pod, pod, "eth0"}, Stdin: []byte(`{"name":"n","secret":"x"}`),
			Stdout: []byte(`{"cniVersion":"1.1.0"}`), Duration: time.Millisecond, Pid: 42},
		{Network: "n", Path: netplugin.GCPath, Stdin: []byte(`{}`)},
		{Network: "n", Path: netplugin.StatusPath, Stdin: []byte(`{}`)},
		{Network: "n", Path: netplugin.DelPath, Args: []string{"/run/kurma/netns/" + pod, pod, "eth0"}, Err: fmt.Errorf("boom: %w", errors.New("x"))},
	} {
		d.onCall(c)
	}
	calls := d.transcripts.Calls(pod)
	if len(calls) != 2 || calls[0].Path != netplugin.AddPath || calls[1].Path != netplugin.DelPath {
		t.Fatalf("transcripts %+v, want the add and the del", calls)
	}
	if calls[0].Stdin != `{"name":"n","secret":"[redacted]"}` || calls[0].Pid != 42 || calls[1].Error != "boom: x" {
		t.Errorf("transcripts %+v", calls)
	}
}
