// Package proc reads the kernel's process file system for the agent, under a root that need not
// be /proc: a DaemonSet pod without hostPID mounts the host's /proc elsewhere (run --proc-root),
// and its own /proc then shows only its own PID namespace. Every read of another process's
// files (its executable, stat, memory maps, memory) goes through an FS, so none can bypass the
// root. It also holds the two types that name an executable file by device and inode (StatFileID,
// KernelFileID).
package proc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/procfs"
)

// DefaultRoot is where the kernel's process file system is mounted. With hostPID the agent's
// container sees the host's processes there.
const DefaultRoot = "/proc"

// FS is a process file system mounted at a root.
type FS struct{ root string }

// New returns the process file system mounted at root; empty means DefaultRoot.
func New(root string) FS {
	if root == "" {
		root = DefaultRoot
	}
	return FS{root: root}
}

// Root is where the file system is mounted.
func (fs FS) Root() string { return fs.root }

// Path is the path of file name of process pid: <root>/PID/name.
func (fs FS) Path(pid int, name string) string {
	return filepath.Join(fs.root, strconv.Itoa(pid), name)
}

// ExeLink is <root>/PID/exe: it opens the process's executable from any mount namespace for as
// long as the process lives. Opening it needs the ptrace access check (root, or CAP_SYS_PTRACE
// for other users' processes).
func (fs FS) ExeLink(pid int) string { return fs.Path(pid, "exe") }

// Exe returns the path of process pid's executable as the process sees it, in its own mount
// namespace, without the kernel's " (deleted)" suffix. It may not exist in the caller's mount
// namespace: open ExeLink instead.
func (fs FS) Exe(pid int) (string, error) {
	s, err := os.Readlink(fs.ExeLink(pid))
	if err != nil {
		return "", fmt.Errorf("read executable link: %w", err)
	}
	return strings.TrimSuffix(s, " (deleted)"), nil
}

// ReadFile reads file name of process pid.
func (fs FS) ReadFile(pid int, name string) ([]byte, error) {
	return os.ReadFile(fs.Path(pid, name))
}

// OpenMem opens process pid's memory for reading (the ptrace access check applies).
func (fs FS) OpenMem(pid int) (*os.File, error) { return os.Open(fs.Path(pid, "mem")) }

// PIDs lists the processes under the root, sorted.
func (fs FS) PIDs() ([]int, error) {
	entries, err := os.ReadDir(fs.root)
	if err != nil {
		return nil, fmt.Errorf("read process list: %w (is %s a mounted proc file system?)", err, fs.root)
	}
	pids := make([]int, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids, nil
}

// Stat is what the agent reads of /proc/PID/stat.
type Stat struct {
	Comm  string // the kernel's short name of the process (field 2)
	State byte   // R, S, D, Z, X... (field 3)
	// StartTime is when the process started, in clock ticks after boot (field 22). PID and
	// StartTime together name one process for its whole life, even once the PID is reused.
	StartTime uint64
}

// Stat reads process pid's stat file.
func (fs FS) Stat(pid int) (Stat, error) {
	b, err := fs.ReadFile(pid, "stat")
	if err != nil {
		return Stat{}, fmt.Errorf("read stat: %w", err)
	}
	st, ok := ParseStat(b)
	if !ok {
		return Stat{}, fmt.Errorf("parse stat: unexpected format %q", truncate(b, 80))
	}
	return st, nil
}

// Exited says whether process pid is gone or a zombie. The answer comes from the root: the
// caller may run in another PID namespace, where signals cannot reach the process.
func (fs FS) Exited(pid int) bool {
	st, err := fs.Stat(pid)
	return err != nil || exitedState(st.State)
}

// exitedState says whether a stat line's state (field 3) is that of a process that has exited:
// a zombie (Z) or dead (X).
func exitedState(state byte) bool { return state == 'Z' || state == 'X' }

// ExitCheck is a process's stat file held open, to ask again and again whether that process has
// exited (the tracer's housekeeping, twice a second for every traced process): one read each
// time, not the open, size, reads and close of a new one, and nothing allocated. It names the
// process it was opened for, not its PID: once that process is reaped the file reads as exited,
// even if the PID has been given to another process since.
type ExitCheck struct {
	mu  sync.Mutex
	f   *os.File // nil once closed
	buf [256]byte
}

// OpenExitCheck opens process pid's stat file, held open until Close.
func (fs FS) OpenExitCheck(pid int) (*ExitCheck, error) {
	f, err := os.Open(fs.Path(pid, "stat"))
	if err != nil {
		return nil, fmt.Errorf("open stat: %w", err)
	}
	return &ExitCheck{f: f}, nil
}

// Exited says whether the process is gone or a zombie, as FS.Exited does. A closed ExitCheck
// says false: whoever closed it no longer asks about that process.
func (s *ExitCheck) Exited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return false
	}
	// The state (field 3) follows comm, which ends at the line's last ')': within the first
	// 256 bytes, since the PID has at most 10 digits and comm at most 64 bytes; after it come
	// only numbers.
	n, err := s.f.ReadAt(s.buf[:], 0)
	if n == 0 && err != nil {
		return true // ESRCH: the process was reaped
	}
	b := s.buf[:n]
	end := bytes.LastIndexByte(b, ')')
	if end < 0 || end+2 >= len(b) {
		return true
	}
	return exitedState(b[end+2])
}

