package discovery

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/reconscope/reconscope/pkg/discovery/cgroup"
	"github.com/reconscope/reconscope/pkg/proc"
)

// DefaultProcRoot is where the kernel's process file system is mounted ([proc.DefaultRoot]).
// With hostPID the agent's container sees the host's processes there.
const DefaultProcRoot = proc.DefaultRoot

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
	// binary from the agent, use the proc root's [proc.FS.ExeLink]: Exe may not exist in the
	// agent's mount namespace.
	Exe string
	// ExeID is the executable's device and inode, as stat reports them.
	ExeID proc.StatFileID
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
	pids, err := proc.New(procRoot).PIDs()
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

// ReadProcess reads what [Process] holds for process pid under procRoot. It fails with an error
// matching [fs.ErrNotExist] when the process is gone, is a zombie or is a kernel thread (none
// of which has an executable), and with one matching [fs.ErrPermission] when the caller may
// not read the process's executable link: that takes root, or CAP_SYS_PTRACE for processes of
// other users. An unreadable or unknown cgroup file is not an error: Container stays zero.
func ReadProcess(procRoot string, pid int) (Process, error) {
	pfs := proc.New(procRoot)
	st, err := pfs.Stat(pid)
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	exe, err := pfs.Exe(pid)
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	id, err := proc.StatFile(pfs.ExeLink(pid))
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	p := Process{PID: pid, StartTime: st.StartTime, Comm: st.Comm, Exe: exe, ExeID: id}
	if b, err := pfs.ReadFile(pid, "cgroup"); err == nil {
		p.Container, _ = cgroup.Parse(b)
	}
	return p, nil
}

// identity is what tells one process from another under the same PID, and an exec from the
// program before it: start time and executable.
type identity struct {
	start uint64
	exe   proc.StatFileID
}

// readIdentity reads only what identity needs: cheaper than ReadProcess for known PIDs.
func readIdentity(procRoot string, pid int) (identity, error) {
	pfs := proc.New(procRoot)
	st, err := pfs.Stat(pid)
	if err != nil {
		return identity{}, err
	}
	id, err := proc.StatFile(pfs.ExeLink(pid))
	if err != nil {
		return identity{}, err
	}
	return identity{start: st.StartTime, exe: id}, nil
}
