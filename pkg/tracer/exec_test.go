package tracer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

// overlayCopies puts bin in one lower layer and returns its path in two overlay mounts of
// that layer, as two containers of one image see it: each mount has its own device, the file
// is one inode in the layer.
func overlayCopies(t *testing.T, bin string) (string, string) {
	t.Helper()
	root := t.TempDir()
	lower := filepath.Join(root, "lower")
	if err := os.MkdirAll(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "fakectl"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range []string{"a", "b"} {
		up, work, merged := filepath.Join(root, c+"-upper"), filepath.Join(root, c+"-work"), filepath.Join(root, c+"-merged")
		for _, d := range []string{up, work, merged} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+up+",workdir="+work); err != nil {
			bpftest.SkipOrFail(t, "cannot mount overlayfs here, so not the container case: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
		paths = append(paths, filepath.Join(merged, "fakectl"))
	}
	var a, b unix.Stat_t
	if err := unix.Stat(paths[0], &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(paths[1], &b); err != nil {
		t.Fatal(err)
	}
	t.Logf("overlay copies: st_dev %#x and %#x, st_ino %d and %d", a.Dev, b.Dev, a.Ino, b.Ino)
	return paths[0], paths[1]
}

// TestNewProcessTracedFromExec: the tracer traces one fakectl process, as the agent does; then a
// second process of the same executable starts and reconciles at once. Every one of its
// reconciles, from the very first, must be a span matching its ground truth: the kernel admits
// it at exec. Discovery runs as in the agent (a /proc scan prompted by the exec, then TracePID),
// which alone is too late for the first reconciles. With overlayfs, the two processes run the
// binary from two overlay mounts of one layer, as two containers of one image (or a restarted
// pod) do.
func TestNewProcessTracedFromExec(t *testing.T) {
	bpftest.Require(t)
	cases := []struct {
		name    string
		args    []string
		overlay bool
		single  bool
	}{
		{"plain", nil, false, false},
		{"single_uprobes", nil, false, true},
		{"pie_overlay", []string{"-buildmode=pie"}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bin := testkit.Build(t, "./test/fakectl", c.args...)
			first, second := bin, bin
			if c.overlay {
				first, second = overlayCopies(t, bin)
			}

			// The first process waits for a start file that never comes: it is just traced.
			one := exec.Command(first, "-start", filepath.Join(t.TempDir(), "never"))
			if err := one.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = one.Process.Kill(); _ = one.Wait() })

			sink := &testkit.Sink{}
			const pod = "default/second-0"
			tr, err := tracer.New(tracer.Options{
				Catalog:    fakectltest.Catalog(t),
				Writer:     sink,
				Logger:     testkit.Quiet(),
				Collector:  collectorOpts(c.single),
				AdmitExecs: true,
				Admit:      func(pid int) (tracer.ProcessMeta, bool) { return tracer.ProcessMeta{Pod: pod}, true },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if _, err := tr.TracePID(one.Process.Pid); err != nil {
				t.Fatalf("trace the first process: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			execs, err := tr.WatchExecs(ctx)
			if err != nil {
				t.Fatalf("watch execs: %v", err)
			}
			// Discovery as in the agent: an exec prompts a /proc scan; processes of the
			// traced executable found by it are traced with TracePID.
			w := discovery.NewWatcher(discovery.WatcherOptions{Interval: time.Hour, Execs: execs, Logger: testkit.Quiet()})
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); _ = w.Run(ctx) }()
			go func() {
				defer wg.Done()
				for ev := range w.Events() {
					if s, ok := ev.(discovery.Started); ok && filepath.Base(s.Process.Exe) == "fakectl" {
						_, _ = tr.TracePID(s.Process.PID)
					}
				}
			}()
			done := make(chan error, 1)
			go func() { done <- tr.Run(ctx) }()
			time.Sleep(300 * time.Millisecond) // the first scan is over

			_, truths, spans := runNew(t, sink, second, 70)
			stats := tr.Stats()
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
			wg.Wait()
			checkMatch(t, truths, spans, stats, "fake")
			for _, s := range spans {
				if s.Pod != pod {
					t.Errorf("span of %s: pod %q, want %q (the metadata Admit gave)", s.Name, s.Pod, pod)
					break
				}
			}
			if stats.Kernel.Admitted == 0 {
				t.Errorf("the kernel admitted no process at exec: %+v", stats.Kernel)
			}
			t.Logf("second process: %d reconciles, %d spans; kernel admitted %d processes at exec", len(truths), len(spans), stats.Kernel.Admitted)
		})
	}
}

// runNew runs a new fakectl process of the executable at path, reconciling n objects at once,
// and returns it, its ground truth, and the spans of its process (once there are as many as
// reconciles, or after 10 s).
func runNew(t *testing.T, sink *testkit.Sink, path string, n int) (*exec.Cmd, []fakectltest.Truth, []span.Span) {
	t.Helper()
	var stdout bytes.Buffer
	cmd := exec.Command(path, "-n", strconv.Itoa(n))
	cmd.Stdout = &stdout
	if err := cmd.Run(); err != nil {
		t.Fatalf("new process: %v", err)
	}
	truths, err := fakectltest.ReadTruths(stdout.Bytes())
	if err != nil || len(truths) != n {
		t.Fatalf("new process reported %d reconciles (%v), want %d", len(truths), err, n)
	}
	pid := uint32(cmd.Process.Pid)
	mine := func() []span.Span {
		var out []span.Span
		for _, s := range sink.Snapshot() {
			if s.PID == pid {
				out = append(out, s)
			}
		}
		return out
	}
	// The caller compares the spans with the truths, so a span still missing fails there.
	testkit.Poll(10*time.Second, func() bool { return len(mine()) >= len(truths) })
	return cmd, truths, mine()
}

// TestTracePIDConcurrent: many goroutines trace the processes of one executable at once, each
// process several times. The executable is inspected and attached once (one uprobe_multi link,
// or one link per site), every process is traced, and Close leaves no link behind.
func TestTracePIDConcurrent(t *testing.T) {
	bpftest.Require(t)
	forEachAttachMode(t, func(t *testing.T, single bool) {
		bin, pids := startWaitingFakectls(t, 4)
		tr, err := tracer.New(tracer.Options{
			Catalog:   fakectltest.Catalog(t),
			Logger:    testkit.Quiet(),
			Collector: collectorOpts(single),
		})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3*len(pids))
		sites := make(chan int, 3*len(pids))
		for range 3 {
			for _, pid := range pids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					plan, err := tr.TracePID(pid)
					if err != nil {
						errs <- err
						return
					}
					sites <- len(plan.Sites)
				}()
			}
		}
		wg.Wait()
		close(errs)
		close(sites)
		for err := range errs {
			t.Errorf("TracePID: %v", err)
		}
		n := <-sites
		if got := len(tr.PIDs()); got != len(pids) {
			t.Errorf("traces %d processes, want %d", got, len(pids))
		}
		want := 1
		if single {
			want = n
		}
		if got := bpftest.LinksOn(t, bin); len(got) != want {
			t.Errorf("%d links on the executable after 12 concurrent TracePID calls, want %d (one attachment)", len(got), want)
		}
		if st := tr.Stats(); st.Sites != n {
			t.Errorf("tracer counts %d sites attached, want %d", st.Sites, n)
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		if left := bpftest.LinksLeftOn(t, bin); len(left) != 0 {
			t.Errorf("links left after Close: %+v", left)
		}
	})
}