// Close closes the file.
func (s *ExitCheck) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// ParseStat reads comm (field 2), the state (field 3) and starttime (field 22) of a
// /proc/PID/stat line. comm is in parentheses and may itself hold spaces and parentheses: it
// ends at the last ')'.
func ParseStat(b []byte) (Stat, bool) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, false
	}
	rest := strings.Fields(string(b[end+1:]))
	// rest[0] is field 3 (state), so field 22 is rest[19].
	if len(rest) < 20 || len(rest[0]) != 1 {
		return Stat{}, false
	}
	start, err := strconv.ParseUint(rest[19], 10, 64)
	if err != nil {
		return Stat{}, false
	}
	return Stat{Comm: string(b[open+1 : end]), State: rest[0][0], StartTime: start}, true
}

// Maps reads process pid's memory mappings (/proc/PID/maps).
func (fs FS) Maps(pid int) ([]*procfs.ProcMap, error) {
	pfs, err := procfs.NewFS(fs.root)
	if err != nil {
		return nil, err
	}
	p, err := pfs.Proc(pid)
	if err != nil {
		return nil, err
	}
	maps, err := p.ProcMaps()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", fs.Path(pid, "maps"), err)
	}
	return maps, nil
}

// A file is named by the device it is on and its inode number: every process running one
// executable, whatever path each sees it under, has the same name. Which device depends on who
// tells, so there are two types, and the compiler keeps them apart:
//
//   - StatFileID: what stat reports, an overlay mount's own device (one per container): what
//     discovery and `trace --exe` see from /proc and the file system (StatFile).
//   - KernelFileID: the device of the layer the file is mapped from, as the kernel's exec hook
//     and uprobes see it (collector.Collector.FileID), shared by every container of one image:
//     what the tracer's executable table and the kernel's records are keyed by.

// StatFileID names a file as stat does: device (st_dev, the C library's encoding) and inode.
type StatFileID struct {
	Dev uint64 // st_dev
	Ino uint64 // the inode number on that device
}

// KernelFileID names a file as the kernel's exec hook and uprobes do: the device of the file
// in the layer it is mapped from (the kernel's dev_t encoding) and its inode.
type KernelFileID struct {
	Dev uint64 // the kernel's dev_t of the file's super block
	Ino uint64 // the inode number on that device
}

// StatFile returns the device and inode of the file name as stat reports them, following links.
func StatFile(name string) (StatFileID, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return StatFileID{}, fmt.Errorf("stat executable: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return StatFileID{}, fmt.Errorf("stat executable: no device and inode on this platform")
	}
	return StatFileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
