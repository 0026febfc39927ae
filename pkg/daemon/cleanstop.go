package daemon

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/state"
)

// A clean stop's note. A boot's reconcile runs every network's gc, so that
// plugins release what they hold for pods the journal does not know (a
// journal lost or rebuilt; a crash). After a clean stop there is none to
// release: kurmad then notes, beside the journal, which networks' gcs were
// current (podnet.CurrentGCs) and which journal it left (the file's
// identity, after Close folded every log into it). The next boot takes the
// note (reads and removes it before the journal is opened) and, when the
// journal is still that one, skips those networks' gcs: a boot after a
// restart waited for twenty gcs, one per network, and nothing else in it
// took as long. A journal replaced, restored, written since, or with logs
// beside it does not match, and every gc runs.

// cleanStopFile is the note's name in the state dir.
const cleanStopFile = "kurmad.clean-stop"

type cleanStop struct {
	Journal  state.Identity `json:"journal"`
	Networks []string       `json:"networks"`
}

// writeCleanStop notes networks as current for journal, which Close left.
// Best effort: without the note the next boot runs every gc.
func writeCleanStop(stateDir, journal string, networks []string, log logrus.FieldLogger) {
	id, ok := state.ClosedIdentity(journal)
	if !ok {
		return
	}
	b, err := json.Marshal(cleanStop{Journal: id, Networks: networks})
	if err == nil {
		p := filepath.Join(stateDir, cleanStopFile)
		if err = os.WriteFile(p+".tmp", b, 0o600); err == nil {
			err = os.Rename(p+".tmp", p)
		}
	}
	if err != nil {
		log.WithError(err).Warn("cannot note the clean stop: the next boot runs every network's gc")
	}
}

// takeCleanStop reads and removes the note of the stop before this boot,
// and returns the networks whose boot gc it makes needless: none unless
// journal is the one that stop left. It runs before the journal is
// opened; a note that cannot be removed is not used.
func takeCleanStop(stateDir, journal string, log logrus.FieldLogger) []string {
	p := filepath.Join(stateDir, cleanStopFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.WithError(err).Warn("cannot remove the note of the last clean stop: every network's gc runs")
		return nil
	}
	var note cleanStop
	if err != nil || json.Unmarshal(b, &note) != nil {
		return nil
	}
	if id, ok := state.ClosedIdentity(journal); !ok || id != note.Journal {
		log.Info("the journal is not the one the last clean stop left: every network's gc runs")
		return nil
	}
	return note.Networks
}
