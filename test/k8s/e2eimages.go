package k8stest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// The images Kubernetes' e2e network tests run, under the names its
// test/utils/image package gives them for the release this module pins
// (k8s.io/kubernetes v1.34.2: agnhost 2.56, busybox 1.37.0-1, ...). No
// registry is reachable here: they are built from upstream's Go sources
// (agnhost, CoreDNS) and Debian's binaries, and imported into every node's
// containerd, where pods find them by name (IfNotPresent).
const (
	AgnhostImage  = "registry.k8s.io/e2e-test-images/agnhost:2.56"
	JessieImage   = "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7"
	E2EBusybox    = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	E2ENginx      = "registry.k8s.io/e2e-test-images/nginx:1.14-4"
	E2EPauseImage = "registry.k8s.io/pause:3.10.1"
	// CoreDNSImage is the cluster DNS's image (DeployCoreDNS).
	CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.12.4"
	// AgnhostANPImage is the name network-policy-api's conformance
	// suite (v0.1.7) runs agnhost by: the same image as AgnhostImage
	// (agnhost 2.56), under a second name. The commands the suite runs
	// (serve-hostname, porter, netexec, connect) are in both versions.
	AgnhostANPImage = "registry.k8s.io/e2e-test-images/agnhost:2.45"

	agnhostVersion = "2.56"
	coreDNSModule  = "github.com/coredns/coredns@v1.12.4"
)

// hostBinaries are the Debian programs the test images carry (make
// k8s-conformance installs their packages), with the
// libraries they load, at the paths the tests call them by (a real
// netcat and a shell that is not busybox's: busybox's nc applet and sh
// break the Services tests' `echo hostName | nc ...`).
var hostBinaries = map[string]string{
	"/bin/sh":           "/usr/bin/dash",
	"/bin/bash":         "/usr/bin/bash",
	"/usr/bin/nc":       "/bin/nc.openbsd",
	"/usr/bin/dig":      "/usr/bin/dig",
	"/usr/bin/nslookup": "/usr/bin/nslookup",
	"/usr/bin/curl":     "/usr/bin/curl",
	"/usr/bin/getent":   "/usr/bin/getent",
	"/sbin/ip":          "/usr/sbin/ip",
	"/usr/bin/iperf":    "/usr/bin/iperf",
}

