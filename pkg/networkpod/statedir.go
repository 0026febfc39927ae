package networkpod

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/gendef"
)

// A network's state dir (its containers' /var/lib/cni) is a filesystem of
// its own: an ext4 image, <StateDir>/networks/<network>.ext4, loop-mounted
// at <StateDir>/networks/<network> while a generation of the network runs.
// A plugin that fills it fills its own filesystem, never the one holding
// kurmad's journal and image store; one that freezes or shuts it down (the
// seccomp filter refuses the ioctls, but should one pass) stops its own
// network only. Why this mechanism: a size limit on a directory needs
// project quotas, which need a filesystem mounted with them (the state dir's
// usually is not, and remounting the host's filesystem is not kurmad's to
// do); tmpfs would lose the leases at every restart; a loop device and
// mkfs.ext4 (e2fsprogs) are on every Linux host kurma runs on. With
// limits.state_dir 0 the state dir stays a plain directory, as before.

// stateFS is the state dirs' mounts, shared by a network's generations.
// Each network's dir has a lock of its own: one network's mkfs.ext4 or
// loop mount never waits for another's (20 networks starting at once
// would otherwise queue behind one another).
type stateFS struct {
	mu   sync.Mutex
	nets map[string]*stateDirRefs
}

// stateDirRefs is one network's state dir mount.
type stateDirRefs struct {
	mu   sync.Mutex
	refs int // generations using its mount
}

// entry is network's stateDirRefs, made on first use.
func (s *stateFS) entry(network string) *stateDirRefs {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nets == nil {
		s.nets = map[string]*stateDirRefs{}
	}
	e := s.nets[network]
	if e == nil {
		e = &stateDirRefs{}
		s.nets[network] = e
	}
	return e
}

// stateImage is where network's state dir filesystem lives.
func (h *Host) stateImage(network string) string {
	return filepath.Join(h.opts.StateDir, "networks", network+".ext4")
}

// Prepare makes what a container of spec's network needs and its image
// does not, ahead of its start: kurma-init running, and the network's
// state dir filesystem when it has none yet. pkg/networks calls it while
// the network's image is fetched, so that on a cold boot these run beside
// the image's import rather than after it. The filesystem, once made, is
// kept for every later start; a start makes what nothing prepared.
func (h *Host) Prepare(spec Spec) error {
	if err := h.starter.ensure(); err != nil {
		return err
	}
	return h.prepareStateDir(spec)
}

func (h *Host) prepareStateDir(spec Spec) error {
	limits := effectiveLimits(spec.Limits)
	dir := h.pluginStateHostDir(spec.Network)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if limits.StateDir == gendef.NoLimit {
		return nil
	}
	e := h.state.entry(spec.Network)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refs > 0 {
		return nil
	}
	if err := h.makeStateDirImage(spec.Network, limits.StateDir); err != nil {
		return fmt.Errorf("state dir %s (limits.state_dir; 0 keeps it a plain directory): %w", dir, err)
	}
	return nil
}

// acquireStateDir makes sure the network's state dir is ready for one more
// generation: its filesystem made (and an earlier plain dir's content moved
// into it) and mounted, unless the network lifted the limit.
func (h *Host) acquireStateDir(network string, limits gendef.Limits) error {
	dir := h.pluginStateHostDir(network)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if limits.StateDir == gendef.NoLimit {
		return nil
	}
	e := h.state.entry(network)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refs == 0 {
		if err := h.mountStateDir(network, limits.StateDir); err != nil {
			return fmt.Errorf("state dir %s (limits.state_dir; 0 keeps it a plain directory): %w", dir, err)
		}
	}
	e.refs++
	return nil
}

// releaseStateDir is a generation done with its network's state dir: the
// last one unmounts it.
func (h *Host) releaseStateDir(network string) error {
	e := h.state.entry(network)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refs == 0 {
		return nil
	}
	e.refs--
	if e.refs > 0 {
		return nil
	}
	return unmountUnder(h.pluginStateHostDir(network))
}

// releaseStateDirs unmounts every state dir still mounted (Stop).
func (h *Host) releaseStateDirs() error {
	h.state.mu.Lock()
	nets := maps.Clone(h.state.nets)
	h.state.mu.Unlock()
	var errs []error
	for network, e := range nets {
		e.mu.Lock()
		if e.refs > 0 {
			e.refs = 0
			errs = append(errs, unmountUnder(h.pluginStateHostDir(network)))
		}
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}

// makeStateDirImage makes network's state dir filesystem when it has none
// yet, moving into it what an earlier kurma left in the plain dir.
func (h *Host) makeStateDirImage(network string, size int64) error {
	img := h.stateImage(network)
	if _, err := os.Stat(img); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := makeStateImage(img, size); err != nil {
		return err
	}
	if err := h.moveIntoImage(h.pluginStateHostDir(network), img); err != nil {
		os.Remove(img)
		return err
	}
	return nil
}

// mountStateDir mounts the network's state dir filesystem, making it first
// when it does not exist yet. A mount left by a kurmad that was killed is
// used as it is.
//
// A network's containers that outlived the kurmad that mounted it (a
// restart, an upgrade) may hold that mount while kurmad's mount namespace
// no longer shows it (kurmad in a container of its own, restarted): its
// loop device is mounted again, the same filesystem, never a second loop
// device on the same image (two mounts of one ext4 image through two
// devices would corrupt it).
func (h *Host) mountStateDir(network string, size int64) error {
	dir, img := h.pluginStateHostDir(network), h.stateImage(network)
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return err
	}
	if dev, err := loopDeviceOf(img); err != nil {
		return err
	} else if dev != "" {
		if err := unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err == nil {
			return nil
		} else if !errors.Is(err, unix.ENXIO) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("mount %s (%s, held by a running container) on %s: %w", dev, img, dir, err)
		}
		// Cleared meanwhile: its last mount went.
	}
	if err := h.makeStateDirImage(network, size); err != nil {
		return err
	}
	return loopMount(img, dir)
}

