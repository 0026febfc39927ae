package builder

import (
	"archive/tar"
	"fmt"
	"path"
	"path/filepath"
	"sort"

	"github.com/kurma-project/kurma/pkg/cniwrap"
)

// identity is one of the plugin images Build writes: its names, its main
// executable and environment, and the annotations it carries beyond those
// every kurma plugin image has.
type identity struct {
	name, version, title string // appc name, version label and OCI tag, OCI title
	annotations          map[string]string
	// exec is the main executable and env its environment (and every
	// call's); nil: the wrapper's setup and cni-netplugin's PATH and
	// CNI_PATH.
	exec []string
	env  []string
	// notWrapper: the /opt/network executables are not kurma's
	// cni-wrapper (and there are no CNI plugins): the image carries
	// neither the wrapper's annotation nor the plugins' version.
	notWrapper bool
}

var cniNetplugin = identity{name: Name, version: Version, title: "cni-netplugin"}

// cniEnv is the environment of the images built on cni-netplugin's rootfs.
var cniEnv = []string{"PATH=" + NetworkDir + ":" + CNIBinDir + ":/usr/sbin:/usr/bin:/sbin:/bin", "CNI_PATH=" + CNIBinDir}

// mainExec is the image's main executable.
func (id identity) mainExec() []string {
	if id.exec != nil {
		return id.exec
	}
	return []string{Entrypoint}
}

// environment is the image's environment, "NAME=value" each.
func (id identity) environment() []string {
	if id.env != nil {
		return id.env
	}
	return cniEnv
}

// The flannel image: cni-netplugin's rootfs (the wrapper, the CNI plugins,
// the host tools) plus flanneld at cniwrap.DefaultFlanneld. The wrapper's
// setup runs flanneld from the network's "flannel" object, and its add
// and del resolve a plugin of type "flannel" into bridge and host-local
// on the node's flannel subnets (package cniwrap, flannel.go).
const (
	FlannelName    = "kurma.dev/flannel"
	FlannelVersion = "v0.28.10" // flanneld's (plugins/flannel/go.mod; a test checks they agree)
	FlannelACIFile = "flannel.aci"
	FlannelOCIDir  = "flannel"
)

var flannelImage = identity{name: FlannelName, version: FlannelVersion, title: "flannel",
	annotations: map[string]string{"kurma.dev/flannel": FlannelVersion}}

// buildFlannel writes the flannel image (ACI and OCI layout) for arch into
// outDir from cni-netplugin's rootfs fs and the flanneld binary.
func buildFlannel(outDir string, fs []entry, flanneld, arch string) (*ImageResult, error) {
	if err := checkExecutable(flanneld, arch); err != nil {
		return nil, fmt.Errorf("builder: flanneld (make flanneld): %w", err)
	}
	bin := cniwrap.DefaultFlanneld[1:]
	files := append(append([]entry(nil), fs...), entry{path: bin, mode: 0o755, typ: tar.TypeReg, src: flanneld})
	files = withParents(files)
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	res := &ImageResult{ACIPath: filepath.Join(outDir, FlannelACIFile), OCIDir: filepath.Join(outDir, FlannelOCIDir)}
	var err error
	if res.ACIImageID, err = flannelImage.writeACI(res.ACIPath, files, arch); err != nil {
		return nil, fmt.Errorf("builder: writing %s: %w", res.ACIPath, err)
	}
	if res.OCIDigest, err = flannelImage.writeOCI(res.OCIDir, files, arch); err != nil {
		return nil, fmt.Errorf("builder: writing %s: %w", res.OCIDir, err)
	}
	return res, nil
}

// flannelInKurma is where kurma's own image carries the flannel ACI.
var flannelInKurma = path.Join(KurmaImages, FlannelACIFile)
