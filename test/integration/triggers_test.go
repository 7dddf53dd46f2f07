package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// TestTriggers: the scripted fixture, a controller-runtime operator that Owns Pods, creates two
// Pods controlled by the ConfigMap it reconciles; the Pods' creation events reconcile the
// ConfigMap again. That reconcile lists both events as mapped triggers, each with the Pod's UID
// and the resourceVersion the API server returned to the fixture's create (the fixture's own
// ground truth, not the agent's), and the writer "scripted"; trigger_controller is that writer.
// A reconcile that failed is retried (a retry trigger), one that asked to be requeued after a
// delay comes back as requeue_after, and the first reconcile of each object is the watch event
// of its ConfigMap's creation, written by the test (untraced). The informer's probe sites are
// function entries the kernel emulates: no single-step per watch event.
func TestTriggers(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	f := startTracedFixtureArgs(t, []string{"--owns", "pod"})
	const ns = "triggers"
	objects := map[string]string{
		"owner": "times:1;create:pod/owner-a;create:pod/owner-b",
		"retry": "times:1;error",
		"later": "times:1;requeue-after:50ms",
	}
	createScripted(t, f.env, ns, objects)
	recs := settle(t, f.truth, []string{"owner", "retry", "later"})
	time.Sleep(300 * time.Millisecond) // let the last events drain
	f.stop(t)

	for _, s := range f.plan.Sites {
		if strings.HasPrefix(s.Probe.ID, "informer/") {
			if s.Kind != probes.SiteEntry || s.Trap() != "emulated" {
				t.Errorf("%s site %s: kind %v, %s; want an entry the kernel emulates", s.Probe.ID, s.Where(), s.Kind, s.Trap())
			}
		}
	}

	// What the fixture's creates returned: the Pods' UIDs and versions.
	type version struct{ uid, rv string }
	pods := map[string]version{}
	for _, r := range recs {
		for _, c := range r.Calls {
			if r.Name == "owner" && c.Verb == "create" && c.Kind == "pod" && c.UID != "" {
				pods[c.Name] = version{c.UID, c.ResourceVersion}
			}
		}
	}
	if len(pods) != 2 {
		t.Fatalf("the fixture created %d pods (%v), want 2: %+v", len(pods), pods, recs)
	}

	spans := map[string][]span.Span{}
	for _, s := range f.sink.Snapshot() {
		if s.Namespace == ns {
			spans[s.Name] = append(spans[s.Name], s)
		}
	}
	for name := range objects {
		for i, s := range spans[name] {
			t.Logf("%s #%d %s: trigger_controller %q read_version_writer %q triggers %+v (+%d)", name, i, s.Result, s.TriggerController, s.ReadVersionWriter, s.Triggers, s.TriggersDropped)
		}
	}

	// The first reconcile of each object: the creation of its ConfigMap, by the test.
	for name := range objects {
		if len(spans[name]) == 0 {
			t.Errorf("%s: no span", name)
			continue
		}
		s := spans[name][0]
		if !hasTrigger(s, func(tr span.Trigger) bool {
			return tr.Kind == span.TriggerEvent && tr.Event == span.WatchAdd && tr.Object.Kind == "ConfigMap" &&
				tr.Object.Name == name && tr.Writer == span.WriterUntraced
		}) {
			t.Errorf("%s: first reconcile's triggers %+v, want the add of its ConfigMap, untraced", name, s.Triggers)
		}
	}

	// The owner's reconciles after the Pods' creation: each Pod's creation, by its writer, is
	// the trigger of exactly one of them (one reconcile when both adds came before the item
	// was taken, two when the first was taken before the second Pod was made), in JSON too.
	listed := map[string]int{}
	for _, s := range spans["owner"][min(1, len(spans["owner"])):] {
		mine := 0
		for pod, v := range pods {
			if hasTrigger(s, func(tr span.Trigger) bool {
				return tr.Kind == span.TriggerMapped && tr.Event == span.WatchAdd && tr.Object.Kind == "Pod" &&
					tr.Object.Namespace == ns && tr.Object.Name == pod && tr.Object.UID == v.uid &&
					tr.Object.ResourceVersion == v.rv && tr.Writer == "scripted"
			}) {
				listed[pod]++
				mine++
			}
		}
		if mine == 0 {
			continue
		}
		if s.TriggerController != "scripted" {
			t.Errorf("owner: trigger_controller %q, want scripted (the writer of the most recent event)", s.TriggerController)
		}
		// The same in JSON.
		b, err := json.Marshal(exporter.ToJSON(&s, f.clock))
		if err != nil {
			t.Fatal(err)
		}
		var j struct {
			Triggers []struct {
				Kind, Event, ObjectKind, Name, UID, Writer string
				ResourceVersion                            string `json:"resource_version"`
			} `json:"triggers"`
			TriggerController string `json:"trigger_controller"`
		}
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, tr := range j.Triggers {
			if v, ok := pods[tr.Name]; ok && tr.Kind == "mapped" && tr.Event == "add" && tr.UID == v.uid && tr.ResourceVersion == v.rv && tr.Writer == "scripted" {
				seen++
			}
		}
		if seen != mine || j.TriggerController != "scripted" {
			t.Errorf("owner in JSON: %s, want the %d Pod creation(s) of the span", b, mine)
		}
	}
	for pod := range pods {
		if listed[pod] != 1 {
			t.Errorf("the creation of pod %s (%v) by scripted is among the triggers of %d reconciles of owner, want exactly one", pod, pods[pod], listed[pod])
		}
	}

	// Every add here was an event or a requeue.
	for name, ss := range spans {
		for _, s := range ss {
			if hasTrigger(s, func(tr span.Trigger) bool { return tr.Kind == span.TriggerOther }) {
				t.Errorf("%s: an add of kind other: %+v", name, s.Triggers)
			}
		}
	}

	// Requeues: the second reconcile of each.
	for name, kind := range map[string]span.TriggerKind{"retry": span.TriggerRetry, "later": span.TriggerRequeueAfter} {
		ok := false
		for _, s := range spans[name][min(1, len(spans[name])):] {
			ok = ok || hasTrigger(s, func(tr span.Trigger) bool { return tr.Kind == kind })
		}
		if !ok {
			t.Errorf("%s: no reconcile with a %s trigger", name, kind)
		}
	}
	outcomes := map[groundtruth.Outcome]int{}
	for _, r := range recs {
		outcomes[r.Outcome]++
	}
	t.Logf("%d reconciles: %v; kernel %+v", len(recs), outcomes, f.stats.Kernel)
}

