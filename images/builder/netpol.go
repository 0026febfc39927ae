package builder

import (
	"archive/tar"
	"fmt"
	"path"
	"path/filepath"
	"sort"
)

// The netpol image: NetworkPolicy for kurma's networks. Its main
// executable is kurma-netpol (plugins/netpol, a module of its own), a
// daemon on kube-network-policies; the same binary is its /opt/network
// executables (add and check refuse: no pod attaches to a policy
// network; del and gc have nothing to do; status says whether the daemon
// enforces). Nothing else: no CNI plugins, no wrapper, no host tools.
const (
	NetpolName    = "kurma.dev/netpol"
	NetpolVersion = "v1"
	// NetpolEngine is the kube-network-policies release kurma-netpol is
	// built on (plugins/netpol/go.mod; a test checks they agree).
	NetpolEngine  = "v0.8.0"
	NetpolACIFile = "netpol.aci"
	NetpolOCIDir  = "netpol"
	// NetpolBinary is kurma-netpol's path in the image: before
	// /opt/network in path order, as a hard link's target must be.
	NetpolBinary = "/bin/kurma-netpol"
)

// netpolVerbs are the /opt/network executables of the netpol image, each
// a hard link to NetpolBinary (which dispatches on its name).
var netpolVerbs = []string{"add", "check", "del", "gc", "status"}

var netpolImage = identity{name: NetpolName, version: NetpolVersion, title: "netpol",
	annotations: map[string]string{"kurma.dev/kube-network-policies": NetpolEngine},
	exec:        []string{NetpolBinary},
	env:         []string{"PATH=/bin:" + NetworkDir},
	notWrapper:  true}

// buildNetpol writes the netpol image (ACI and OCI layout) for arch into
// outDir with the kurma-netpol binary bin (make netpol).
func buildNetpol(outDir, bin, arch string) (*ImageResult, error) {
	if err := checkExecutable(bin, arch); err != nil {
		return nil, fmt.Errorf("builder: kurma-netpol (make netpol): %w", err)
	}
	var files []entry
	for _, d := range []string{"bin", "dev", "etc", "opt", "opt/network", "proc", "run", "sys", "var", "var/lib", "var/lib/cni"} {
		files = append(files, entry{path: d, mode: 0o755, typ: tar.TypeDir})
	}
	main := NetpolBinary[1:]
	files = append(files,
		entry{path: "tmp", mode: 0o1777, typ: tar.TypeDir},
		entry{path: "etc/passwd", mode: 0o644, typ: tar.TypeReg, data: []byte(passwd)},
		entry{path: "etc/group", mode: 0o644, typ: tar.TypeReg, data: []byte(group)},
		entry{path: main, mode: 0o755, typ: tar.TypeReg, src: bin})
	for _, v := range netpolVerbs {
		files = append(files, entry{path: path.Join(NetworkDir[1:], v), mode: 0o755, typ: tar.TypeLink, link: main})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	res := &ImageResult{ACIPath: filepath.Join(outDir, NetpolACIFile), OCIDir: filepath.Join(outDir, NetpolOCIDir)}
	var err error
	if res.ACIImageID, err = netpolImage.writeACI(res.ACIPath, files, arch); err != nil {
		return nil, fmt.Errorf("builder: writing %s: %w", res.ACIPath, err)
	}
	if res.OCIDigest, err = netpolImage.writeOCI(res.OCIDir, files, arch); err != nil {
		return nil, fmt.Errorf("builder: writing %s: %w", res.OCIDir, err)
	}
	return res, nil
}

// netpolInKurma is where kurma's own image carries the netpol ACI.
var netpolInKurma = path.Join(KurmaImages, NetpolACIFile)
