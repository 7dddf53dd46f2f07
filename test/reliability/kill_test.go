package reliability

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/internal/testproc"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// TestTargetKilledMidReconcile: fakectl is SIGKILLed while one of its reconciles sleeps
// inside Reconcile. The tracer closes that span as abandoned, the kernel's per-goroutine map
// keeps nothing of the dead process, and the same binary started again is traced again.
func TestTargetKilledMidReconcile(t *testing.T) {
	dir, bin, tr, out, stop := tracerOfFakectl(t, collector.Options{})
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("tracer run: %v", err)
		}
	}()

	// First life: obj-20 hangs inside Reconcile; the other worker goes on reconciling.
	startFile, hanging := filepath.Join(dir, "start"), filepath.Join(dir, "hanging")
	first := testproc.Start(t, "fakectl-1", exec.Command(bin, "-start", startFile, "-hanging", hanging,
		"-n", "100000000", "-workers", "2", "-interval", "1ms", "-hang", "20"))
	pid := first.PID()
	if _, err := tr.TracePID(pid); err != nil {
		t.Fatalf("trace fakectl: %v", err)
	}
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the hanging reconcile and 40 others", time.Minute, func() bool {
		_, err := os.Stat(hanging)
		return err == nil && out.Count() >= 40
	})
	before := kernelGoroutines(t, tr, pid)
	if before < 1 {
		t.Fatalf("kernel holds state for %d goroutines of fakectl mid-reconcile, want at least the hanging one", before)
	}

	kill(t, first)
	testkit.Eventually(t, "the tracer to notice the exit", time.Minute, func() bool { return !slices.Contains(tr.PIDs(), pid) })
	if n := kernelGoroutines(t, tr, pid); n != 0 {
		t.Errorf("kernel still holds state for %d goroutines of the dead process", n)
	}

	// Every reconcile fakectl finished (and printed) has its exact span; the hanging one, and
	// at most one more the kill interrupted, are abandoned.
	truths := readTruths(t, output(t, first))
	spans := out.Snapshot()
	byID := map[string]span.Span{}
	var abandoned []span.Span
	for _, s := range spans {
		if s.PID != uint32(pid) {
			t.Errorf("span of process %d before the restart", s.PID)
		}
		if s.Result == span.ResultAbandoned {
			abandoned = append(abandoned, s)
			continue
		}
		byID[s.ReconcileID] = s
	}
	for _, tt := range truths {
		s, ok := byID[tt.ReconcileID]
		if !ok {
			t.Errorf("%s (%s): no span", tt.Name, tt.ReconcileID)
			continue
		}
		if p := testkit.Mismatch(tt, s, testkit.Match{}); len(p) > 0 {
			t.Errorf("%s: %s", tt.Name, strings.Join(p, "; "))
		}
	}
	if extra := len(byID) - len(truths); extra < 0 || extra > 1 {
		t.Errorf("%d complete spans for %d printed reconciles: at most one more (finished, not yet printed at the kill) expected", len(byID), len(truths))
	}
	hung := slices.IndexFunc(abandoned, func(s span.Span) bool { return s.Name == "obj-20-" })
	if hung < 0 || len(abandoned) > 2 {
		t.Fatalf("abandoned spans %+v: want obj-20- (the hanging reconcile) and at most one other", abandoned)
	}
	if s := abandoned[hung]; !s.Incomplete || s.Controller != "fake" || s.Namespace != "ns" || s.ReconcileID != "00000014-0000-4000-8000-000000000014" {
		t.Errorf("hanging reconcile's span %+v: want incomplete, controller rel, ns/obj-20-, its reconcile ID", s)
	}
	if st := tr.Stats(); st.Processes != 0 || st.Sites != 0 {
		t.Errorf("after the exit the tracer still has %d processes, %d sites", st.Processes, st.Sites)
	}
	if l := bpftest.LinksLeftOn(t, bin); len(l) != 0 {
		t.Errorf("uprobe links left on the binary after its only process died: %+v", l)
	}
	t.Logf("first life: %d reconciles printed, %d spans (%d abandoned); kernel goroutine states %d before the kill, 0 after",
		len(truths), len(spans), len(abandoned), before)

	// Second life: the same binary, traced again from scratch.
	stopFile, startFile2 := filepath.Join(dir, "stop"), filepath.Join(dir, "start2")
	second := testproc.Start(t, "fakectl-2", exec.Command(bin, "-n", "100000000", "-workers", "2", "-interval", "1ms", "-stop", stopFile, "-start", startFile2))
	pid2 := second.PID()
	if _, err := tr.TracePID(pid2); err != nil {
		t.Fatalf("trace fakectl again: %v", err)
	}
	n0 := out.Count()
	if err := os.WriteFile(startFile2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "spans of the restarted process", time.Minute, func() bool { return out.Count() >= n0+50 })
	if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-second.Done()
	if second.Wait() != nil {
		t.Fatalf("restarted fakectl failed while traced: %v", second.Wait())
	}
	testkit.Eventually(t, "the tracer to notice the second exit", time.Minute, func() bool { return !slices.Contains(tr.PIDs(), pid2) })
	truths2 := readTruths(t, output(t, second))
	got := map[string]span.Span{}
	for _, s := range out.Snapshot()[n0:] {
		if s.PID != uint32(pid2) {
			t.Errorf("span of process %d after the restart", s.PID)
			continue
		}
		got[s.ReconcileID] = s
	}
	for _, tt := range truths2 {
		s, ok := got[tt.ReconcileID]
		if !ok {
			t.Errorf("restart: %s: no span", tt.Name)
		} else if p := testkit.Mismatch(tt, s, testkit.Match{}); len(p) > 0 {
			t.Errorf("restart: %s: %s", tt.Name, strings.Join(p, "; "))
		}
	}
	if len(got) != len(truths2) {
		t.Errorf("restart: %d spans for %d reconciles", len(got), len(truths2))
	}
	if n := kernelGoroutines(t, tr, pid2); n != 0 {
		t.Errorf("kernel holds state for %d goroutines of the second process after it exited", n)
	}
	t.Logf("second life: %d reconciles, %d spans, all matching", len(truths2), len(got))
}

// kernelGoroutines is how many goroutines of pid the kernel holds span state for.
func kernelGoroutines(t *testing.T, tr *tracer.Tracer, pid int) int {
	t.Helper()
	n, err := tr.KernelGoroutines(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
