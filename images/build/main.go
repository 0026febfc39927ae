// Command build writes kurma's plugin image cni-netplugin as an appc ACI and
// an OCI image layout (`make images` runs `go run ./images/build -out images/out`):
//
//	<out>/cni-netplugin.aci   gzip'd ACI, name kurma.dev/cni-netplugin, version v1
//	<out>/cni-netplugin/      OCI image layout, ref name v1
//	<out>/bin/                the static binaries the images contain
//
// With -flanneld PATH (`make images` passes plugins/flannel/out/flanneld) it
// also writes the flannel image: cni-netplugin's rootfs plus flanneld.
//
//	<out>/flannel.aci         gzip'd ACI, name kurma.dev/flannel, version v0.28.10
//	<out>/flannel/            OCI image layout, ref name v0.28.10
//
// With -netpol PATH (`make images` passes plugins/netpol/out/kurma-netpol) it
// also writes the netpol image: kurma-netpol as main executable and verbs.
//
//	<out>/netpol.aci          ACI, name kurma.dev/netpol, version v1
//	<out>/netpol/             OCI image layout, ref name v1
//
// -arch GOARCH (default this host's) builds the plugin images for amd64 or
// arm64, cross-compiling their binaries; -flanneld and -netpol must then be
// built for it, and -host-tool is refused (host programs are this host's).
// Kurma's own image is built for this host only (kurmad is cgo).
//
// Push the OCI layout with e.g. `skopeo copy oci:images/out/cni-netplugin:v1 docker://host:5000/kurma/cni-netplugin:v1`.
//
// With -kurma (`make image`) it writes kurma's own image instead, from
// <out>/cni-netplugin.aci, <out>/flannel.aci and <out>/netpol.aci (written
// before by `make images`):
//
//	<out>/kurma/              OCI image layout, ref names <version>, <release> and latest
//	<out>/kurma.tar           docker-archive (ctr images import, podman load) of kurma.dev/kurma:<version>, :<release> and :latest
//	<out>/kurma-bin/          the binaries the image contains
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/kurma-project/kurma/images/builder"
)

func main() {
	out := flag.String("out", "images/out", "output directory")
	bin := flag.String("bin", "", "directory for the compiled binaries (default <out>/bin)")
	skip := flag.Bool("skip-compile", false, "use the binaries already in -bin instead of compiling")
	var tools []string
	flag.Func("host-tool", "copy this host program and its libraries into the image (repeatable; e.g. nft for ipMasq/portmap via nftables)", func(s string) error {
		tools = append(tools, s)
		return nil
	})
	flanneld := flag.String("flanneld", "", "also write the flannel image, with this flanneld binary (make flanneld)")
	netpol := flag.String("netpol", "", "also write the netpol image, with this kurma-netpol binary (make netpol)")
	kurma := flag.Bool("kurma", false, "write kurma's own image (kurmad, kurma-node, ... and <out>/cni-netplugin.aci) instead")
	version := flag.String("version", "dev", "with -kurma: the image's tag and the binaries' version (git describe)")
	arch := flag.String("arch", runtime.GOARCH, "architecture (GOARCH) of the images: "+strings.Join(builder.Archs(), " or "))
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *kurma {
		res, err := builder.BuildKurma(ctx, builder.KurmaOptions{OutDir: *out, Version: *version, SkipCompile: *skip, Arch: *arch,
			Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "image: "+format+"\n", args...) }})
		if err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		if len(res.Libs) > 0 {
			fmt.Fprintf(os.Stderr, "image: carries shared libraries for binaries that are not static: %v\n", res.Libs)
		}
		fmt.Printf("%s %s\n%s %s\n", res.OCIDir, res.Digest, res.Archive, strings.Join(res.Names, " "))
		return
	}
	res, err := builder.Build(ctx, builder.Options{
		OutDir:      *out,
		BinDir:      *bin,
		SkipCompile: *skip,
		HostTools:   tools,
		Flanneld:    *flanneld,
		Netpol:      *netpol,
		Arch:        *arch,
		Log: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "images: "+format+"\n", args...)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s\n%s %s\n", res.ACIPath, res.ACIImageID, res.OCIDir, res.OCIDigest)
	for _, r := range []*builder.ImageResult{res.Flannel, res.Netpol} {
		if r != nil {
			fmt.Printf("%s %s\n%s %s\n", r.ACIPath, r.ACIImageID, r.OCIDir, r.OCIDigest)
		}
	}
}
