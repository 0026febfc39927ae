package networkpod

import (
	"os"
	"runtime"

	"github.com/opencontainers/runc/libcontainer"
)

// Init must be called from an init function of package main in every
// binary that runs plugin containers (kurmad, and test binaries through their own init):
//
//	func init() { networkpod.Init() }
//
// libcontainer starts every container process by re-executing the current
// binary as `<exe> init`; in that process Init becomes the container process
// and never returns. In the daemon itself it pins the main goroutine to the
// main thread: libcontainer's mount-source helper goroutine joins a new
// container's mount namespace on a locked thread and exits without
// unlocking, which kills that thread, except when it is the main thread:
// then the thread is parked for ever and keeps the container's mount
// namespace, with the overlay and the netns dir's copy, alive.
func Init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init() // does not return
	}
	runtime.LockOSThread()
}
