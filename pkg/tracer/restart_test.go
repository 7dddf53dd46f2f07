package tracer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/symbols"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

// restartBed is a tracer that traces fakectl processes as the agent does (admission at exec,
// housekeeping), with its log kept for the test to read.
type restartBed struct {
	tr   *tracer.Tracer
	sink *testkit.Sink
	log  *testkit.LogBuffer
	stop func() error
	once sync.Once
	err  error
}

// close stops Run and closes the tracer, once.
func (b *restartBed) close() error {
	b.once.Do(func() { b.err = errors.Join(b.stop(), b.tr.Close()) })
	return b.err
}

func newRestartBed(t *testing.T, configure func(o *tracer.Options)) *restartBed {
	t.Helper()
	b := &restartBed{sink: &testkit.Sink{}, log: &testkit.LogBuffer{}}
	opts := tracer.Options{
		Catalog:      fakectltest.Catalog(t),
		Writer:       b.sink,
		Logger:       b.log.Logger(),
		Housekeeping: 50 * time.Millisecond,
		AdmitExecs:   true,
	}
	if configure != nil {
		configure(&opts)
	}
	tr, err := tracer.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b.tr = tr
	// The exec notifications are what takes in a process the kernel admitted at exec; no
	// discovery runs here, so a process not admitted at exec is not traced at all.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	execs, err := tr.WatchExecs(ctx)
	if err != nil {
		t.Fatalf("watch execs: %v", err)
	}
	go func() {
		for range execs {
		}
	}()
	b.stop = testkit.Go(t, tr.Run)
	t.Cleanup(func() { _ = b.close() })
	return b
}

// startIdle starts a fakectl process that waits for a start file that never comes, and traces it.
func (b *restartBed) startIdle(t *testing.T, bin string) *exec.Cmd {
	t.Helper()
	return b.startTraced(t, bin, "-start", filepath.Join(t.TempDir(), "never"))
}

// startTraced starts fakectl with args and traces it.
func (b *restartBed) startTraced(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, err := b.tr.TracePID(cmd.Process.Pid); err != nil {
		t.Fatalf("trace fakectl: %v", err)
	}
	return cmd
}

// exit kills cmd and waits until the tracer has closed the process (it logs its exit once done).
func (b *restartBed) exit(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	line := fmt.Sprintf(`msg="process exited" pid=%d`, cmd.Process.Pid)
	testkit.WaitFor(t, "the tracer to close the exited process", 10*time.Second, func() (bool, string) {
		log := b.log.String()
		return strings.Contains(log, line), "its log:\n" + log
	})
}

// TestRestartTracedFromExec: process A of an executable is traced, then exits, and only then
// does process B of the same executable start, as when a pod restarts or crash-loops. B's very
// first reconciles must all be spans matching its ground truth: the executable stayed attached
// and admissible at exec through A's exit. Before, A's exit detached it, B was not admitted at
// exec, and only the next /proc scan (none runs here) would have found it, after its first
// reconciles.
func TestRestartTracedFromExec(t *testing.T) {
	bpftest.Require(t)
	forEachAttachMode(t, func(t *testing.T, single bool) {
		bin := testkit.Build(t, "./test/fakectl")
		b := newRestartBed(t, func(o *tracer.Options) { o.Collector = collectorOpts(single) })
		a := b.startIdle(t, bin)
		b.exit(t, a)
		admitted := b.tr.Stats().Kernel.Admitted

		two, truths, spans := runNew(t, b.sink, bin, 40)
		stats := b.tr.Stats()
		checkMatch(t, truths, spans, stats, "fake")
		if stats.Kernel.Admitted <= admitted {
			t.Errorf("the kernel admitted no process at exec after A exited (admitted %d, then %d)", admitted, stats.Kernel.Admitted)
		}
		t.Logf("process B: %d reconciles, %d spans", len(truths), len(spans))

		// Close detaches at once what stays attached for a restart.
		if err := b.close(); err != nil {
			t.Fatal(err)
		}
		if left := bpftest.LinksLeftOn(t, bin, a.Process.Pid, two.Process.Pid); len(left) != 0 {
			t.Errorf("links left on the executable after Close: %+v", left)
		}
	})
}

