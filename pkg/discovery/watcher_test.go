package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
)

// eventString renders an event compactly for comparisons.
func eventString(ev Event) string {
	switch ev := ev.(type) {
	case Started:
		return fmt.Sprintf("start %d %s", ev.Process.PID, filepath.Base(ev.Process.Exe))
	case Exited:
		return fmt.Sprintf("exit %d", ev.PID)
	}
	return fmt.Sprintf("%T", ev)
}

// TestWatcherScan drives the watcher's scans one by one on a fake tree.
func TestWatcherScan(t *testing.T) {
	f := newFakeProc(t)
	w := NewWatcher(WatcherOptions{ProcRoot: f.root, Logger: testkit.Quiet()})
	step := func(want ...string) {
		t.Helper()
		evs, err := w.scan()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range evs {
			got = append(got, eventString(ev))
		}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Errorf("events:\n got %q\nwant %q", got, want)
		}
	}

	f.add(1, "init", 1, "init", "")
	f.add(2, "kthreadd", 2, "", "")
	f.add(100, "manager", 100, "manager", "")
	step("start 1 init", "start 100 manager")
	step() // nothing changed: nothing announced again

	f.add(200, "sh", 200, "sh", "")
	f.remove(100)
	step("exit 100", "start 200 sh")

	// 200 execs the controller: same PID and start time, another executable.
	f.setExe(200, "manager")
	step("exit 200", "start 200 manager")
	step()

	// PID 1 is reused by another process (another start time).
	f.remove(1)
	f.add(1, "other", 999, "init", "")
	step("exit 1", "start 1 init")

	// Exits are reported in PID order before starts.
	f.remove(1)
	f.remove(200)
	f.add(50, "new", 1000, "new", "")
	step("exit 1", "exit 200", "start 50 new")
	step()
}

// nextEvent returns w's next event as eventString writes it, failing t when none comes within
// timeout.
func nextEvent(t *testing.T, w *Watcher, timeout time.Duration) string {
	t.Helper()
	select {
	case ev := <-w.Events():
		return eventString(ev)
	case <-time.After(timeout):
		t.Fatalf("no event within %s", timeout)
		return ""
	}
}

func TestWatcherRun(t *testing.T) {
	f := newFakeProc(t)
	f.add(10, "manager", 10, "manager", "")
	w := NewWatcher(WatcherOptions{ProcRoot: f.root, Interval: 10 * time.Millisecond, Logger: testkit.Quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()

	next := func() string { t.Helper(); return nextEvent(t, w, 5*time.Second) }
	if got := next(); got != "start 10 manager" {
		t.Fatalf("first event %q, want start 10 manager", got)
	}
	f.remove(10)
	if got := next(); got != "exit 10" {
		t.Fatalf("event %q, want exit 10", got)
	}
	f.add(11, "manager", 11, "manager", "")
	if got := next(); got != "start 11 manager" {
		t.Fatalf("event %q, want start 11 manager", got)
	}
	// No repeats while nothing changes.
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event %q", eventString(ev))
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if _, open := <-w.Events(); open {
		t.Fatal("events channel still open after Run returned")
	}
}

func TestWatcherRunBadRoot(t *testing.T) {
	w := NewWatcher(WatcherOptions{ProcRoot: filepath.Join(t.TempDir(), "missing")})
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("Run on a missing proc root: no error")
	}
	if _, open := <-w.Events(); open {
		t.Fatal("events channel still open after Run failed")
	}
}

// TestWatcherRunSurvivesLostRoot checks that a scan failure after the first is logged once
// and does not stop the watcher.
func TestWatcherRunSurvivesLostRoot(t *testing.T) {
	f := newFakeProc(t)
	f.add(10, "m", 10, "m", "")
	var logs strings.Builder
	w := NewWatcher(WatcherOptions{ProcRoot: f.root, Interval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	<-w.Events()
	moved := f.root + ".away"
	if err := os.Rename(f.root, moved); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := os.Rename(moved, f.root); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	cancel()
	for range w.Events() {
		t.Error("unexpected event: the process never left")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "scan processes"); n != 1 {
		t.Errorf("scan failure logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestWatcherExecPrompt: with an hour between periodic scans, only an exec prompt can make the
// watcher see a new process. It reads the processes that exec'd, not the whole of /proc (the
// periodic scan finds the rest); an exec of another program under a known PID is an exit and a
// start; a 0 (notifications lost) makes the next batch a full scan.
func TestWatcherExecPrompt(t *testing.T) {
	f := newFakeProc(t)
	f.add(10, "manager", 10, "manager", "")
	execs := make(chan int, 4)
	w := NewWatcher(WatcherOptions{ProcRoot: f.root, Interval: time.Hour, Execs: execs, WakeDelay: time.Millisecond,
		Logger: testkit.Quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	next := func() string { t.Helper(); return nextEvent(t, w, 10*time.Second) }
	none := func() {
		t.Helper()
		select {
		case ev := <-w.Events():
			t.Fatalf("unexpected event %q", eventString(ev))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if got := next(); got != "start 10 manager" {
		t.Fatalf("first event %q", got)
	}
	f.add(20, "operator", 20, "operator", "") // started without a notification
	f.add(30, "shell", 30, "shell", "")
	execs <- 30
	if got := next(); got != "start 30 shell" {
		t.Fatalf("after the exec of 30: %q, want start 30 shell", got)
	}
	none() // 20 sent no notification: not read
	f.setExe(30, "controller")
	execs <- 30
	for _, want := range []string{"exit 30", "start 30 controller"} {
		if got := next(); got != want {
			t.Fatalf("after 30 exec'd again: %q, want %q", got, want)
		}
	}
	f.remove(10)
	execs <- 0
	for _, want := range []string{"exit 10", "start 20 operator"} {
		if got := next(); got != want {
			t.Fatalf("after notifications were lost: %q, want %q", got, want)
		}
	}
	close(execs) // prompts end; the watcher keeps its periodic scan
	none()
}

// BenchmarkScan is one full scan of this machine's /proc, every process known from the scan
// before (the steady state): what DefaultExecScanInterval spaces out.
func BenchmarkScan(b *testing.B) {
	w := NewWatcher(WatcherOptions{Logger: testkit.Quiet()})
	if _, err := w.scan(); err != nil {
		b.Fatal(err)
	}
	n := len(w.known)
	b.ResetTimer()
	for range b.N {
		if _, err := w.scan(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "processes")
}
