package integration

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/detail"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// mixedOptions are the tracer options of a per-controller detail: the catalog at detail
// reconcile, the calls probes attached gated, pol choosing.
func mixedOptions(pol *detail.Policy) tracer.Options {
	return tracer.Options{
		Catalog:      probes.DetailReconcile.Catalog(probes.Catalog()),
		CallsCatalog: probes.Catalog(),
		Detail:       pol,
	}
}

// TestDetailPerController traces the fixture's two controllers of one manager (one binary,
// one process; plain and stripped) with `--detail reconcile --detail-for scripted-1=calls`: scripted-1's spans
// have their calls (the cache read of the reconciled object, the script's list), scripted-2's
// none, and both have exactly the fixture's reconciles, with their results, IDs and UIDs.
func TestDetailPerController(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	forEachBuild(t, func(t *testing.T, build fixtureBuild) {
		testDetailPerController(t, "percontroller-"+build.name, build.flags)
	})
}

// testDetailPerController is TestDetailPerController in namespace ns, the fixture built with flags.
func testDetailPerController(t *testing.T, ns string, flags []string) {
	pol, err := detail.New(detail.Options{Default: probes.DetailReconcile, Rules: []detail.Rule{{Pattern: "scripted-1", Detail: probes.DetailCalls}}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	f := startTracedFixtureOptions(t, mixedOptions(pol), []string{"--max-concurrent-reconciles", "4", "--controllers", "2"}, flags...)
	withList := map[string]string{"listing": "times:4;list:configmap;requeue-after:20ms"}
	for n, s := range scripts {
		withList[n] = s
	}
	createScripted(t, f.env, ns, withList)
	names := make([]string, 0, len(withList))
	for n := range withList {
		names = append(names, n)
	}
	settle(t, f.truth, names)
	// By now the agent has told the kernel both controllers' instances: a late object's
	// reconcile by scripted-2 records no call at all (its call probes' hits are gated).
	late := map[string]string{"late": "times:2;list:configmap"}
	createScriptedIn(t, f.env, ns, late)
	recs := settle(t, f.truth, append(names, "late"))
	time.Sleep(300 * time.Millisecond) // let the last events drain
	f.stop(t)
	spans := f.sink.Snapshot()
	testkit.Compare(t, recs, spans, testkit.Match{Wall: f.clock.Wall, Slack: 500 * time.Millisecond})
	lateHits := map[string]span.ProbeHits{}
	for _, s := range spans {
		if s.Name == "late" {
			lateHits[s.Controller] = s.ProbeHits
		}
	}
	if h := lateHits["scripted-2"]; h.Emulated != 3 || h.SingleStepped != 0 {
		t.Errorf("scripted-2's reconcile of the late object: probe hits %+v, want 3 emulated (entry, object read, return: no call recorded)", h)
	}
	if h := lateHits["scripted-1"]; h.Total() <= 3 {
		t.Errorf("scripted-1's reconcile of the late object: probe hits %+v, want its calls' too", h)
	}
	if f.stats.Kernel.Gated == 0 {
		t.Errorf("the kernel gated no call probe hit")
	}

	byID := map[string]span.Span{}
	for _, s := range spans {
		byID[s.ReconcileID] = s
	}
	per := map[string]int{}
	withCalls, lists := 0, 0
	for _, r := range recs {
		per[r.Controller]++
		s, ok := byID[r.ReconcileID]
		if !ok {
			continue // Compare said so
		}
		if s.UID != r.UID {
			t.Errorf("%s %s/%s attempt %d: UID %q, the reconcile read %q", r.Controller, r.Namespace, r.Name, r.Attempt, s.UID, r.UID)
		}
		switch r.Controller {
		case "scripted-2":
			if len(s.Calls) != 0 {
				t.Errorf("scripted-2 %s/%s (detail reconcile): %d calls: %+v", r.Namespace, r.Name, len(s.Calls), s.Calls)
			}
		case "scripted-1":
			// Every reconcile reads its object from the cache; the script's lists are cache lists.
			gets := 0
			for _, c := range s.Calls {
				if c.Kind == span.CallCacheGet && c.Name == r.Name {
					gets++
				}
			}
			wantLists := 0
			for _, c := range r.Calls {
				if c.Verb == "list" {
					wantLists++
				}
			}
			gotLists := 0
			for _, c := range s.Calls {
				if c.Kind == span.CallCacheList {
					gotLists++
				}
			}
			if gets == 0 || gotLists != wantLists {
				t.Errorf("scripted-1 %s/%s (detail calls): %d cache reads of its object, %d lists (the fixture made %d): %+v", r.Namespace, r.Name, gets, gotLists, wantLists, s.Calls)
				continue
			}
			withCalls++
			lists += gotLists
		default:
			t.Errorf("ground truth of controller %q", r.Controller)
		}
	}
	if per["scripted-1"] == 0 || per["scripted-2"] == 0 || lists == 0 {
		t.Errorf("reconciles per controller %v, %d lists: the test proves nothing", per, lists)
	}
	t.Logf("%d reconciles (%v), %d spans; scripted-1: %d with their calls, %d lists; kernel: %d gated hits (scripted-2's calls not recorded), %d hits",
		len(recs), per, len(spans), withCalls, lists, f.stats.Kernel.Gated, f.stats.Kernel.Hits)
}

// TestDetailSwitchAtRunTime switches the fixture's controller from detail reconcile to calls
// and back while its reconciles flow (objects requeued every 20 ms): the calls probes are
// attached and detached at run time. Every reconcile has its span (the fixture's ground
// truth, one to one), the spans that began before the switch have no calls, and in the order
// of their starts the spans with calls are one unbroken run, followed by spans without (the
// switch's end): a span keeps the detail it began with.
func TestDetailSwitchAtRunTime(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	pol, f, switched := startSwitching(t, detail.Options{})
	ctx := context.Background()
	ns := "switch"
	flowing := map[string]string{}
	for i := range 4 {
		flowing[fmt.Sprintf("flow-%d", i)] = "list:configmap;requeue-after:20ms"
	}
	createScripted(t, f.env, ns, flowing)
	count := func() int {
		recs, _ := groundtruth.ReadFile(f.truth)
		return len(recs)
	}
	// Reconciles flow; then the switch, while they do.
	waitCount(t, count, 100)
	switchedAt := time.Now()
	if err := pol.Switch("scripted", 3*time.Second, "the test", switchedAt); err != nil {
		t.Fatal(err)
	}
	if err := pol.Switch("other", 0, "the test", time.Now()); err == nil {
		t.Errorf("a second switch with MaxSwitched 1: no error")
	}
	// The switch ends (its 3 s), the calls probes go; reconciles keep flowing past it.
	waitCount(t, count, count()+200)
	for time.Since(switchedAt) < 4*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	waitCount(t, count, count()+100)
	for n := range flowing {
		if err := f.env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(flowing))
	for n := range flowing {
		names = append(names, n)
	}
	recs := settle(t, f.truth, names)
	time.Sleep(300 * time.Millisecond)
	f.stop(t)
	spans := f.sink.Snapshot()
	exact := testkit.Compare(t, recs, spans, testkit.Match{Wall: f.clock.Wall, Slack: 500 * time.Millisecond})

	slices.SortFunc(spans, func(a, b span.Span) int { return cmp.Compare(a.Start, b.Start) })
	runs, with := testkit.DetailRuns(spans, hasCalls)
	before := 0
	for _, s := range spans {
		if f.clock.Wall(s.Start).Before(switchedAt) {
			before++
			if hasCalls(s) {
				t.Errorf("%s/%s began %v before the switch and has %d calls", s.Namespace, s.Name, switchedAt.Sub(f.clock.Wall(s.Start)), len(s.Calls))
			}
		}
	}
	if !slices.Equal(runs, []bool{false, true, false}) {
		t.Errorf("spans in start order, with calls or not: %v; want none, then calls, then none", runs)
	}
	if sw := switched(); !slices.Equal(sw, []string{"scripted=calls", "scripted=reconcile"}) {
		t.Errorf("switches %v, want scripted to calls and back", sw)
	}
	if f.stats.Sites != len(f.plan.Sites) {
		t.Errorf("%d sites attached at the end, the plan at detail reconcile has %d: the calls probes stayed", f.stats.Sites, len(f.plan.Sites))
	}
	t.Logf("%d reconciles, %d spans (%d exact); %d began before the switch, %d have calls; detail runs %v; %d gated hits",
		len(recs), len(spans), exact, before, with, runs, f.stats.Kernel.Gated)
}

// waitCount waits until count() reaches n, at most a minute.
func waitCount(t *testing.T, count func() int, n int) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("%d reconciles of the fixture", n), time.Minute, func() (bool, string) {
		c := count()
		return c >= n, fmt.Sprintf("it made %d", c)
	})
}