// TestIdleExecutableDetached: once its last process exited, an executable stays attached for
// the grace period (its probes and site slots kept, and counted as idle), then is really
// detached: no link left on it, no site counted, and a new process of it is no longer admitted
// at exec. The grace is an hour while the test looks, then cut short (SetGrace): no check
// depends on how fast the test runs.
func TestIdleExecutableDetached(t *testing.T) {
	bpftest.Require(t)
	forEachAttachMode(t, func(t *testing.T, single bool) {
		bin := testkit.Build(t, "./test/fakectl")
		b := newRestartBed(t, func(o *tracer.Options) {
			o.Collector = collectorOpts(single)
			o.Grace = time.Hour
		})
		a := b.startIdle(t, bin)
		sites := b.tr.Stats().Sites
		linked := len(bpftest.LinksOn(t, bin))
		b.exit(t, a)
		if st := b.tr.Stats(); st.Sites != sites || st.Idle != 1 {
			t.Errorf("within the grace period: %d sites attached and %d idle executables, want %d and 1", st.Sites, st.Idle, sites)
		}
		if n := len(bpftest.LinksOn(t, bin, a.Process.Pid)); n != linked {
			t.Errorf("within the grace period: %d links on the executable, want %d", n, linked)
		}
		if strings.Contains(b.log.String(), "msg=detached") {
			t.Errorf("logged as detached within the grace period:\n%s", b.log.String())
		}

		// Once the grace is over: no site counted, no link, and the log says it is detached.
		b.tr.SetGrace(time.Millisecond)
		testkit.WaitFor(t, "the idle executable to be detached", 10*time.Second, func() (bool, string) {
			st, n, log := b.tr.Stats(), len(bpftest.LinksOn(t, bin, a.Process.Pid)), b.log.String()
			return st.Sites == 0 && st.Idle == 0 && n == 0 && strings.Contains(log, "msg=detached"),
				fmt.Sprintf("%d sites, %d idle, %d links; log:\n%s", st.Sites, st.Idle, n, log)
		})
		admitted := b.tr.Stats().Kernel.Admitted
		if err := exec.Command(bin, "-n", "1").Run(); err != nil {
			t.Fatal(err)
		}
		if got := b.tr.Stats().Kernel.Admitted; got != admitted {
			t.Errorf("a process of the detached executable was admitted at exec (admitted %d, then %d)", admitted, got)
		}
	})
}

