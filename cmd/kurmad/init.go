package main

import (
	_ "github.com/opencontainers/cgroups/devices"           // device rules for the plugin containers' cgroups
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // cgo: joins namespaces before Go starts

	"github.com/kurma-project/kurma/pkg/networkpod"
)

// libcontainer re-executes kurmad as `kurmad init` to start each plugin
// container process; networkpod.Init turns that process into the container
// init (it never returns then) and otherwise pins main to the main thread,
// which networkpod needs (see its doc).
func init() { networkpod.Init() }