// TestDetailSwitchOnSlowReconcile: a reconcile at the slow threshold (a script that sleeps
// 150 ms, the threshold 100 ms) switches its controller to detail calls while reconciles flow:
// every reconcile has its span, the slow one and those begun before its end have no calls, and
// in the order of their starts the spans are without calls, then with.
func TestDetailSwitchOnSlowReconcile(t *testing.T) {
	bpftest.Require(t)
	ns := "slowswitch"
	f, flowing, count, switched := startSlowSwitch(t, detail.SwitchWhenReconcile, ns)
	waitCount(t, count, 50)
	createScriptedIn(t, f.env, ns, map[string]string{"slow": "times:1;sleep:150ms"})
	var slowEnd time.Time
	testkit.Eventually(t, "the slow object's reconcile", time.Minute, func() bool {
		recs, _ := groundtruth.ReadFile(f.truth)
		for _, r := range recs {
			if r.Name == "slow" {
				slowEnd = r.End
			}
		}
		return !slowEnd.IsZero()
	})
	waitCount(t, count, count()+150)
	for n := range flowing {
		if err := f.env.Client.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	recs := settle(t, f.truth, []string{"flow-0", "flow-1", "slow"})
	time.Sleep(300 * time.Millisecond)
	f.stop(t)
	spans := f.sink.Snapshot()
	exact := testkit.Compare(t, recs, spans, testkit.Match{Wall: f.clock.Wall, Slack: 500 * time.Millisecond})
	with := switchedAfter(t, spans, f.clock.Wall, slowEnd, "the slow reconcile")
	if sw := switched(); !slices.Equal(sw, []string{"scripted=calls"}) {
		t.Errorf("switches %v, want scripted to calls", sw)
	}
	t.Logf("%d reconciles, %d spans (%d exact), %d with calls", len(recs), len(spans), exact, with)
}

// TestDetailSwitchOnSlowP99 is TestDetailSwitchOnSlowReconcile with the switch on the p99 of
// the controller's last 100 reconciles (--detail-switch-when p99): while two objects flow, one
// reconcile of 150 ms (the threshold 100 ms) does not switch the controller, a second one
// within its last 100 reconciles does. Every reconcile has its span, none begun before the
// second slow one ended has calls, and in the order of their starts the spans are without
// calls, then with.
func TestDetailSwitchOnSlowP99(t *testing.T) {
	bpftest.Require(t)
	ns := "p99switch"
	f, flowing, count, switched := startSlowSwitch(t, detail.SwitchWhenP99, ns)
	waitCount(t, count, detail.P99Window+20) // the policy holds 100 reconciles of the controller
	// slow makes a reconcile of 150 ms and waits until the policy has seen its span: it returns
	// when that reconcile ended.
	slow := func(name string) time.Time {
		t.Helper()
		createScriptedIn(t, f.env, ns, map[string]string{name: "times:1;sleep:150ms"})
		var end time.Time
		testkit.WaitFor(t, "the span of "+name+"'s reconcile", time.Minute, func() (bool, string) {
			recs, _ := groundtruth.ReadFile(f.truth)
			for _, r := range recs {
				if r.Name == name {
					end = r.End
				}
			}
			for _, s := range f.sink.Snapshot() {
				if s.Name == name && !end.IsZero() {
					return true, ""
				}
			}
			return false, fmt.Sprintf("reconciled: %v", !end.IsZero())
		})
		return end
	}
	slow("slow-1")
	if got := switched(); len(got) != 0 {
		t.Fatalf("one slow reconcile among the last 100 switched: %v", got)
	}
	slow2End := slow("slow-2")
	if got := switched(); !slices.Equal(got, []string{"scripted=calls"}) {
		t.Fatalf("switches %v after a second slow reconcile among the last 100, want scripted to calls", got)
	}
	waitCount(t, count, count()+150)
	for n := range flowing {
		if err := f.env.Client.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	recs := settle(t, f.truth, []string{"flow-0", "flow-1", "slow-1", "slow-2"})
	time.Sleep(300 * time.Millisecond)
	f.stop(t)
	spans := f.sink.Snapshot()
	exact := testkit.Compare(t, recs, spans, testkit.Match{Wall: f.clock.Wall, Slack: 500 * time.Millisecond})
	with := switchedAfter(t, spans, f.clock.Wall, slow2End, "the second slow reconcile")
	t.Logf("%d reconciles, %d spans (%d exact), %d with calls", len(recs), len(spans), exact, with)
}

// hasCalls tells whether s has calls: whether its reconcile was traced at calls detail.
func hasCalls(s span.Span) bool { return len(s.Calls) > 0 }

// switchedAfter checks spans after a switch to calls detail when the reconcile named what ended
// at end: none begun before end has calls, and in start order the spans are without calls, then
// with. It returns how many have calls.
func switchedAfter(t *testing.T, spans []span.Span, wall func(uint64) time.Time, end time.Time, what string) int {
	t.Helper()
	slices.SortFunc(spans, func(a, b span.Span) int { return cmp.Compare(a.Start, b.Start) })
	runs, with := testkit.DetailRuns(spans, hasCalls)
	for _, s := range spans {
		if hasCalls(s) && wall(s.Start).Before(end) {
			t.Errorf("%s/%s began %v before %s ended and has %d calls", s.Namespace, s.Name, end.Sub(wall(s.Start)), what, len(s.Calls))
		}
	}
	if !slices.Equal(runs, []bool{false, true}) {
		t.Errorf("spans in start order, with calls or not: %v; want none, then calls", runs)
	}
	return with
}

// startSwitching starts the fixture (four workers) traced at detail reconcile with switches to
// calls of at most one controller allowed (opts: what else the policy is told). It returns the
// policy, the fixture and the switches made so far ("controller=detail").
func startSwitching(t *testing.T, opts detail.Options) (*detail.Policy, *tracedFixture, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var switches []string
	opts.Default, opts.Switches, opts.MaxSwitched, opts.Logger = probes.DetailReconcile, true, 1, testkit.Quiet()
	opts.OnSwitch = func(c string, to probes.Detail, _ string) {
		mu.Lock()
		switches = append(switches, c+"="+to.String())
		mu.Unlock()
	}
	pol, err := detail.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f := startTracedFixtureOptions(t, mixedOptions(pol), []string{"--max-concurrent-reconciles", "4"})
	return pol, f, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(switches) }
}

// startSlowSwitch starts the fixture (four workers) traced at detail reconcile with automatic
// switches to calls of at most one controller for an hour when reconciles reach 100 ms (when:
// one reconcile or the p99), and two objects in namespace ns that requeue every 20 ms. It
// returns the fixture, those objects, a count of the fixture's reconciles so far, and the
// switches made so far ("controller=detail").
func startSlowSwitch(t *testing.T, when detail.SwitchWhen, ns string) (*tracedFixture, map[string]string, func() int, func() []string) {
	t.Helper()
	_, f, switched := startSwitching(t, detail.Options{SlowThreshold: 100 * time.Millisecond, SwitchWhen: when, SwitchFor: time.Hour})
	flowing := map[string]string{"flow-0": "list:configmap;requeue-after:20ms", "flow-1": "list:configmap;requeue-after:20ms"}
	createScripted(t, f.env, ns, flowing)
	count := func() int {
		recs, _ := groundtruth.ReadFile(f.truth)
		return len(recs)
	}
	return f, flowing, count, switched
}
