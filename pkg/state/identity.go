package state

import (
	"os"
	"syscall"
)

// Identity tells a closed journal file from any other: its size, mtime
// and inode. kurmad notes it at a clean stop (pkg/daemon's cleanstop.go)
// to know at the next boot that the journal is still the one it left.
type Identity struct {
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
	Inode   uint64 `json:"inode"`
}

// ClosedIdentity is the identity of the journal at path as Close left it:
// ok is false when the file cannot be read or a log lies beside it (the
// journal was not closed: a kill, a crash, or a kurmad running).
func ClosedIdentity(path string) (id Identity, ok bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return Identity{}, false
	}
	st, isUnix := fi.Sys().(*syscall.Stat_t)
	if !isUnix {
		return Identity{}, false
	}
	if logs, err := logFiles(path); err != nil || len(logs) > 0 {
		return Identity{}, false
	}
	return Identity{Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), Inode: st.Ino}, true
}