// TestIdleExecutableMakesRoom: an idle executable does not keep another from being attached
// when the site table is full: the one idle longest is detached early to make room.
func TestIdleExecutableMakesRoom(t *testing.T) {
	bpftest.Require(t)
	bin := testkit.Build(t, "./test/fakectl")
	// A copy is another file (another inode): another executable with as many sites.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "fakectl-copy")
	if err := os.WriteFile(other, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sym, err := symbols.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := probes.NewPlan(sym, fakectltest.Catalog(t))
	sym.Close()
	if err != nil {
		t.Fatal(err)
	}
	n := len(plan.Sites)
	// Room for one of the two executables only.
	b := newRestartBed(t, func(o *tracer.Options) {
		o.Collector.SiteTable = n + n/2
		o.Grace = time.Hour
	})
	a := b.startIdle(t, bin)
	b.exit(t, a)
	if st := b.tr.Stats(); st.Idle != 1 {
		t.Fatalf("%d idle executables after its process exited, want 1", st.Idle)
	}
	two := b.startIdle(t, other) // fails unless the idle one makes room
	if left := bpftest.LinksLeftOn(t, bin, a.Process.Pid); len(left) != 0 {
		t.Errorf("links left on the idle executable that made room: %+v", left)
	}
	if st := b.tr.Stats(); st.Sites != n || st.Idle != 0 || st.Processes != 1 {
		t.Errorf("after the other executable was attached: %d sites, %d idle, %d processes; want %d, 0, 1", st.Sites, st.Idle, st.Processes, n)
	}
	if !strings.Contains(b.log.String(), "site table full") {
		t.Errorf("the early detach is not logged with its reason:\n%s", b.log.String())
	}
	t.Logf("site table of %d slots; the copy's process %d traced", n+n/2, two.Process.Pid)
}

// TestExecOtherProgramUntraced: a traced process that execs another program (not attached) is
// no longer traced, though it lives on; its executable, left without a process, is idle.
func TestExecOtherProgramUntraced(t *testing.T) {
	bpftest.Require(t)
	bin := testkit.Build(t, "./test/fakectl")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		bpftest.SkipOrFail(t, "no sleep program to exec: %v", err)
	}
	b := newRestartBed(t, nil)
	startFile := filepath.Join(t.TempDir(), "start")
	a := b.startTraced(t, bin, "-start", startFile, "-n", "3", "-exec", sleep+" 60")
	pid := a.Process.Pid
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the process to exec sleep", 10*time.Second, func() (bool, string) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return exe == sleep, "its executable: " + exe
	})
	testkit.WaitFor(t, "the tracer to stop tracing it", 10*time.Second, func() (bool, string) {
		st := b.tr.Stats()
		return st.Processes == 0 && st.Idle == 1, fmt.Sprintf("%d processes traced, %d idle executables", st.Processes, st.Idle)
	})
	if strings.Contains(b.log.String(), fmt.Sprintf(`msg="process exited" pid=%d`, pid)) {
		t.Errorf("the process is alive, yet logged as exited")
	}
}

// TestReattachAfterRelease: once attached, an executable's function and symbol tables are
// released (symbols.Binary.Release); detached with its last process, it is inspected and
// attached again from the file for a new process of it, which is traced exactly: plain, and
// stripped (its function table read from .gopclntab a block at a time).
func TestReattachAfterRelease(t *testing.T) {
	bpftest.Require(t)
	for _, build := range []struct {
		name       string
		args       []string
		controller string // stripped builds have no DWARF for the fake Controller: no name
	}{{"plain", nil, "fake"}, {"stripped", []string{"-ldflags=-s -w"}, ""}} {
		t.Run(build.name, func(t *testing.T) {
			bin := testkit.Build(t, "./test/fakectl", build.args...)
			b := newRestartBed(t, func(o *tracer.Options) { o.AdmitExecs, o.Grace = false, -1 })
			a := b.startIdle(t, bin)
			b.exit(t, a)
			testkit.WaitFor(t, "the executable detached with its last process", 10*time.Second, func() (bool, string) {
				return strings.Contains(b.log.String(), "msg=detached"), "its log:\n" + b.log.String()
			})

			start := filepath.Join(t.TempDir(), "start")
			var stdout bytes.Buffer
			cmd := exec.Command(bin, "-n", "40", "-start", start)
			cmd.Stdout = &stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			if _, err := b.tr.TracePID(cmd.Process.Pid); err != nil {
				t.Fatalf("trace the new process: %v", err)
			}
			if n := strings.Count(b.log.String(), "msg=attached"); n != 2 {
				t.Fatalf("attached %d times, want 2 (once per process):\n%s", n, b.log.String())
			}
			if err := os.WriteFile(start, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("new process: %v", err)
			}
			truths, err := fakectltest.ReadTruths(stdout.Bytes())
			if err != nil || len(truths) != 40 {
				t.Fatalf("new process reported %d reconciles (%v), want 40", len(truths), err)
			}
			var spans []span.Span
			testkit.WaitFor(t, "a span per reconcile of the new process", 10*time.Second, func() (bool, string) {
				spans = spans[:0]
				for _, s := range b.sink.Snapshot() {
					if s.PID == uint32(cmd.Process.Pid) {
						spans = append(spans, s)
					}
				}
				return len(spans) >= len(truths), fmt.Sprintf("%d spans of %d reconciles", len(spans), len(truths))
			})
			checkMatch(t, truths, spans, b.tr.Stats(), build.controller)
		})
	}
}
