// Package testproc starts the programs a test runs (fixtures, agents, a control plane's
// processes) and makes sure none outlives it: each in its own process group, killed by the
// kernel if the test binary dies, stopped at the test's end, its output kept in files and shown
// when the test fails; an interrupt or the -timeout deadline stops them all. It is the one
// process starter of the project's tests: test/testenv builds the Kubernetes test bed on it, and
// tests that need no Kubernetes (test/reliability) use it without that weight.
package testproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
)

// stopGrace is how long a process gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// logTailLines is how many lines of a process's stderr a failed test shows.
const logTailLines = 40

// Process is a program a test started with Start: its own process group, stdout and
// stderr in files, stopped at the end of the test.
type Process struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr string
	done           chan struct{}
	err            error // the result of cmd.Wait, set before done is closed
	stopOnce       sync.Once
	stopper        *Stopper
}

// Start starts cmd as name (used in messages and log file names). The process gets its own
// process group and is killed (SIGKILL) by the kernel if the test binary dies; its stdout and
// stderr go to files in t.TempDir (as well as to cmd.Stdout/cmd.Stderr when those are set; an
// *os.File set there is the process's own instead, see teeTo). At cleanup it is stopped (Stop)
// if still running, its process group must be empty, and when the test failed the tail of its
// stderr is logged.
func Start(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	InstallSignalHandler()
	dir := t.TempDir()
	p := &Process{
		name:   name,
		cmd:    cmd,
		stdout: filepath.Join(dir, name+".stdout"),
		stderr: filepath.Join(dir, name+".stderr"),
		done:   make(chan struct{}),
	}
	outFile, err := os.Create(p.stdout)
	if err != nil {
		t.Fatalf("testproc: create stdout file of %s: %v", name, err)
	}
	errFile, err := os.Create(p.stderr)
	if err != nil {
		outFile.Close()
		t.Fatalf("testproc: create stderr file of %s: %v", name, err)
	}
	cmd.Stdout = teeTo(outFile, cmd.Stdout)
	cmd.Stderr = teeTo(errFile, cmd.Stderr)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := spawn(cmd); err != nil {
		outFile.Close()
		errFile.Close()
		t.Fatalf("testproc: start %s: %v", name, err)
	}
	pid := cmd.Process.Pid
	Track(t, name, pid)
	p.stopper = AddStopper(name, func() { _ = p.Stop() })
	go func() {
		p.err = cmd.Wait()
		outFile.Close()
		errFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			_ = p.Stop() // forgets the stopper
		default:
			if err := p.Stop(); err != nil && !KilledBy(err, syscall.SIGTERM) {
				t.Logf("testproc: %s stopped at cleanup: %v", name, err)
			}
		}
		checkGroupEmpty(t, name, pid)
		if t.Failed() {
			LogTail(t, name+" stderr", p.stderr)
		}
	})
	return p
}

// killedBy tells whether err, from Wait, says the process died of sig.
func KilledBy(err error, sig syscall.Signal) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// teeTo writes to f, and to w too when w is set. A file given (an *os.File: a pipe whose other
// end the test holds) is the process's own, as it is, and nothing goes to f: a copy through
// another pipe would change what the process sees (when the test stops reading, the process's
// writes must block, not a copier's; when the test closes its end, the process gets SIGPIPE).
func teeTo(f *os.File, w io.Writer) io.Writer {
	if file, ok := w.(*os.File); ok {
		return file
	}
	if w == nil {
		return f
	}
	return io.MultiWriter(f, w)
}

// PID returns the process ID, which is also its process group ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns what exec.Cmd.Wait returned: nil for exit
// status 0, an *exec.ExitError otherwise.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM to the process group, SIGKILL after 10 s if the process has not exited, and
// returns Wait's result. It is safe to call more than once and after the process exited.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() {
		defer RemoveStopper(p.stopper)
		select {
		case <-p.done:
			return
		default:
		}
		_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
			<-p.done
		}
	})
	return p.Wait()
}

// Exited tells whether the process has exited and been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process (not its group).
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL to the process and returns once it has been reaped: a program killed
// mid-flight, as a kill test wants it.
func (p *Process) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil && !p.Exited() {
		return err
	}
	<-p.done
	return nil
}

// StdoutPath and StderrPath are the files holding the process's output.
func (p *Process) StdoutPath() string { return p.stdout }

// StderrPath: see StdoutPath.
func (p *Process) StderrPath() string { return p.stderr }

// WaitStderr waits up to 30s for re on the process's stderr and returns re's first group. It
// fails t when the process exits first or the time runs out.
func (p *Process) WaitStderr(t testing.TB, re *regexp.Regexp) string {
	t.Helper()
	var group string
	testkit.WaitFor(t, fmt.Sprintf("%q on %s", re, p.stderr), 30*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(p.stderr)
		if m := re.FindSubmatch(b); m != nil {
			group = string(m[1])
			return true, ""
		}
		select {
		case <-p.Done():
			t.Fatalf("testproc: %s exited before printing %q: %v", p.name, re, p.Wait())
		default:
		}
		return false, ""
	})
	return group
}

// logTail logs the last lines of the file at path.
func LogTail(t testing.TB, what, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Logf("testproc: %s: %v", what, err)
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > logTailLines {
			lines = lines[1:]
		}
	}
	t.Logf("testproc: last %d lines of %s:\n%s", len(lines), what, strings.Join(lines, "\n"))
}

// Every process the harness starts is spawned from one goroutine locked to its OS thread for the
// life of the test binary: Pdeathsig fires when the thread that forked the child exits, so that
// thread must never exit before the binary does.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

