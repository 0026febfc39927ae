package api

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Listener is the API's unix socket listener. It accepts only root peers:
// a connection whose SO_PEERCRED uid is not 0 gets a 403 JSON response and
// is closed without reaching the handler.
type Listener struct {
	*net.UnixListener
	path string
	fi   os.FileInfo // the socket we bound, so Close never removes another one
	log  logrus.FieldLogger
}

// ListenOptions configure Listen.
type ListenOptions struct {
	// Logger receives refused peers; nil → the logrus standard logger.
	Logger logrus.FieldLogger
}

// Listen creates the API socket at path, mode 0600, root-only. The parent
// directory is created 0700 when missing. A stale socket file (a socket
// nobody answers on) is replaced; anything else at path is an ErrNotSocket
// error, and a socket another process still serves an ErrSocketServed one.
//
// The socket is bound in a fresh 0700 directory beside path, made 0600 and
// only then renamed into place, so no other user can ever connect to it,
// without touching the process-wide umask.
func Listen(path string, opts ListenOptions) (*Listener, error) {
	path = filepath.Clean(path)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	if err := RemoveStaleSocket(path); err != nil {
		if errors.Is(err, ErrSocketServed) {
			return nil, fmt.Errorf("api socket %s: %w (is kurmad already running?)", path, err)
		}
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	tmp, err := os.MkdirTemp(dir, ".kurmad-sock-")
	if err != nil {
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	tmpSock := filepath.Join(tmp, "s")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmpSock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("api socket %s: listen: %w", path, err)
	}
	ul.SetUnlinkOnClose(false)
	fail := func(err error) (*Listener, error) {
		ul.Close()
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	if err := os.Chmod(tmpSock, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmpSock, path); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	log := opts.Logger
	if log == nil {
		log = logrus.StandardLogger()
	}
	return &Listener{UnixListener: ul, path: path, fi: fi, log: log}, nil
}

// Accept returns the next connection from a root peer.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		uid, pid, err := peerCred(c)
		if err != nil {
			l.log.WithError(err).Warn("api: cannot read peer credentials; closing connection")
			c.Close()
			continue
		}
		if uid != 0 {
			l.log.WithFields(logrus.Fields{"uid": uid, "pid": pid}).Warn("api: refused non-root peer")
			go refuse(c)
			continue
		}
		return c, nil
	}
}

// Close stops listening and removes the socket file if it is still ours.
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.fi) {
		os.Remove(l.path)
	}
	return err
}

func peerCred(c *net.UnixConn) (uid uint32, pid int32, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if credErr != nil {
		return 0, 0, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return cred.Uid, cred.Pid, nil
}

// refuse answers one request with 403 so that a non-root client gets a
// clear error rather than a reset connection.
func refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(req.Body, MaxBodySize))
	}
	body := `{"error":"permission denied: the kurmad API is root-only","code":"forbidden"}` + "\n"
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// ErrSocketServed is returned (wrapped) by RemoveStaleSocket, and so by
// Listen, when another process answers on the socket: most often a second
// kurmad.
var ErrSocketServed = errors.New("another process is serving it")

// ErrNotSocket is returned (wrapped) by RemoveStaleSocket, and so by Listen,
// when something other than a socket is at the path; it is never removed.
var ErrNotSocket = errors.New("exists and is not a socket")

// RemoveStaleSocket removes path if it is a socket nobody listens on (one a
// process that died left behind), so that a listener can be bound there.
// A missing path is fine. Anything else at path is an ErrNotSocket error, a
// socket a process still serves an ErrSocketServed error; the errors do not
// name path, for the caller to say whose socket it is.
func RemoveStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w (%s); refusing to remove it", ErrNotSocket, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return ErrSocketServed
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("checking for a process serving it: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale socket: %w", err)
	}
	return nil
}

// newStdLogger routes net/http's own messages (e.g. TLS or header errors)
// to the logger at debug level.
func newStdLogger(l logrus.FieldLogger) *log.Logger {
	return log.New(logWriter{l}, "", 0)
}

type logWriter struct{ l logrus.FieldLogger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Debug("api http: " + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