func hasTrigger(s span.Span, match func(span.Trigger) bool) bool {
	for _, tr := range s.Triggers {
		if match(tr) {
			return true
		}
	}
	return false
}

// TestTriggersHitsPerWatchEvent: a watch event delivered to a handler costs the traced process
// one probe hit (the handler's entry, emulated), whether or not the handler enqueues: the
// fixture's ConfigMap informer delivers the creation of ConfigMaps without a script to its one
// handler, whose predicate drops them. The cost is the slope between two batches (a batch's
// background hits, timers and the runtime's, cancel out).
func TestTriggersHitsPerWatchEvent(t *testing.T) {
	bpftest.Require(t)
	f := startTracedFixture(t)
	ctx := context.Background()
	if err := f.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hits"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	batch := func(first, n int) uint64 {
		t.Helper()
		before := f.tracer.Stats().Kernel.Hits
		for i := first; i < first+n; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "hits", Name: fmt.Sprintf("plain-%d", i)}}
			if err := f.env.Client.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Second) // the informer delivers them
		return f.tracer.Stats().Kernel.Hits - before
	}
	const n1, n2 = 20, 220
	h1 := batch(0, n1)
	h2 := batch(n1, n2)
	perEvent := float64(h2-h1) / float64(n2-n1)
	t.Logf("%d hits for %d watch events, %d for %d: %.3f hits per watch event", h1, n1, h2, n2, perEvent)
	if perEvent < 0.95 || perEvent > 1.1 {
		t.Errorf("%.3f probe hits per watch event, want 1 (the handler's entry)", perEvent)
	}
}

