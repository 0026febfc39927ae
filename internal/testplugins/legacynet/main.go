// Command legacynet is a third-party plugin image's program for kurma's
// end-to-end tests, in the manner of Kurma-era images built on CNI 0.2.0:
// the image's main executable and its /opt/network/add and del are this one
// static program, which speaks the Kurma contract itself (no cni-wrapper,
// no libcni) and refuses any config whose cniVersion is neither absent nor
// "0.2.0". It picks its part by the name it is run as (argv[0]'s base name):
//
//	main  read the config on stdin, refuse it (stderr, exit 1) or say
//	      "legacynet: ready" on stderr and run until SIGTERM; with a
//	      "pool" in the config, it also holds the pods' leases, in memory
//	      alone, as a DHCP daemon would (leases.go)
//	add   <netns> <pod uuid> [ifname]: make a link ifname (eth0 when none
//	      is given; a bridge device, which needs no other link, where the
//	      kernel may lack dummy) in the netns with the config's "address"
//	      (with a "pool", the address main leases the pod), and
//	      print a 0.2.0 result: without cniVersion when the config has
//	      none, as a 0.1.0/0.2.0 plugin may; spaced and ordered as
//	      rawResult shows, so a test can tell its exact bytes
//	del   <netns> <pod uuid> [ifname]: delete that link; exit 0 when it or
//	      the netns is already gone; with a "pool", first release the pod's
//	      lease, which fails when main holds none for it (a main restarted
//	      since the add forgot it)
//
// A refused add or del prints a CNI error object on stdout and exits 1.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// supported is the one cniVersion a config may name.
const supported = "0.2.0"

type config struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Address    string `json:"address"`
	Pool       string `json:"pool"` // an IPv4 prefix main leases addresses of
}

func main() {
	part := filepath.Base(os.Args[0])
	conf, err := readConfig()
	if err != nil {
		fail(part, err)
	}
	switch part {
	case "main":
		if conf.Pool != "" {
			if err := serveLeases(conf.Pool); err != nil {
				fail(part, err)
			}
		}
		fmt.Fprintln(os.Stderr, "legacynet: ready")
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
	case "add":
		if conf.Pool != "" && len(os.Args) > 2 {
			conf.Address, err = askMain("lease", os.Args[2])
		}
		if err == nil {
			err = add(conf, os.Args[1:])
		}
	case "del":
		if conf.Pool != "" && len(os.Args) > 2 {
			_, err = askMain("release", os.Args[2])
		}
		if err == nil {
			err = del(os.Args[1:])
		}
	default:
		err = fmt.Errorf("unknown part %q", part)
	}
	if err != nil {
		fail(part, err)
	}
}

// readConfig reads stdin and refuses a cniVersion other than 0.2.0.
func readConfig() (config, error) {
	var c config
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if c.CNIVersion != "" && c.CNIVersion != supported {
		return c, fmt.Errorf("incompatible CNI versions: config is %q, legacynet supports %s (or none)", c.CNIVersion, supported)
	}
	return c, nil
}

func fail(part string, err error) {
	if part != "main" {
		out, _ := json.Marshal(map[string]any{"cniVersion": supported, "code": 1, "msg": err.Error()})
		fmt.Println(string(out))
	}
	fmt.Fprintf(os.Stderr, "legacynet %s: %v\n", part, err)
	os.Exit(1)
}

// args returns the netns path and the interface name.
func args(a []string) (string, string, error) {
	if len(a) < 2 || len(a) > 3 {
		return "", "", fmt.Errorf("usage: <netns> <pod uuid> [ifname], got %d arguments", len(a))
	}
	ifname := "eth0"
	if len(a) == 3 && a[2] != "" {
		ifname = a[2]
	}
	return a[0], ifname, nil
}

func add(c config, a []string) error {
	nsPath, ifname, err := args(a)
	if err != nil {
		return err
	}
	addr, err := netlink.ParseAddr(c.Address)
	if err != nil {
		return fmt.Errorf("address %q: %w", c.Address, err)
	}
	h, err := handleAt(nsPath)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: ifname}}); err != nil {
		return fmt.Errorf("add %s: %w", ifname, err)
	}
	link, err := h.LinkByName(ifname)
	if err == nil {
		err = h.AddrAdd(link, addr)
	}
	if err == nil {
		err = h.LinkSetUp(link)
	}
	if err != nil {
		return fmt.Errorf("set up %s: %w", ifname, err)
	}
	fmt.Print(rawResult(c))
	return nil
}

// rawResult is add's stdout: a 0.2.0 result whose spacing and key order
// no JSON encoder would produce.
func rawResult(c config) string {
	version := ""
	if c.CNIVersion != "" {
		version = fmt.Sprintf(`  "cniVersion" : %q,`+"\n", c.CNIVersion)
	}
	return fmt.Sprintf("{\n%s  \"ip4\" : { \"ip\" : %q },\n  \"dns\" : {}\n}\n", version, c.Address)
}

func del(a []string) error {
	nsPath, ifname, err := args(a)
	if err != nil {
		return err
	}
	h, err := handleAt(nsPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(ifname)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return err
	}
	return h.LinkDel(link)
}

// handleAt opens a netlink handle in the netns at path.
func handleAt(path string) (*netlink.Handle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}