// spawn starts cmd on the spawner thread.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
			for req := range spawnReqs {
				req.err <- req.cmd.Start()
			}
		}()
	})
	req := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnReqs <- req
	return <-req.err
}

// tracked is a process the harness started, for the leftover checks.
type tracked struct {
	name  string
	pid   int    // also its process group: every tracked process leads its own group
	start uint64 // /proc start time, so a reused PID is not mistaken for it
	owner testing.TB
}

// stopper stops something the harness started, when the test binary is interrupted.
type Stopper struct {
	name string
	stop func()
}

var registry struct {
	sync.Mutex
	procs    []tracked
	stoppers []*Stopper // live ones, in the order they were started
}

// track records a started process.
func Track(owner testing.TB, name string, pid int) {
	tr := tracked{name: name, pid: pid, owner: owner}
	if s, err := ReadStat(pid); err == nil {
		tr.start = s.Start
	}
	registry.Lock()
	defer registry.Unlock()
	registry.procs = append(registry.procs, tr)
}

// addStopper registers stop to run if the test binary gets SIGINT or SIGTERM.
func AddStopper(name string, stop func()) *Stopper {
	s := &Stopper{name: name, stop: stop}
	registry.Lock()
	defer registry.Unlock()
	registry.stoppers = append(registry.stoppers, s)
	return s
}

// removeStopper forgets s once what it stops has been stopped.
func RemoveStopper(s *Stopper) {
	registry.Lock()
	defer registry.Unlock()
	for i, x := range registry.stoppers {
		if x == s {
			registry.stoppers = append(registry.stoppers[:i], registry.stoppers[i+1:]...)
			return
		}
	}
}

// stopAll stops everything still running, the most recently started first (fixtures, then
// kube-controller-manager, then the API server and etcd).
func stopAll(why string) {
	registry.Lock()
	live := append([]*Stopper(nil), registry.stoppers...)
	registry.Unlock()
	if len(live) == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "testproc: %s: stopping %d started processes\n", why, len(live))
	for i := len(live) - 1; i >= 0; i-- {
		live[i].stop()
	}
}

var signalOnce sync.Once

// installSignalHandler makes SIGINT and SIGTERM stop every started process before the test
// binary dies of the signal (the control plane runs in its own process groups, so a Ctrl-C
// at the terminal does not reach it).
func InstallSignalHandler() {
	signalOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			stopAll("got " + sig.String())
			signal.Reset(sig)
			_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
			time.Sleep(time.Second)
			os.Exit(2)
		}()
	})
}

var watchdogOnce sync.Once

// watchdogMargin is how long before the test binary's -timeout deadline the watchdog stops every
// started process: the timeout panic runs no cleanup.
const watchdogMargin = 10 * time.Second

// armWatchdog stops every started process shortly before t's -timeout deadline, if it has one.
func ArmWatchdog(t testing.TB) {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return
	}
	deadline, ok := d.Deadline()
	if !ok {
		return
	}
	wait := time.Until(deadline) - watchdogMargin
	if wait <= 0 {
		return
	}
	watchdogOnce.Do(func() {
		time.AfterFunc(wait, func() {
			stopAll(fmt.Sprintf("the test binary's -timeout expires in %s and its panic runs no cleanup", watchdogMargin))
		})
	})
}

// leftovers returns the processes still alive that the harness started for owner (all owners
// when owner is nil), and any process in their process groups. With children, it also returns
// every live child of the test binary.
func leftovers(owner testing.TB, children bool) ([]Stat, error) {
	procs, err := AllProcs()
	if err != nil {
		return nil, err
	}
	registry.Lock()
	started := map[int]uint64{} // pid → start time
	for _, tr := range registry.procs {
		if owner == nil || tr.owner == owner {
			started[tr.pid] = tr.start
		}
	}
	registry.Unlock()
	self := os.Getpid()
	var out []Stat
	for _, s := range procs {
		if !s.Alive() || s.PID == self {
			continue
		}
		start, isStarted := started[s.PID]
		_, inGroup := started[s.Pgrp]
		switch {
		case isStarted && (start == 0 || start == s.Start):
		case inGroup:
		case children && s.PPID == self:
		default:
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// CheckNoLeftovers fails t if a process the harness started in this test binary is still alive,
// or a process in one of their process groups, or any other child of the test binary. Call it at
// the end of a test (t.Cleanup registered before Start runs last), when no other test runs in
// parallel. Start already checks, at its cleanup, the processes started for its own test.
func CheckNoLeftovers(t testing.TB) {
	t.Helper()
	ReportLeftovers(t, nil, true)
}

// reportLeftovers fails t for each leftover, and kills it so it does not outlive the test.
func ReportLeftovers(t testing.TB, owner testing.TB, children bool) {
	t.Helper()
	left, err := leftovers(owner, children)
	if err != nil {
		t.Errorf("testproc: check for leftover processes: %v", err)
		return
	}
	for _, s := range left {
		t.Errorf("testproc: process %d is still running after cleanup (parent %d, group %d): %s", s.PID, s.PPID, s.Pgrp, Cmdline(s))
		_ = syscall.Kill(s.PID, syscall.SIGKILL)
	}
}

// checkGroupEmpty fails t if a process of the group pgid (which a started process led) is still
// alive, and kills the group.
func checkGroupEmpty(t testing.TB, name string, pgid int) {
	t.Helper()
	procs, err := AllProcs()
	if err != nil {
		t.Errorf("testproc: check process group of %s: %v", name, err)
		return
	}
	for _, s := range procs {
		if s.Pgrp == pgid && s.Alive() {
			t.Errorf("testproc: %s left process %d behind in its group: %s", name, s.PID, Cmdline(s))
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}