// TestWriteConflictNamesOtherWriter: two fixture processes, controllers alpha and beta. alpha
// reads ConfigMap target from its cache, waits, and updates the version it read; meanwhile beta
// updates target. alpha's update is answered 409, and its span names beta, whose update (its
// own ground truth: the version its update returned, newer than the one alpha read) made the
// newer version.
func TestWriteConflictNamesOtherWriter(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	c := startControllers(t, "conflict", map[string][]string{"alpha": nil, "beta": nil})
	env := c.env
	bg := context.Background()
	createScripted(t, env, "conflict", nil)
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "conflict", Name: "target"}}
	if err := env.Client.Create(bg, target); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // both caches have target
	for name, script := range map[string]string{
		"alpha": "times:1;get:configmap/target;sleep:1500ms;stale-update:configmap/target",
		"beta":  "times:1;sleep:300ms;update:configmap/target",
	} {
		c.create(t, "conflict", name, name, script)
	}
	var alphaRecs, betaRecs []groundtruth.Record
	testkit.WaitFor(t, "alpha's stale update and beta's update", 30*time.Second, func() (bool, string) {
		alphaRecs, betaRecs = c.truth("alpha"), c.truth("beta")
		return len(alphaRecs) > 0 && len(betaRecs) > 0, fmt.Sprintf("%d and %d reconciles", len(alphaRecs), len(betaRecs))
	})
	time.Sleep(500 * time.Millisecond) // let the last events drain
	c.stopT()

	// Ground truth: what alpha read, and the newer version beta's update returned.
	var readRV, betaRV string
	for _, c := range alphaRecs[0].Calls {
		if c.Verb == "get" && c.Name == "target" {
			readRV = c.ResourceVersion
		}
	}
	for _, c := range betaRecs[0].Calls {
		if c.Verb == "update" && c.Name == "target" {
			betaRV = c.ResourceVersion
		}
	}
	if alphaRecs[0].Outcome != groundtruth.OutcomeError || !strings.Contains(alphaRecs[0].Error, "the object has been modified") || readRV == "" || betaRV == "" || readRV == betaRV {
		t.Fatalf("no conflict staged: alpha %+v, beta %+v", alphaRecs[0], betaRecs[0])
	}
	t.Logf("alpha read target@%s, beta's update made %s, alpha's update: %s", readRV, betaRV, alphaRecs[0].Error)

	found := false
	for _, sp := range c.sink.Snapshot() {
		if sp.Controller != "alpha" || sp.Name != "alpha" {
			continue
		}
		for _, c := range sp.Calls {
			if c.Kind == span.CallAPI && c.Verb == "PUT" && c.Name == "target" {
				t.Logf("alpha's %s %s/%s: status %d, conflict writer %q", c.Verb, c.Resource, c.Name, c.Status, c.ConflictWriter)
				if c.Status == 409 {
					found = true
					if c.ConflictWriter != "beta" {
						t.Errorf("alpha's conflicting update names %q, want beta", c.ConflictWriter)
					}
				}
			}
		}
	}
	if !found {
		t.Error("no span of alpha has its update answered 409")
	}
}

// TestResyncTrigger: the scripted fixture's informers resync every second (--sync-period), and
// nobody writes ConfigMap steady after its creation: every reconcile of steady after the first
// is the informer's resync delivering again the version the fixture's reconcile read (its own
// record of what its cache returned), and lists a resync trigger of that version, and no
// update event. RequeueAfter and error retries are TestTriggers' (requeue_after, retry).
func TestResyncTrigger(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	f := startTracedFixtureArgs(t, []string{"--sync-period", "1s"})
	const ns = "resync"
	createScripted(t, f.env, ns, map[string]string{"steady": "success"})
	var recs []groundtruth.Record
	testkit.WaitFor(t, "four reconciles of steady", 60*time.Second, func() (bool, string) {
		recs, _ = groundtruth.ReadFile(f.truth)
		return len(recs) >= 4, fmt.Sprintf("%d reconciles", len(recs))
	})
	f.stop(t)
	recs, _ = groundtruth.ReadFile(f.truth)

	// Ground truth: the versions the fixture's reconciles read, by reconcile ID.
	read := map[string]string{}
	versions := map[string]bool{}
	for _, r := range recs {
		if r.Name == "steady" {
			read[r.ReconcileID] = r.ResourceVersion
			versions[r.ResourceVersion] = true
		}
	}
	if len(versions) != 1 {
		t.Fatalf("the fixture read %d versions of steady (%v), want 1: nobody writes it", len(versions), versions)
	}
	var spans []span.Span
	for _, s := range f.sink.Snapshot() {
		if s.Namespace == ns && s.Name == "steady" {
			spans = append(spans, s)
		}
	}
	if len(spans) < 4 {
		t.Fatalf("%d spans of steady, the fixture recorded %d reconciles", len(spans), len(recs))
	}
	resyncs := 0
	for i, s := range spans {
		t.Logf("steady #%d (rv %s, fixture read %s): triggers %+v", i, s.ResourceVersion, read[s.ReconcileID], s.Triggers)
		if i == 0 {
			continue
		}
		if hasTrigger(s, func(tr span.Trigger) bool { return tr.Event == span.WatchUpdate }) {
			t.Errorf("steady #%d: an update event, but nobody wrote steady: %+v", i, s.Triggers)
		}
		rv := recs[0].ResourceVersion
		if hasTrigger(s, func(tr span.Trigger) bool {
			return tr.Kind == span.TriggerResync && tr.Event == span.WatchResync && tr.Object.Kind == "ConfigMap" &&
				tr.Object.Name == "steady" && tr.Object.ResourceVersion == rv && tr.Writer == span.WriterUntraced
		}) {
			resyncs++
		} else {
			t.Errorf("steady #%d: triggers %+v, want a resync of version %s (what the fixture read)", i, s.Triggers, rv)
		}
	}
	b, err := json.Marshal(exporter.ToJSON(&spans[len(spans)-1], f.clock))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"kind":"resync"`) {
		t.Errorf("the last span in JSON has no resync trigger: %s", b)
	}
	t.Logf("%d spans of steady, %d reconciles recorded; %d resync triggers", len(spans), len(recs), resyncs)
}
