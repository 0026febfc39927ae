package enforcer

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
)

// klogSink sends kube-network-policies' and client-go's klog output to
// logrus, one line per event with the key/value pairs as fields, and
// drops the lines about the library's own nftables table.
//
// The library writes a table of its own (named Config.NFTableName) on every
// policy or pod event and removes it when it stops. The daemon's table
// owns that name (package nftable), so every such write fails with EPERM
// (and, on kernels without nft's queue expression, would fail anyway):
// each event would log its failure five times and once more when
// dropped. The daemon says once why, and drops the rest.
type klogSink struct {
	log       *logrus.Entry
	verbosity int
	name      string
	values    []any
	once      *sync.Once
	tableName string
}

func newKlogSink(log *logrus.Entry, verbosity int, tableName string) *klogSink {
	return &klogSink{log: log, verbosity: verbosity, once: &sync.Once{}, tableName: tableName}
}

func (s *klogSink) Init(logr.RuntimeInfo) {}

func (s *klogSink) Enabled(level int) bool { return level <= s.verbosity }

func (s *klogSink) Info(level int, msg string, kv ...any) {
	if s.libraryTable(msg, nil) {
		return
	}
	s.entry(kv).Info(msg)
}

func (s *klogSink) Error(err error, msg string, kv ...any) {
	if s.libraryTable(msg, err) {
		return
	}
	s.entry(kv).WithError(err).Error(msg)
}

func (s *klogSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(append([]any(nil), s.values...), kv...)
	return &c
}

func (s *klogSink) WithName(name string) logr.LogSink {
	c := *s
	if c.name != "" {
		name = c.name + "/" + name
	}
	c.name = name
	return &c
}

func (s *klogSink) entry(kv []any) *logrus.Entry {
	e := s.log
	if s.name != "" {
		e = e.WithField("logger", s.name)
	}
	all := append(append([]any(nil), s.values...), kv...)
	fields := logrus.Fields{}
	for i := 0; i+1 < len(all); i += 2 {
		k, ok := all[i].(string)
		if !ok {
			k = fmt.Sprint(all[i])
		}
		fields[k] = all[i+1]
	}
	return e.WithFields(fields)
}

// libraryTable says whether a line is about the library's attempts at its
// own table; the first time, it logs why they fail and are dropped.
func (s *klogSink) libraryTable(msg string, err error) bool {
	drop := false
	switch {
	case msg == "Syncing nftables rules", msg == "syncing nftables rules", msg == "Dropping out of the queue":
		drop = true
	case msg == "syncing" && err != nil:
		drop = true
	case strings.HasPrefix(msg, "error deleting nftables rules"):
		drop = true
	case msg == "Unhandled Error" && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOENT)):
		// A sync that failed five times, reported once more.
		drop = true
	}
	if drop {
		s.once.Do(func() {
			s.log.WithField("table", "inet "+s.tableName).Info("kube-network-policies' own nftables table is not used: " +
				"kurma-netpol's table owns its name, so the library's writes to it fail (EPERM); those errors are not logged")
		})
	}
	return drop
}
