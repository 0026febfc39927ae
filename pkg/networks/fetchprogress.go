package networks

import (
	"sync"
	"time"

	"github.com/kurma-project/kurma/pkg/imagefetch"
)

// fetchProgress is how far the fetch of a generation's image has come,
// for net ls while it is fetching: bytes received of the total (0 when
// unknown) since the try began.
type fetchProgress struct {
	mu          sync.Mutex
	done, total int64
	start       time.Time
}

// begin starts a try: nothing received yet.
func (p *fetchProgress) begin() {
	p.mu.Lock()
	p.done, p.total, p.start = 0, 0, time.Now()
	p.mu.Unlock()
}

// option is the fetch option that keeps p up to date.
func (p *fetchProgress) option() imagefetch.FetchOption {
	return imagefetch.WithProgress(func(done, total int64) {
		p.mu.Lock()
		p.done, p.total = done, total
		p.mu.Unlock()
	})
}

// fill sets n's fetch fields from p.
func (p *fetchProgress) fill(n *Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.start.IsZero() {
		return
	}
	n.FetchedBytes, n.FetchTotalBytes, n.FetchStarted = p.done, p.total, p.start.UTC()
}
