package integration

import (
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/probes"
)

// TestDetailReconcile traces the scripted controller-runtime fixture with --detail reconcile:
// the same reconciles as the ground truth, each exact (object, result, error type and message,
// requeue delay, reconcile ID, times) as at the calls detail, with its queue wait, and no call;
// each cost its process two probe hits (the Reconcile's entry and the return address in its
// handler), none single-stepped; no call or goroutine probe is attached. Plain and stripped.
func TestDetailReconcile(t *testing.T) {
	bpftest.Require(t)
	forEachBuild(t, func(t *testing.T, build fixtureBuild) {
		f := startTracedFixtureDetail(t, probes.DetailReconcile, []string{"--max-concurrent-reconciles", "4"}, build.flags...)
		recs := f.runScripts(t, "detail-"+build.name)
		spans := f.sink.Snapshot()
		testkit.Compare(t, recs, spans, testkit.Match{Wall: f.clock.Wall, Slack: 500 * time.Millisecond})
		waited, twoEmulated := 0, 0
		for _, s := range spans {
			if len(s.Calls) != 0 || s.UID != "" || s.ResourceVersion != "" {
				t.Errorf("%s/%s: %d calls, UID %q, resourceVersion %q at detail reconcile", s.Namespace, s.Name, len(s.Calls), s.UID, s.ResourceVersion)
			}
			if s.QueueWait > 0 && s.QueueWait < 5*time.Second {
				waited++
			}
			if s.ProbeHits.Emulated == 2 && s.ProbeHits.SingleStepped == 0 {
				twoEmulated++
			} else {
				t.Errorf("%s/%s: probe hits %+v, want 2 emulated", s.Namespace, s.Name, s.ProbeHits)
			}
		}
		if waited < len(spans)*9/10 {
			t.Errorf("only %d of %d spans have a queue wait", waited, len(spans))
		}
		for _, site := range f.plan.Sites {
			if r := site.Probe.Role; (r == probes.RoleCall && !site.Probe.ItemResult) || r == probes.RoleSpawn || r == probes.RoleExit {
				t.Errorf("detail reconcile attached %s at %s", site.Probe.ID, site.Where())
			}
		}
		t.Logf("%d reconciles, %d spans of 2 emulated hits each; %d probe hits in all (queue adds and rate limits included): %.2f per reconcile",
			len(recs), twoEmulated, f.stats.Kernel.Hits, float64(f.stats.Kernel.Hits)/float64(max(len(recs), 1)))
	})
}