// TestTracePIDSiblingExitsMidInspection traces two processes of one executable at once; the
// first exits while the executable waits to be inspected through its /proc/PID/exe. That
// failure is the first process's: the second, which waited for the same inspection, is traced
// anyway (before, it got the first one's error and stayed untraced).
func TestTracePIDSiblingExitsMidInspection(t *testing.T) {
	bpftest.Require(t)
	bin := testkit.Build(t, "./test/fakectl")
	never := filepath.Join(t.TempDir(), "never")
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "-start", never)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first, second := start(), start()
	tr, err := tracer.New(tracer.Options{Catalog: fakectltest.Catalog(t), Logger: testkit.Quiet(), Inspections: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	release := tr.HoldInspections()
	waitUsers := func(n int) {
		t.Helper()
		testkit.WaitFor(t, fmt.Sprintf("%d callers of the executable", n), 10*time.Second, func() (bool, string) {
			got := tr.Users(second.Process.Pid)
			return got == n, fmt.Sprintf("%d callers", got)
		})
	}
	errs := [2]chan error{make(chan error, 1), make(chan error, 1)}
	go func() { _, err := tr.TracePID(first.Process.Pid); errs[0] <- err }()
	waitUsers(1)
	go func() { _, err := tr.TracePID(second.Process.Pid); errs[1] <- err }()
	waitUsers(2)
	_ = first.Process.Kill()
	_ = first.Wait()
	release()
	if err := <-errs[0]; err == nil {
		t.Errorf("the first process exited before its executable was inspected, yet TracePID succeeded")
	} else {
		t.Logf("first process: %v", err)
	}
	if err := <-errs[1]; err != nil {
		t.Fatalf("the second process, alive, not traced: %v", err)
	}
}

// TestTracePIDAcrossExec: a container's process is found while its runtime is still running
// and execs the controller a moment later. The tracer must attach the controller's probes
// once, under the controller's own identity: the identity, the inspection and the attachment
// are of one file. A shell stands for the runtime here; it execs fakectl while the tracer's
// inspection of it waits, then discovery, told of the exec, calls TracePID again (as the agent
// does). The uprobes on fakectl must be one plan's sites, not two: a second set would fire
// with the first for every process of the file, each of its calls recorded twice.
func TestTracePIDAcrossExec(t *testing.T) {
	bpftest.Require(t)
	bin := testkit.Build(t, "./test/fakectl")
	never := filepath.Join(t.TempDir(), "never")
	sh := exec.Command("/bin/sh", "-c", `read go; exec "$0" -start "$1"`, bin, never)
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Process.Kill(); _ = sh.Wait() })
	pid := sh.Process.Pid
	tr, err := tracer.New(tracer.Options{Catalog: fakectltest.Catalog(t), Logger: testkit.Quiet(), Inspections: 1, AdmitExecs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	release := tr.HoldInspections()
	first := make(chan error, 1)
	go func() { _, err := tr.TracePID(pid); first <- err }()
	testkit.WaitFor(t, "TracePID waiting to inspect the shell", 10*time.Second, func() (bool, string) {
		n := tr.Users(pid)
		return n == 1, fmt.Sprintf("%d callers", n)
	})
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the shell exec'ing fakectl", 10*time.Second, func() (bool, string) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return exe == bin, exe
	})
	release()
	err = <-first
	t.Logf("TracePID while the process was the shell: %v", err)
	plan, err := tr.TracePID(pid)
	if err != nil {
		t.Fatalf("TracePID after the exec: %v", err)
	}
	links, err := bpftest.UprobeLinks()
	if err != nil {
		t.Fatal(err)
	}
	sites := 0
	for _, l := range links {
		if l.File == bin {
			sites += l.Count
		}
	}
	if sites != len(plan.Sites) {
		t.Errorf("%d uprobe sites on %s, want its plan's %d once", sites, bin, len(plan.Sites))
	} else {
		t.Logf("%d uprobe sites on %s: its plan's, once", sites, bin)
	}
}

