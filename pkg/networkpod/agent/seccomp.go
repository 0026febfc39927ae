package agent

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Seccomp: every process of a plugin container runs under a filter that
// allows every system call but a few that reach past the container, each
// let through only when the container holds the capability that is its
// purpose (the network's allow_capabilities consented and the image asked
// for it):
//
//	open_by_handle_at                        CAP_DAC_READ_SEARCH
//	init_module, finit_module, delete_module CAP_SYS_MODULE
//	kexec_load, kexec_file_load              CAP_SYS_BOOT
//	bpf                                      CAP_BPF
//
// A denied call fails with EPERM. System calls of another ABI (32-bit x86,
// x32) kill the process: the filter checks numbers of the native ABI only.
//
// The agent installs it on itself before serving (every call inherits it)
// and, as `kurma-agent exec`, on the main executable just before executing
// it. It is built here rather than by libcontainer's configs.Seccomp, which
// needs libseccomp and cgo (the agent is static and runs in images without
// a libc).

// gatedSyscall is a system call the filter denies unless cap is held.
type gatedSyscall struct {
	nr  uint32
	cap uintptr // capability number
}

var gatedSyscalls = []gatedSyscall{
	{unix.SYS_OPEN_BY_HANDLE_AT, unix.CAP_DAC_READ_SEARCH},
	{unix.SYS_INIT_MODULE, unix.CAP_SYS_MODULE},
	{unix.SYS_FINIT_MODULE, unix.CAP_SYS_MODULE},
	{unix.SYS_DELETE_MODULE, unix.CAP_SYS_MODULE},
	{unix.SYS_KEXEC_LOAD, unix.CAP_SYS_BOOT},
	{unix.SYS_KEXEC_FILE_LOAD, unix.CAP_SYS_BOOT},
	{unix.SYS_BPF, unix.CAP_BPF},
}

// nativeArch is the seccomp audit architecture of this build.
var nativeArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}

// x32Bit marks x32 system call numbers on amd64.
const x32Bit = 0x40000000

// InstallSeccomp installs the filter on every thread of the calling process,
// denying the gated system calls whose capability the process does not hold
// in its effective set.
func InstallSeccomp() error {
	arch, ok := nativeArch[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
	}
	held, err := effectiveCaps()
	if err != nil {
		return err
	}
	var deny []uint32
	for _, g := range gatedSyscalls {
		if held&(1<<g.cap) == 0 {
			deny = append(deny, g.nr)
		}
	}
	prog := seccompProgram(arch, deny)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// No PR_SET_NO_NEW_PRIVS: CAP_SYS_ADMIN (always held in a plugin
	// container) allows installing a filter without it, and setting it would
	// change what executing a setuid or file-capability binary does.
	// SPEC_ALLOW: the filter is not a sandbox for untrusted code in the
	// process, so it must not switch on the speculative store bypass
	// mitigation that kernels tie to seccomp by default (it slows every
	// plugin process).
	const flags = unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("seccomp: install filter: %w", e)
	}
	return nil
}

// seccompProgram is the classic BPF filter: other ABIs killed, deny answered
// EPERM, everything else allowed.
func seccompProgram(arch uint32, deny []uint32) []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
	}
	const (
		offNr   = 0 // struct seccomp_data
		offArch = 4
		ld      = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ret     = unix.BPF_RET | unix.BPF_K
	)
	killProcess := stmt(ret, unix.SECCOMP_RET_KILL_PROCESS)
	p := []unix.SockFilter{
		stmt(ld, offArch),
		jeq(arch, 1, 0),
		killProcess,
		stmt(ld, offNr),
	}
	if arch == unix.AUDIT_ARCH_X86_64 {
		p = append(p,
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 0, Jf: 1, K: x32Bit},
			killProcess)
	}
	for _, nr := range deny {
		p = append(p, jeq(nr, 0, 1), stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM)))
	}
	return append(p, stmt(ret, unix.SECCOMP_RET_ALLOW))
}

// effectiveCaps is the calling thread's effective capability set as a bit
// mask.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("seccomp: capget: %w", err)
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}