// BuildE2EImages builds the e2e test images into one docker-archive in
// outDir (e2e-images.tar) and returns its path. The binaries it compiles
// (agnhost from this module's k8s.io/kubernetes, CoreDNS from the module
// proxy) are kept in outDir and rebuilt only when missing.
func BuildE2EImages(ctx context.Context, moduleDir, outDir string, logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	agnhost, err := buildAgnhost(ctx, moduleDir, outDir, logf)
	if err != nil {
		return "", err
	}
	coredns, err := BuildCoreDNS(ctx, outDir, logf)
	if err != nil {
		return "", err
	}
	certDir, err := agnhostSourceDir(ctx, moduleDir)
	if err != nil {
		return "", err
	}
	tools, err := toolFiles()
	if err != nil {
		return "", err
	}
	read := func(p string) ([]byte, error) { return os.ReadFile(p) }
	agn, err := read(agnhost)
	if err != nil {
		return "", err
	}
	cdns, err := read(coredns)
	if err != nil {
		return "", err
	}
	crt, err := read(filepath.Join(certDir, "porter", "localhost.crt"))
	if err != nil {
		return "", err
	}
	key, err := read(filepath.Join(certDir, "porter", "localhost.key"))
	if err != nil {
		return "", err
	}
	pause, err := buildPause(ctx, moduleDir, outDir)
	if err != nil {
		return "", err
	}

	images := map[string]image{}
	// agnhost: upstream's is alpine with bind-tools, curl, netcat-openbsd,
	// iproute2, iperf and bash, CoreDNS at /coredns (the DNS tests' own
	// servers), porter's certificate, /uploads, and a user and group the
	// security tests look for.
	agnFiles := append(tools.clone(),
		file{path: "agnhost", mode: 0o755, data: agn}, file{path: "agnhost-2", link: "agnhost"},
		file{path: "coredns", mode: 0o755, data: cdns},
		file{path: "localhost.crt", mode: 0o644, data: crt}, file{path: "localhost.key", mode: 0o600, data: key},
		file{path: "uploads", dir: true, mode: 0o755})
	if images[AgnhostImage], err = oneLayer(agnFiles, []string{"/agnhost"}, []string{"pause"}); err != nil {
		return "", err
	}
	images[AgnhostANPImage] = images[AgnhostImage]
	// jessie-dnsutils: a Debian with dnsutils, and CoreDNS at /coredns.
	jessie := append(tools.clone(), file{path: "coredns", mode: 0o755, data: cdns})
	if images[JessieImage], err = oneLayer(jessie, nil, []string{"/bin/sh"}); err != nil {
		return "", err
	}
	bb, err := busyboxOnly()
	if err != nil {
		return "", err
	}
	if images[E2EBusybox], err = oneLayer(bb, nil, []string{"sh"}); err != nil {
		return "", err
	}
	// nginx: the EndpointSlice tests only need a container listening on
	// port 80; busybox's httpd does that, under nginx's name.
	www := append(bb, file{path: "usr/share/nginx/html", dir: true, mode: 0o755},
		file{path: "usr/share/nginx/html/index.html", mode: 0o644, data: []byte("kurma e2e nginx stand-in\n")})
	if images[E2ENginx], err = oneLayer(withParentDirs(www), []string{"/bin/httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"}, nil); err != nil {
		return "", err
	}
	if images[E2EPauseImage], err = oneLayer([]file{{path: "pause", mode: 0o755, data: pause}}, []string{"/pause"}, nil); err != nil {
		return "", err
	}
	if images[CoreDNSImage], err = oneLayer([]file{{path: "coredns", mode: 0o755, data: cdns},
		{path: "etc", dir: true, mode: 0o755}, {path: "etc/coredns", dir: true, mode: 0o755}}, []string{"/coredns"}, nil); err != nil {
		return "", err
	}
	dst := filepath.Join(outDir, "e2e-images.tar")
	if err := writeDockerArchive(dst, images); err != nil {
		return "", err
	}
	return dst, nil
}

// fileSet is an image's files.
type fileSet []file

func (fs fileSet) clone() []file { return append([]file(nil), fs...) }

// toolFiles are the files every tool image (agnhost, jessie-dnsutils)
// has: busybox with its applets in /bin, the Debian programs over them,
// their libraries and loader, and the /etc files a resolver and the
// tests read.
func toolFiles() (fileSet, error) {
	files, err := busyboxOnly()
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f.path] = true
	}
	var libs []string
	dsts := make([]string, 0, len(hostBinaries))
	for dst := range hostBinaries {
		dsts = append(dsts, dst)
	}
	sort.Strings(dsts)
	for _, dst := range dsts {
		src := hostBinaries[dst]
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("e2e images: %s (%s): %w", src, dst, err)
		}
		rel := strings.TrimPrefix(dst, "/")
		// Over busybox's applet of that name, if any.
		files = replaceFile(files, file{path: rel, mode: 0o755, data: b})
		have[rel] = true
		deps, err := sharedLibraries(src)
		if err != nil {
			return nil, err
		}
		libs = append(libs, deps...)
	}
	sort.Strings(libs)
	for _, l := range libs {
		rel := strings.TrimPrefix(l, "/")
		if have[rel] {
			continue
		}
		b, err := os.ReadFile(l) // the file the link names, as a file
		if err != nil {
			return nil, err
		}
		files = append(files, file{path: rel, mode: 0o755, data: b})
		have[rel] = true
	}
	etc := map[string]string{
		"etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":         "root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\nnogroup:x:65534:\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
	}
	for p, s := range etc {
		files = append(files, file{path: p, mode: 0o644, data: []byte(s)})
	}
	return withParentDirs(files), nil
}

