package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// TestStressFixture: 8 concurrent workers of the real controller-runtime fixture, 10 000
// reconciles with stack growth (and forced GCs) inside Reconcile. The fixture exits 0,
// entries equal returns, no event is lost, and every ground-truth reconcile has one span.
func TestStressFixture(t *testing.T) {
	bpftest.Require(t)
	if testing.Short() {
		t.Skip("stress test skipped in -short mode")
	}
	f := startTracedFixtureArgs(t, []string{"--max-concurrent-reconciles", "8"})
	const objects, each = 80, 125
	scripts := map[string]string{}
	for i := range objects {
		script := fmt.Sprintf("repeat:%d;deep:64", each)
		if i%10 == 0 {
			script = fmt.Sprintf("repeat:%d;deep:200;gc", each)
		}
		scripts[fmt.Sprintf("s-%02d", i)] = script
	}
	createScripted(t, f.env, "stress", scripts)

	var recs []groundtruth.Record
	testkit.WaitFor(t, fmt.Sprintf("%d reconciles of the fixture", objects*each), 5*time.Minute, func() (bool, string) {
		recs, _ = groundtruth.ReadFile(f.truth)
		return len(recs) >= objects*each, fmt.Sprintf("it did %d", len(recs))
	})
	time.Sleep(time.Second) // nothing more is queued; let the ring buffer drain
	if err := f.ctl.Stop(); err != nil {
		t.Errorf("the fixture did not exit cleanly: %v", err)
	}
	recs, _ = groundtruth.ReadFile(f.truth)
	time.Sleep(500 * time.Millisecond)
	f.stop(t)
	st := f.stats
	if st.Kernel.LostRingBuffer != 0 || st.Kernel.LostState != 0 {
		t.Errorf("lost events: %+v", st.Kernel)
	}
	if st.Assembler.Abandoned != 0 || st.Assembler.OrphanReturns != 0 {
		t.Errorf("entries and returns do not pair: %+v", st.Assembler)
	}
	testkit.Compare(t, recs, f.sink.Snapshot(), testkit.Match{Wall: f.clock.Wall})
	t.Logf("%d reconciles, %d spans, kernel %+v", len(recs), len(f.sink.Snapshot()), st.Kernel)
}