// makeStateImage writes a sparse ext4 image of size bytes at img: no
// journal (its content is a few small files, rewritten whole), no blocks
// reserved for root (plugins are root), an inode per 2 KiB (host-local
// keeps a file per address).
func makeStateImage(img string, size int64) error {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return fmt.Errorf("mkfs.ext4 (e2fsprogs) is needed to make it: %w", err)
	}
	tmp := img + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var out []byte
		out, err = exec.Command(mkfs, "-q", "-F", "-O", "^has_journal", "-m", "0", "-i", "2048",
			"-E", "lazy_itable_init=0,nodiscard", "-L", "kurma-state", tmp).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("mkfs.ext4: %w: %s", err, out)
		}
	}
	if err == nil {
		err = os.Rename(tmp, img)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// moveIntoImage moves what an earlier kurma left in the plain state dir
// (leases, libcni's cache) into the new filesystem at img.
func (h *Host) moveIntoImage(dir, img string) error {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return err
	}
	tmp, err := os.MkdirTemp(h.opts.RunDir, "state-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := loopMount(img, tmp); err != nil {
		return err
	}
	err = copyTree(dir, tmp)
	if uerr := unix.Unmount(tmp, 0); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("moving the state dir's content into its filesystem: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the directories, regular files and symlinks under src
// into dst, with their modes.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case rel == ".":
			return nil
		case d.IsDir():
			return os.Mkdir(to, fi.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			return copyFile(p, to, fi.Mode().Perm())
		}
		return nil // sockets, FIFOs: nothing a plugin can need after a restart
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// isMountPoint tells whether dir is a mount point.
func isMountPoint(dir string) (bool, error) {
	// mountinfo.Mounted asks openat2 (RESOLVE_NO_XDEV) first: reading the
	// whole mount table for each network was 6% of a boot's CPU.
	mounted, err := mountinfo.Mounted(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return mounted, err
}

// The loop device interface (linux/loop.h).
const (
	loopCtlGetFree   = 0x4C82
	loopConfigure    = 0x4C0A
	loopGetStatus64  = 0x4C05
	loFlagsAutoclear = 4
)

// loopDeviceOf is the loop device whose backing file is img (its device
// and inode), "" when none is.
func loopDeviceOf(img string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", err
	}
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		return "", nil // no sysfs: nothing to find
	}
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "loop")
		if !ok {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/block", e.Name(), "loop")); err != nil {
			continue // not bound to a file
		}
		num, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		dev := "/dev/" + e.Name()
		f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, os.ErrNotExist) {
			// A /dev that is a copy (kurmad in a container) lacks the
			// devices made after it.
			_ = unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(num))))
			f, err = os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			continue
		}
		var info loopInfo64
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), loopGetStatus64, uintptr(unsafe.Pointer(&info)))
		f.Close()
		if errno == 0 && info.Device == st.Dev && info.Inode == st.Ino {
			return dev, nil
		}
	}
	return "", nil
}

type loopInfo64 struct {
	Device, Inode, Rdevice, Offset, SizeLimit  uint64
	Number, EncryptType, EncryptKeySize, Flags uint32
	FileName, CryptName                        [64]byte
	EncryptKey                                 [32]byte
	Init                                       [2]uint64
}

type loopConfig struct {
	Fd, BlockSize uint32
	Info          loopInfo64
	Reserved      [8]uint64
}

// loopMount mounts the ext4 image img at dir through a free loop device,
// which the kernel frees once it is unmounted (autoclear).
func loopMount(img, dir string) error {
	backing, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer backing.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	// Networks starting together race for the same free device: each
	// round one of them wins it.
	for range 64 {
		n, _, e := unix.Syscall(unix.SYS_IOCTL, ctl.Fd(), loopCtlGetFree, 0)
		if e != 0 {
			return fmt.Errorf("loop devices: LOOP_CTL_GET_FREE: %w", e)
		}
		dev := "/dev/loop" + strconv.Itoa(int(n))
		loop, err := openLoop(dev, int(n))
		if err != nil {
			return err
		}
		cfg := loopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = loFlagsAutoclear
		copy(cfg.Info.FileName[:], img)
		_, _, e = unix.Syscall(unix.SYS_IOCTL, loop.Fd(), loopConfigure, uintptr(unsafe.Pointer(&cfg)))
		if e == unix.EBUSY {
			loop.Close() // taken meanwhile by someone else
			continue
		}
		if e != 0 {
			loop.Close()
			return fmt.Errorf("%s: LOOP_CONFIGURE: %w", dev, e)
		}
		err = unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "")
		// Once mounted (or not), the device needs no descriptor: autoclear
		// frees it with the last unmount, or now.
		loop.Close()
		if err != nil {
			return fmt.Errorf("mount %s (%s) on %s: %w", dev, img, dir, err)
		}
		return nil
	}
	return errors.New("loop devices: every free one was taken before it could be used")
}

// openLoop opens loop device n, waiting a moment for devtmpfs to show a
// new one, and making its node where /dev is not devtmpfs (kurmad in a
// privileged container, whose /dev is a copy).
func openLoop(dev string, n int) (*os.File, error) {
	var err error
	for i := range 20 {
		var f *os.File
		if f, err = os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("loop devices: %w", err)
		}
		if i == 10 {
			if merr := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); merr != nil && !errors.Is(merr, unix.EEXIST) {
				return nil, fmt.Errorf("loop devices: %s: %w", dev, merr)
			}
		}
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
	return nil, fmt.Errorf("loop devices: %w", err)
}
