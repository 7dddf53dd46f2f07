package integration

import (
	"slices"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestDetailReconcile traces the scripted controller-runtime fixture with --detail reconcile:
// the same reconciles as the ground truth, each exact (object, result, error type and message,
// requeue delay, reconcile ID, times) as at the calls detail, with its queue wait, the UID and
// resourceVersion the reconcile read (the fixture's own record of them), and no call; each
// cost its process three probe hits (the Reconcile's entry, its cache reader's call of
// reflect.Value.Set, which copies the object read into the caller's, and the return address in
// its handler), none single-stepped; no call probe but the cache read and no goroutine probe
// is attached. A second tracer at --detail calls traces the same process at the same time: its
// spans of the same reconciles have the same results, UIDs, resourceVersions and queue waits.
// Plain and stripped.
func TestDetailReconcile(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	forEachBuild(t, func(t *testing.T, build fixtureBuild) {
		testDetailReconcile(t, "detail-"+build.name, probes.DetailReconcile.Catalog(probes.Catalog()), build.flags, true)
	})
}

// TestDeferredRead is TestDetailReconcile with the cache read's fallback, a deferred read: the
// entry of informerCache.Get keeps its obj, and the kernel reads the object's metadata at the
// goroutine's next hit (here the reconcile's end), one emulated hit too. The fixture's Get
// fills a value it copies and drops, so the object may be gone by the reconcile's end (a
// reconcile that sleeps, a GC): a span may lack the UID and resourceVersion then, but every
// one it has is the one the reconcile read.
func TestDeferredRead(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	catalog := slices.DeleteFunc(probes.DetailReconcile.Catalog(probes.Catalog()), func(p *probes.Probe) bool {
		return slices.Contains(probes.ReconcileReads, p) && !p.DeferredRead
	})
	forEachBuild(t, func(t *testing.T, build fixtureBuild) {
		testDetailReconcile(t, "deferred-"+build.name, catalog, build.flags, false)
	})
}

// testDetailReconcile runs the fixture's scripts in namespace ns traced with catalog (a
// DetailReconcile catalog) and a tracer at detail calls; every span must have the UID and
// resourceVersion the reconcile read when allUIDs, a wrong one never.
func testDetailReconcile(t *testing.T, ns string, catalog []*probes.Probe, flags []string, allUIDs bool) {
	f := startTracedFixtureCatalog(t, catalog, []string{"--max-concurrent-reconciles", "4"}, flags...)
	callsTr, callsSink, _ := testenv.TraceDetail(t, "the fixture at detail calls", f.ctl.PID(), probes.DetailCalls)
	stopCalls := testkit.Go(t, callsTr.Run)
	recs := f.runScripts(t, ns)
	if err := stopCalls(); err != nil {
		t.Errorf("tracer at detail calls: %v", err)
	}
	callsTr.Close()
	spans := f.sink.Snapshot()
	testkit.Compare(t, recs, spans, testkit.Match{Wall: f.clock.Wall, Slack: 500 * time.Millisecond})
	byID := map[string]span.Span{}
	for _, s := range spans {
		byID[s.ReconcileID] = s
	}
	withUID := 0
	for _, r := range recs {
		s, ok := byID[r.ReconcileID]
		if !ok {
			continue // Compare said so
		}
		if s.UID == "" && s.ResourceVersion == "" && !allUIDs {
			continue
		}
		if s.UID != r.UID || s.ResourceVersion != r.ResourceVersion {
			t.Errorf("%s/%s attempt %d: UID %q resourceVersion %q, the reconcile read %q %q", r.Namespace, r.Name, r.Attempt, s.UID, s.ResourceVersion, r.UID, r.ResourceVersion)
		}
		if s.UID != "" {
			withUID++
		}
	}
	if !allUIDs && withUID < len(recs)*3/4 {
		t.Errorf("only %d of %d spans have a UID and resourceVersion", withUID, len(recs))
	}
	waited, three := 0, 0
	for _, s := range spans {
		if len(s.Calls) != 0 {
			t.Errorf("%s/%s: %d calls at detail reconcile", s.Namespace, s.Name, len(s.Calls))
		}
		if s.UID != "" && s.ReadVersionWriter == "" {
			t.Errorf("%s/%s: UID and resourceVersion but no writer of the version read", s.Namespace, s.Name)
		}
		if s.QueueWait > 0 && s.QueueWait < 5*time.Second {
			waited++
		}
		if s.ProbeHits.Emulated == 3 && s.ProbeHits.SingleStepped == 0 {
			three++
		} else {
			t.Errorf("%s/%s: probe hits %+v, want 3 emulated", s.Namespace, s.Name, s.ProbeHits)
		}
	}
	if waited < len(spans)*9/10 {
		t.Errorf("only %d of %d spans have a queue wait", waited, len(spans))
	}
	for _, site := range f.plan.Sites {
		p := site.Probe
		read := slices.Contains(probes.ReconcileReads, p)
		if (p.Role == probes.RoleCall && !p.ItemResult && !read) || p.Role == probes.RoleSpawn || p.Role == probes.RoleExit {
			t.Errorf("detail reconcile attached %s at %s", p.ID, site.Where())
		}
		if read && (site.Kind != probes.SiteEntry || !site.Emulated) {
			t.Errorf("cache read %s: %s site at %s, emulated %v", p.ID, site.Kind, site.Where(), site.Emulated)
		}
	}

	// The same reconciles at detail calls, traced at the same time.
	same := 0
	for _, c := range callsSink.Snapshot() {
		s, ok := byID[c.ReconcileID]
		if !ok {
			t.Errorf("%s/%s (%s): a span at detail calls, none at detail reconcile", c.Namespace, c.Name, c.ReconcileID)
			continue
		}
		d := s.QueueWait - c.QueueWait
		if s.UID == "" && !allUIDs {
			s.UID, s.ResourceVersion = c.UID, c.ResourceVersion // checked above
		}
		if s.Result != c.Result || s.ErrorType != c.ErrorType || s.UID != c.UID || s.ResourceVersion != c.ResourceVersion || d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("%s/%s (%s): detail reconcile %s %q %s@%s wait %v, detail calls %s %q %s@%s wait %v", s.Namespace, s.Name, s.ReconcileID,
				s.Result, s.ErrorType, s.UID, s.ResourceVersion, s.QueueWait, c.Result, c.ErrorType, c.UID, c.ResourceVersion, c.QueueWait)
			continue
		}
		same++
	}
	if same != len(spans) {
		t.Errorf("%d of %d spans the same at both details", same, len(spans))
	}
	t.Logf("%d reconciles, %d with a UID and resourceVersion; %d spans of 3 emulated hits each, %d the same at detail calls; %d probe hits in all (queue adds and rate limits included): %.2f per reconcile",
		len(recs), withUID, three, same, f.stats.Kernel.Hits, float64(f.stats.Kernel.Hits)/float64(max(len(recs), 1)))
}