// TestInspectedOncePerExecutable: Options.Inspected (where the agent releases its own
// executable's pages, issue 28) is called once per executable inspected and attached, after
// the inspection: two processes of one executable are one inspection, one call.
func TestInspectedOncePerExecutable(t *testing.T) {
	bpftest.Require(t)
	_, pids := startWaitingFakectls(t, 2)
	var mu sync.Mutex
	calls := 0
	tr, err := tracer.New(tracer.Options{Catalog: fakectltest.Catalog(t), Logger: testkit.Quiet(),
		Inspected: func() { mu.Lock(); calls++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, pid := range pids {
		if _, err := tr.TracePID(pid); err != nil {
			t.Fatalf("TracePID(%d): %v", pid, err)
		}
		mu.Lock()
		got := calls
		mu.Unlock()
		if got != 1 {
			t.Errorf("after tracing process %d: Inspected called %d times, want 1", pid, got)
		}
	}
}

// startWaitingFakectls starts n processes of one build of test/fakectl that wait for a start
// file that never comes, killed at the test's end, and returns the build and their PIDs.
func startWaitingFakectls(t *testing.T, n int) (string, []int) {
	t.Helper()
	bin := testkit.Build(t, "./test/fakectl")
	never := filepath.Join(t.TempDir(), "never")
	var pids []int
	for range n {
		cmd := exec.Command(bin, "-start", never)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pids = append(pids, cmd.Process.Pid)
	}
	return bin, pids
}
