package tracer

// The process table: the processes traced, each of one executable of the cache (exes.go),
// found by discovery (TracePID) or admitted by the kernel at exec (WatchExecs), until it exits
// or is untraced. Its state (t.procs) is under t.mu with the executable cache.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// process is one traced process.
type process struct {
	exe   *exe
	ready chan struct{} // closed once the collector traces it (or failed: err)
	err   error
	// alive is its stat file, held open for housekeeping to ask whether it has exited (nil if
	// it could not be opened: the path is read each time instead). Closed when it is untraced.
	alive *proc.ExitCheck
}

// exited says whether process pid, traced as p, has exited.
func (p *process) exited(fs proc.FS, pid int) bool {
	if p.alive != nil {
		return p.alive.Exited()
	}
	return fs.Exited(pid)
}

// close releases what p holds once it is out of the table.
func (p *process) close() {
	if p.alive != nil {
		p.alive.Close()
	}
}

// TracePID starts tracing process pid. It inspects the process's executable, attaches its
// plan unless another process of the same executable already did, and adds pid to the
// kernel's filter. It returns the plan. It is safe to call from many goroutines: an
// executable is inspected and attached once, however many of its processes are traced at
// once, and a caller never waits for the inspection of another executable.
func (t *Tracer) TracePID(pid int) (*probes.Plan, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("process %d: not a process ID", pid)
	}
	link := t.proc.ExeLink(pid)
	id, err := t.col.FileID(link)
	if errors.Is(err, os.ErrPermission) {
		// Opening another user's /proc/PID/exe needs the ptrace access check (CAP_SYS_PTRACE),
		// and a file that user alone may read needs CAP_DAC_READ_SEARCH: the same two that
		// symbols.OpenPID names, checked first here.
		return nil, fmt.Errorf("process %d: %w (another user's process: run as root, or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH)", pid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	path := link
	if exe, err := t.proc.Exe(pid); err == nil {
		path = exe
	}
	e, err := t.acquire(id, path, func() (*symbols.Binary, error) { return symbols.Open(link) }, link)
	if err != nil {
		if e != nil {
			return e.plan, fmt.Errorf("process %d: %w", pid, err)
		}
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	defer t.unref(e)
	if err := t.addProcess(pid, e, false); err != nil {
		return e.plan, err
	}
	return e.plan, nil
}

// addProcess traces pid, a process of the attached executable e (the caller holds a reference).
// held: admitted at exec, its spans wait for Options.Admit.
func (t *Tracer) addProcess(pid int, e *exe, held bool) error {
	t.mu.Lock()
	if p := t.procs[pid]; p != nil {
		t.mu.Unlock()
		<-p.ready
		if p.err != nil {
			return p.err
		}
		if p.exe == e {
			if held {
				t.adm.await(pid, true) // found by discovery first: now Admit decides, unless it did
			}
			return nil
		}
		// The PID now runs another executable: the process exec'd.
		t.UntracePID(pid)
		return t.addProcess(pid, e, held)
	}
	if held {
		// Before the process is in the table: a span that finds it there finds it waiting.
		t.adm.await(pid, false)
	}
	p := &process{exe: e, ready: make(chan struct{})}
	p.alive, _ = t.proc.OpenExitCheck(pid) // gone already: Trace fails, or housekeeping sees it
	t.procs[pid] = p
	e.pids[pid] = true
	e.idle = time.Time{}
	e.traced = time.Now()
	t.mu.Unlock()
	err := t.col.Trace(pid, e.att)
	t.mu.Lock()
	gone := false
	if err != nil {
		p.err = err
		if t.procs[pid] == p {
			delete(t.procs, pid)
			delete(e.pids, pid)
			gone = true
		}
	}
	close(p.ready)
	t.mu.Unlock()
	if gone {
		p.close()
		t.adm.unwait(pid)
	}
	return err
}

// UntracePID stops tracing pid; the executable's probes are detached with its last process
// (Options.Grace later, with admission at exec). It
// also removes a process the kernel admitted at exec that was not traced here yet.
func (t *Tracer) UntracePID(pid int) {
	t.mu.Lock()
	p := t.procs[pid]
	if p != nil {
		delete(t.procs, pid)
		delete(p.exe.pids, pid)
	}
	t.mu.Unlock()
	t.adm.forget(pid)
	if p != nil {
		<-p.ready
		p.close()
	}
	t.col.Untrace(pid)
	if p != nil {
		t.releaseIfUnused(p.exe)
	}
}

// WatchExecs reports the PID of every process that calls execve on the host, until ctx ends
// (collector.WatchExecs), for discovery to look at; a 0 says that PIDs were lost meanwhile. With Options.AdmitExecs, it also takes in
// each new process of an attached executable, which the kernel traces from its exec: the
// tracer traces it here too (its load address, its spans' executable) and asks Options.Admit.
func (t *Tracer) WatchExecs(ctx context.Context) (<-chan int, error) {
	execs, err := t.col.WatchExecs(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan int, 256)
	go func() {
		defer close(out)
		lost := false
		for ex := range execs {
			if ex.Admitted {
				t.admit(ex)
			} else {
				t.mu.Lock()
				p := t.procs[ex.PID]
				t.mu.Unlock()
				// A traced process exec'd a program that is not attached; not the process's own
				// exec of the executable it is traced for, read after TracePID found it.
				if p != nil && p.exe.key != ex.Exe {
					t.UntracePID(ex.PID)
				}
			}
			// Never waits on the loop: admission above must not fall behind. A PID that finds
			// the channel full is lost to the loop, which is then told so with a 0 (scan all).
			if lost {
				select {
				case out <- 0:
					lost = false
				default:
				}
			}
			select {
			case out <- ex.PID:
			default:
				lost = true
			}
		}
	}()
	return out, nil
}

// admit takes in a process the kernel admitted at exec.
func (t *Tracer) admit(ex collector.Exec) {
	t.mu.Lock()
	e := t.exes[ex.Exe]
	if e != nil {
		e.users++
	}
	t.mu.Unlock()
	if e == nil {
		t.col.Untrace(ex.PID) // detached meanwhile
		return
	}
	<-e.ready
	if e.err != nil {
		t.unref(e)
		t.col.Untrace(ex.PID)
		return
	}
	err := t.addProcess(ex.PID, e, t.opts.Admit != nil)
	t.unref(e)
	if err != nil {
		t.log.Debug("process admitted at exec is gone", "pid", ex.PID, "err", err)
		t.UntracePID(ex.PID)
		return
	}
	t.log.Debug("traced from exec", "pid", ex.PID, "exe", e.path)
	if t.opts.Admit == nil {
		return
	}
	go func() {
		meta, ok := t.opts.Admit(ex.PID)
		if !ok {
			t.UntracePID(ex.PID) // its held spans go with it: the filter excludes the process
			return
		}
		t.adm.accept(ex.PID, meta)
	}()
}

// PIDs returns the traced processes.
func (t *Tracer) PIDs() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Collect(maps.Keys(t.procs))
}

// processes returns the process table as it is now.
func (t *Tracer) processes() map[int]*process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.procs)
}

// exePath returns the path of process pid's executable, and whether pid is traced.
func (t *Tracer) exePath(pid int) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		return p.exe.path, true
	}
	return "", false
}
