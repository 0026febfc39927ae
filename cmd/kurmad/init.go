package main

import (
	"os"

	_ "github.com/opencontainers/cgroups/devices" // device rules for the plugin containers' cgroups
	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // cgo: joins namespaces before Go starts
)

// reexecInit turns this process into libcontainer's container init when
// libcontainer re-executes kurmad as `kurmad init` to start a plugin
// container. It never returns in that case.
func reexecInit() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
}
