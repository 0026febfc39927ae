package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// RevisionHeader carries, on every answer of GET /v1/networks, the
// revision of the generations' states it lists: an opaque token that
// changes whenever a generation's state, reason or image does, one
// appears or goes, or which serves new pods changes (not with a fetch's
// progress). GET /v1/networks?wait=R answers once it is not R.
const RevisionHeader = "Kurma-Revision"

// MaxWait is the longest GET /v1/networks?wait=R holds its answer while
// the revision stays R; it then answers the same revision, and the
// client asks again.
const MaxWait = 5 * time.Minute

// NetworksWatcher is a Backend whose networks' changes can be waited for
// (GET /v1/networks?wait=R): the revision of what Networks lists, and a
// channel closed at its next change. A revision is not reused by a
// restarted kurmad: a client that held one of the last kurmad's gets the
// new kurmad's answer at once.
type NetworksWatcher interface {
	NetworksRevision() (rev string, changed <-chan struct{})
}

// waitNetworks is the revision part of GET /v1/networks: it sets the
// revision header and, for ?wait=R, first waits for the revision to
// differ from R, kurmad's shutdown, or MaxWait. false when the request
// ended meanwhile (the client went) or cannot wait (answered with an
// error).
func (s *Server) waitNetworks(w http.ResponseWriter, r *http.Request) bool {
	nw, ok := s.backend.(NetworksWatcher)
	q := r.URL.Query()
	if !ok {
		if q.Has("wait") {
			s.writeError(w, r, Errorf(CodeBadRequest, "wait: this kurmad cannot wait for its networks' changes"))
			return false
		}
		return true
	}
	rev, changed := nw.NetworksRevision()
	if q.Has("wait") && rev == q.Get("wait") {
		t := time.NewTimer(MaxWait)
		defer t.Stop()
		select {
		case <-changed:
		case <-t.C:
		case <-s.closing:
		case <-r.Context().Done():
			return false
		}
		rev, _ = nw.NetworksRevision()
	}
	// Read before the list: a change between the two makes the next wait
	// answer at once, never one missed.
	w.Header().Set(RevisionHeader, rev)
	return true
}

// WaitNetworks is GET /v1/networks?wait=rev: every generation of every
// network and the revision of their states, answered once the revision
// is not rev (at once for rev "", or when kurmad restarted), or after
// MaxWait with the same revision. A caller follows kurmad's networks by
// calling it again with the revision it got.
func (c *Client) WaitNetworks(ctx context.Context, rev string) ([]Generation, string, error) {
	t := routeNetworks.request(nil)
	if rev != "" {
		t = routeWaitNetworks.request(url.Values{"wait": {rev}})
	}
	resp, err := c.do(ctx, t, nil, "application/json")
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var nets []Generation
	if err := decodeResponse(resp, &nets); err != nil {
		return nil, "", err
	}
	return nets, resp.Header.Get(RevisionHeader), nil
}