// busyboxOnly is a busybox-static with every applet linked in /bin, and
// /tmp.
func busyboxOnly() ([]file, error) {
	bb, err := staticBusybox()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	files := []file{{path: "bin", dir: true, mode: 0o755}, {path: "bin/busybox", mode: 0o755, data: bb},
		{path: "tmp", dir: true, mode: 0o1777}}
	for _, a := range strings.Fields(string(out)) {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		files = append(files, file{path: "bin/" + a, link: "busybox"})
	}
	return files, nil
}

// replaceFile puts f in files, instead of a file of its path.
func replaceFile(files []file, f file) []file {
	for i := range files {
		if files[i].path == f.path {
			files[i] = f
			return files
		}
	}
	return append(files, f)
}

// withParentDirs adds a directory entry for every parent of a file that
// has none, sorted so that a directory comes before what it holds.
func withParentDirs(files []file) []file {
	dirs := map[string]bool{}
	for _, f := range files {
		if f.dir {
			dirs[f.path] = true
		}
	}
	for _, f := range files {
		for d := filepath.Dir(f.path); d != "." && d != "/"; d = filepath.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				files = append(files, file{path: d, dir: true, mode: 0o755})
			}
		}
	}
	sort.SliceStable(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files
}

// sharedLibraries are the libraries (and the loader) a dynamic binary
// loads, as ldd lists them; none for a static one.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", bin, err, out)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0]) // the loader
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd %s: %s is not found", bin, f[0])
		}
	}
	return libs, nil
}

// buildAgnhost compiles agnhost from the k8s.io/kubernetes this module
// pins, static, with the version its image is tagged with.
func buildAgnhost(ctx context.Context, moduleDir, outDir string, logf func(string, ...any)) (string, error) {
	dst := filepath.Join(outDir, "agnhost")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.Version="+agnhostVersion,
		"-o", dst, "k8s.io/kubernetes/test/images/agnhost")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	logf("building agnhost %s", agnhostVersion)
	if out, err := runCmd(cmd); err != nil {
		return "", fmt.Errorf("building agnhost: %v\n%s", err, out)
	}
	return dst, nil
}

// BuildCoreDNS installs CoreDNS, static, from the module proxy into
// outDir/coredns-bin (once: about 4 minutes on 2 cores) and returns the
// binary's path.
func BuildCoreDNS(ctx context.Context, outDir string, logf func(string, ...any)) (string, error) {
	bin := filepath.Join(outDir, "coredns-bin")
	dst := filepath.Join(bin, "coredns")
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	logf("building CoreDNS (%s) from the module proxy: a few minutes the first time", coreDNSModule)
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "-ldflags", "-s -w", coreDNSModule)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOBIN="+bin, "GOFLAGS=-mod=mod")
	cmd.Dir = outDir
	if out, err := runCmd(cmd); err != nil {
		return "", fmt.Errorf("building CoreDNS (%s): %v\n%s", coreDNSModule, err, out)
	}
	return dst, nil
}

// agnhostSourceDir is test/images/agnhost in the module cache.
func agnhostSourceDir(ctx context.Context, moduleDir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m k8s.io/kubernetes: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "test", "images", "agnhost"), nil
}

// buildPause compiles cmd/pause (the e2e suite's pause image holds it as
// the sandbox image does).
func buildPause(ctx context.Context, moduleDir, outDir string) ([]byte, error) {
	dst := filepath.Join(outDir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", dst, "./cmd/pause")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := runCmd(cmd); err != nil {
		return nil, fmt.Errorf("building pause: %v\n%s", err, out)
	}
	return os.ReadFile(dst)
}
