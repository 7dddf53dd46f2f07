package collector

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// readyWaiter waits for a ring buffer's wakeups in the Go runtime's network poller, through a
// non-blocking duplicate of the ring buffer map's file descriptor: no thread sits in a system
// call meanwhile, so the runtime's monitor thread (sysmon) may sleep.
type readyWaiter struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool
}

// newReadyWaiter duplicates fd (a ring buffer map) and registers the copy with the runtime's
// poller; an error when the kernel or the runtime cannot poll it.
func newReadyWaiter(fd int) (*readyWaiter, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate the ring buffer's descriptor: %w", err)
	}
	// O_NONBLOCK is a flag of the open file, shared with fd: the bpf system calls on the map
	// and the reader's epoll do not look at it.
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("make the ring buffer's descriptor non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(dup), "ringbuf")
	// A descriptor the poller took has deadlines; one it refused does not.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("poll the ring buffer: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &readyWaiter{f: f, rc: rc}, nil
}

// wait returns once the ring buffer signals records (or did since the last wait), with
// os.ErrDeadlineExceeded after d without one, or with os.ErrClosed once close was called.
func (w *readyWaiter) wait(d time.Duration) error {
	err := w.f.SetReadDeadline(time.Now().Add(d))
	if err == nil {
		err = w.read()
	}
	if err != nil && w.closed.Load() {
		return os.ErrClosed // the raw connection says so in words of its own
	}
	return err
}

func (w *readyWaiter) read() error {
	waited := false
	return w.rc.Read(func(uintptr) bool {
		// The first call is before any wait: the records were just read, so wait for the next
		// signal; the second follows one.
		done := waited
		waited = true
		return done
	})
}

func (w *readyWaiter) close() {
	w.closed.Store(true)
	w.f.Close()
}
