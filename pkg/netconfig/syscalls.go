package netconfig

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// deniedSyscalls are the system calls the plugin containers' seccomp filter
// refuses, by the names allow_syscalls takes: the filter's own list
// (networkpod/agent.DeniedSyscalls, whose test keeps the two equal).
// clone, unshare and clone3 stand for their new-user-namespace rule, ioctl
// and socket for the ioctl requests and netlink families beyond the
// filter's allowlists.
var deniedSyscalls = []string{
	"mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"open_tree_attr", "mount_setattr", "pivot_root", "sethostname", "setdomainname", "keyctl",
	"add_key", "request_key", "perf_event_open", "syslog", "swapon", "swapoff", "userfaultfd",
	"acct", "quotactl", "quotactl_fd", "fanotify_init", "lookup_dcookie", "io_uring_setup",
	"io_uring_enter", "io_uring_register", "open_by_handle_at", "init_module", "finit_module",
	"delete_module", "kexec_load", "kexec_file_load", "reboot", "bpf", "clone", "unshare", "clone3",
	"ioctl", "socket",
}

// DeniedSyscalls returns the names allow_syscalls accepts.
func DeniedSyscalls() []string { return slices.Clone(deniedSyscalls) }

// parseAllowSyscalls reads a network's allow_syscalls: system calls the
// plugin containers' seccomp filter denies that the operator consents to
// let the network's plugin make.
func parseAllowSyscalls(ps *problems, path string, raw json.RawMessage) []string {
	const want = `a list of system call names such as ["keyctl", "perf_event_open"]`
	return decodeNames(ps, path, raw, want, deniedSyscalls, func(name string) string {
		msg := fmt.Sprintf("%q is not a system call the plugin containers' filter denies (every other one is allowed already)", name)
		if s := suggest(strings.ToLower(name), deniedSyscalls); s != "" {
			return msg + fmt.Sprintf("; did you mean %q?", s)
		}
		return msg + "; the denied ones are " + strings.Join(deniedSyscalls, ", ")
	})
}
