package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// DefaultProcRoot is where the kernel's process file system is mounted. With hostPID the
// agent's container sees the host's processes there.
const DefaultProcRoot = "/proc"

// FileID identifies a file on its host: device and inode. Two processes with the same
// executable FileID run the same binary, whatever path each sees it under.
type FileID struct {
	// Dev is the device the file is on (st_dev).
	Dev uint64
	// Ino is the file's inode number on that device (st_ino).
	Ino uint64
}

// Process is one process found in /proc.
type Process struct {
	// PID is the process ID as the proc root shows it (the host's PID namespace with hostPID).
	PID int
	// StartTime is when the process started, in clock ticks after boot (field 22 of
	// /proc/PID/stat). PID and StartTime together name one process for its whole life, even
	// once the PID is reused.
	StartTime uint64
	// Comm is the kernel's short name of the process (at most 15 bytes).
	Comm string
	// Exe is the path of the executable as the process sees it, in its own mount namespace
	// (the target of /proc/PID/exe, without the kernel's " (deleted)" suffix). To open the
	// binary from the agent, use ExeLink: Exe may not exist in the agent's mount namespace.
	Exe string
	// ExeLink is <proc root>/PID/exe: it opens the executable from any mount namespace for as
	// long as the process lives.
	ExeLink string
	// ExeID is the executable's device and inode.
	ExeID FileID
	// Container is what the cgroup file says about the process's container; zero for a
	// process that runs in no container (or one whose cgroup path names none).
	Container Container
}

// Scan lists the processes under procRoot (usually [DefaultProcRoot]) that run an
// executable. Kernel threads, zombies, processes that exit during the scan and processes whose
// executable the caller may not read (see [ReadProcess]) are left out. The result is sorted by
// PID. Scan fails only when procRoot itself cannot be read.
func Scan(procRoot string) ([]Process, error) {
	procs, _, err := scan(procRoot)
	return procs, err
}

// scan is Scan that also counts the processes left out because access was denied.
func scan(procRoot string) (procs []Process, denied int, err error) {
	pids, err := listPIDs(procRoot)
	if err != nil {
		return nil, 0, err
	}
	for _, pid := range pids {
		p, err := ReadProcess(procRoot, pid)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				denied++
			}
			continue
		}
		procs = append(procs, p)
	}
	return procs, denied, nil
}

// listPIDs returns the numeric entries of procRoot, sorted.
func listPIDs(procRoot string) ([]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("read process list: %w (is %s a mounted proc file system?)", err, procRoot)
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

// ReadProcess reads what [Process] holds for process pid under procRoot. It fails with an error
// matching [fs.ErrNotExist] when the process is gone, is a zombie or is a kernel thread (none
// of which has an executable), and with one matching [fs.ErrPermission] when the caller may
// not read the process's executable link: that takes root, or CAP_SYS_PTRACE for processes of
// other users. An unreadable or unknown cgroup file is not an error: Container stays zero.
func ReadProcess(procRoot string, pid int) (Process, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	comm, start, err := readStat(dir)
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	link := filepath.Join(dir, "exe")
	exe, err := os.Readlink(link)
	if err != nil {
		return Process{}, fmt.Errorf("process %d: read executable link: %w", pid, err)
	}
	id, err := statID(link)
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	p := Process{
		PID:       pid,
		StartTime: start,
		Comm:      comm,
		Exe:       strings.TrimSuffix(exe, " (deleted)"),
		ExeLink:   link,
		ExeID:     id,
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		p.Container, _ = ParseCgroup(b)
	}
	return p, nil
}

// identity is what tells one process from another under the same PID, and an exec from the
// program before it: start time and executable.
type identity struct {
	start uint64
	exe   FileID
}

// readIdentity reads only what identity needs: cheaper than ReadProcess for known PIDs.
func readIdentity(procRoot string, pid int) (identity, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	_, start, err := readStat(dir)
	if err != nil {
		return identity{}, err
	}
	id, err := statID(filepath.Join(dir, "exe"))
	if err != nil {
		return identity{}, err
	}
	return identity{start: start, exe: id}, nil
}

// statID returns the device and inode of the file name (following links).
func statID(name string) (FileID, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return FileID{}, fmt.Errorf("stat executable: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}, fmt.Errorf("stat executable: no device and inode on this platform")
	}
	return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, nil
}

// readStat returns comm and start time from dir/stat.
func readStat(dir string) (comm string, start uint64, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return "", 0, fmt.Errorf("read stat: %w", err)
	}
	comm, start, ok := parseStat(b)
	if !ok {
		return "", 0, fmt.Errorf("parse stat: unexpected format %q", truncate(b, 80))
	}
	return comm, start, nil
}

// parseStat returns comm (field 2) and starttime (field 22) of a /proc/PID/stat line. comm is
// in parentheses and may itself hold spaces and parentheses: it ends at the last ')'.
func parseStat(b []byte) (comm string, start uint64, ok bool) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	comm = string(b[open+1 : end])
	rest := strings.Fields(string(b[end+1:]))
	// rest[0] is field 3 (state), so field 22 is rest[19].
	if len(rest) < 20 {
		return "", 0, false
	}
	start, err := strconv.ParseUint(rest[19], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return comm, start, true
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
