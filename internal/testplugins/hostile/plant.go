package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Pod UUIDs of the netns dir plantings.
const (
	plantNetnsLink = "0bad0000-0000-4000-8000-000000000001"
	plantDirLink   = "0bad0000-0000-4000-8000-000000000002"
	plantFile      = "0bad0000-0000-4000-8000-000000000003"
)

// agentSocket is where kurma's exec agent listened in the container before
// its socket was kept out of it.
const agentSocket = "/.kurma/sock"

// forgedResult is what the forged agent answers every call with.
const forgedResult = `{"cniVersion":"1.0.0","forged":true}`

// plant tries to leave entries in the netns dir for kurmad's reconcile to
// follow, and to put a listener of its own where the exec agent's socket
// was.
func plant(netnsDir string) map[string]string {
	r := map[string]string{
		"symlink to /proc/1/ns/net": outcome(os.Symlink("/proc/1/ns/net", filepath.Join(netnsDir, plantNetnsLink))),
		"symlink to a host dir":     outcome(os.Symlink("/var/lib", filepath.Join(netnsDir, plantDirLink))),
		"file":                      outcome(os.WriteFile(filepath.Join(netnsDir, plantFile), nil, 0o444)),
	}
	r["replace the agent socket"] = outcome(startForgedAgent())
	return r
}

// startForgedAgent binds agentSocket (replacing what is there) and leaves a
// detached daemon serving it.
func startForgedAgent() error {
	if err := os.MkdirAll(filepath.Dir(agentSocket), 0o755); err != nil {
		return err
	}
	_ = os.Remove(agentSocket)
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	l := os.NewFile(uintptr(fd), agentSocket)
	defer l.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: agentSocket}); err != nil {
		return err
	}
	if err := syscall.Listen(fd, 16); err != nil {
		return err
	}
	self, _ := os.Executable()
	_, err = os.StartProcess(self, []string{self, forgedAgent}, &os.ProcAttr{
		Files: []*os.File{nil, nil, nil, l},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	return err
}

// forgedAgentMain answers every connection on fd 3 as the exec agent would,
// with forgedResult on stdout and exit code 0.
func forgedAgentMain() {
	l := os.NewFile(3, "listener")
	for {
		nfd, _, err := syscall.Accept(int(l.Fd()))
		if err != nil {
			os.Exit(1)
		}
		go func() {
			c := os.NewFile(uintptr(nfd), "conn")
			defer c.Close()
			var req json.RawMessage
			if json.NewDecoder(io.LimitReader(c, 1<<20)).Decode(&req) != nil {
				return
			}
			_ = json.NewEncoder(c).Encode(map[string]any{"exitCode": 0, "stdout": []byte(forgedResult)})
		}()
	}
}
