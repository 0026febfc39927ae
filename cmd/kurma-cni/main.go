// Command kurma-cni is a CNI plugin that attaches containers through
// kurmad: a container runtime (podman, containerd, CRI-O, ...) runs it from
// its CNI bin dir with a config such as
//
//	{"type": "kurma-cni", "network": "mynet", "socket": "/run/kurma/kurmad.sock",
//	 "capabilities": {"portMappings": true, "ips": true, "mac": true, "bandwidth": true}}
//
// and it forwards each verb (ADD, DEL, CHECK, GC, STATUS; VERSION is its
// own) to kurmad's API. See package kurmacni.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/kurma-project/kurma/pkg/kurmacni"
)

func main() {
	p := &kurmacni.Plugin{Stdout: os.Stdout}
	skel.PluginMainFuncs(p.Funcs(), version.PluginSupports(kurmacni.SupportedVersions()...),
		"kurma-cni: attaches containers through kurmad's image-shipped network plugins")
}
