package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestCleanStopNote: the note of a clean stop names its networks to the
// next boot only while the journal is the file that stop left, and a boot
// takes it once (it is removed). A journal written since, replaced,
// removed, or with a log beside it makes every gc run.
func TestCleanStopNote(t *testing.T) {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	cases := []struct {
		name   string
		change func(t *testing.T, journal string)
		want   string
	}{
		{"unchanged", func(*testing.T, string) {}, "[a b]"},
		{"written since", func(t *testing.T, journal string) {
			appendTo(t, journal, "x")
		}, "[]"},
		{"replaced", func(t *testing.T, journal string) {
			b, _ := os.ReadFile(journal)
			if err := os.WriteFile(journal+".new", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(journal+".new", journal); err != nil {
				t.Fatal(err)
			}
		}, "[]"},
		{"removed", func(t *testing.T, journal string) {
			if err := os.Remove(journal); err != nil {
				t.Fatal(err)
			}
		}, "[]"},
		{"a log beside it", func(t *testing.T, journal string) {
			appendTo(t, journal+"-log.000001", "x")
		}, "[]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			journal := filepath.Join(dir, "kurmad.db")
			appendTo(t, journal, "journal")
			writeCleanStop(dir, journal, []string{"a", "b"}, log)
			c.change(t, journal)
			if got := fmt.Sprint(takeCleanStop(dir, journal, log)); got != c.want {
				t.Errorf("takeCleanStop = %s, want %s", got, c.want)
			}
			if _, err := os.Stat(filepath.Join(dir, cleanStopFile)); !os.IsNotExist(err) {
				t.Errorf("the note is still there after the boot took it (%v)", err)
			}
			if got := takeCleanStop(dir, journal, log); got != nil {
				t.Errorf("a second boot took %v from the same note", got)
			}
		})
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
