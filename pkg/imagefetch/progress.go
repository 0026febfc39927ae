package imagefetch

import (
	"time"

	"github.com/sirupsen/logrus"
)

// progressLogger counts bytes written to it and logs done/total at a
// readable rate: at most once a second, or when another 10% is done.
type progressLogger struct {
	log      logrus.FieldLogger
	total    int64
	done     int64
	cb       func(done, total int64)
	last     time.Time
	lastFrac int64
	start    time.Time
}

func newProgress(log logrus.FieldLogger, total int64, cb func(done, total int64)) *progressLogger {
	now := time.Now()
	return &progressLogger{log: log, total: total, cb: cb, last: now, start: now}
}

func (p *progressLogger) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	now := time.Now()
	frac := int64(-1)
	if p.total > 0 {
		frac = p.done * 10 / p.total
	}
	if now.Sub(p.last) >= time.Second || (frac >= 0 && frac > p.lastFrac) {
		p.last = now
		if frac >= 0 {
			p.lastFrac = frac
		}
		p.report(false)
	}
	return len(b), nil
}

func (p *progressLogger) report(final bool) {
	if p.cb != nil {
		p.cb(p.done, p.total)
	}
	fields := logrus.Fields{"done": p.done, "total": p.total}
	if final {
		fields["duration"] = time.Since(p.start).Round(time.Millisecond)
		p.log.WithFields(fields).Info("download finished")
		return
	}
	p.log.WithFields(fields).Info("downloading")
}

func (p *progressLogger) finish() { p.report(true) }
