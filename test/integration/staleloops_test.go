package integration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// tracedControllers is fixture processes, one per controller, each reconciling the scripted
// ConfigMaps of namespace ns labelled role=<its name>, traced by one tracer (one "node").
type tracedControllers struct {
	env   *testenv.Env
	dir   string // the ground-truth files, <name>.jsonl
	sink  *testkit.Sink
	logs  *testkit.LogBuffer
	stopT func() // stops the tracer (once)
}

// startControllers starts a fixture process per name (with its extra arguments) and traces
// them all.
func startControllers(t *testing.T, ns string, args map[string][]string) *tracedControllers {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	bin := testkit.Build(t, fixturePkg)
	c := &tracedControllers{env: env, dir: t.TempDir(), sink: &testkit.Sink{}, logs: &testkit.LogBuffer{}}
	tr, err := tracer.New(tracer.Options{Writer: c.sink, Logger: slog.New(slog.NewJSONHandler(c.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(args)) {
		p := testenv.StartProcess(t, name, exec.Command(bin, append([]string{"--kubeconfig", env.Kubeconfig, "--namespace", ns,
			"--controller-name", name, "--selector", "role=" + name, "--ground-truth", filepath.Join(c.dir, name+".jsonl")}, args[name]...)...))
		if _, err := tr.TracePID(p.PID()); err != nil {
			tr.Close()
			t.Fatalf("trace %s (%d): %v", name, p.PID(), err)
		}
	}
	stopRun := testkit.Go(t, tr.Run)
	stopped := false
	c.stopT = func() {
		if stopped {
			return
		}
		stopped = true
		if err := stopRun(); err != nil {
			t.Errorf("tracer: %v", err)
		}
		tr.Close()
	}
	t.Cleanup(c.stopT)
	return c
}

// truth reads controller name's ground truth.
func (c *tracedControllers) truth(name string) []groundtruth.Record {
	recs, _ := groundtruth.ReadFile(filepath.Join(c.dir, name+".jsonl"))
	return recs
}

// create makes a scripted ConfigMap for the controller role.
func (c *tracedControllers) create(t *testing.T, ns, name, role, script string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"role": role},
		Annotations: map[string]string{"scripted.reconscope.io/script": script}}}
	if err := c.env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// counters returns the values of the counter name that spans make, by their labels
// ("k=v,k=v" in the labels' order).
func counters(t *testing.T, spans []span.Span, name string) map[string]float64 {
	t.Helper()
	m := exporter.NewMetrics(exporter.MetricsOptions{})
	for i := range spans {
		if err := m.Write(&spans[i]); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			var lv []string
			for _, l := range mm.GetLabel() {
				lv = append(lv, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(lv, ",")] = mm.GetCounter().GetValue()
		}
	}
	return got
}

// logLines returns the log lines in logs whose message is msg.
func logLines(logs *testkit.LogBuffer, msg string) []string {
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"`+msg+`"`) {
			lines = append(lines, l)
		}
	}
	return lines
}

// callRV is the resourceVersion the first call of rec with verb on ConfigMap name recorded
// (what the cache read gave, or what the API server returned to a write), "" when none.
func callRV(rec groundtruth.Record, verb, name string) string {
	for _, c := range rec.Calls {
		if c.Verb == verb && c.Name == name {
			return c.ResourceVersion
		}
	}
	return ""
}

// TestStaleRead: controller reader reads ConfigMap target from its informer cache every 200ms
// (requeue-after); the test pauses reader's informers (the fixture's --cache-pause-file) and
// controller writer updates target. The reads of reader that began after writer's update
// returned, and still found the old version, are flagged stale with the version read (reader's
// own ground truth), the newer version and its writer (the version writer's update returned,
// writer's ground truth), and the age; once the cache resumes, the reads find the new version
// and nothing is flagged; no other read of the test is flagged (reader's reads of its own
// ConfigMap, writer's reads) and no hot loop is reported.
func TestStaleRead(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	const ns = "stale"
	pause := filepath.Join(t.TempDir(), "pause")
	c := startControllers(t, ns, map[string][]string{"reader": {"--cache-pause-file", pause}, "writer": nil})
	bg := context.Background()
	createScripted(t, c.env, ns, nil)
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "target"}, Data: map[string]string{"v": "0"}}
	if err := c.env.Client.Create(bg, target); err != nil {
		t.Fatal(err)
	}
	c.create(t, ns, "reader", "reader", "times:60;get:configmap/target;requeue-after:200ms")
	testkit.WaitFor(t, "reader's reads of target", 30*time.Second, func() (bool, string) {
		n := len(c.truth("reader"))
		return n >= 3, fmt.Sprintf("%d reconciles", n)
	})
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.create(t, ns, "writer", "writer", "times:1;update:configmap/target")
	var written groundtruth.Record
	testkit.WaitFor(t, "writer's update of target", 30*time.Second, func() (bool, string) {
		recs := c.truth("writer")
		if len(recs) == 0 {
			return false, "no reconcile"
		}
		written = recs[0]
		return true, ""
	})
	newRV := callRV(written, "update", "target")
	if newRV == "" || newRV == target.ResourceVersion {
		t.Fatalf("writer's update of target made no new version: %+v (target created at %s)", written, target.ResourceVersion)
	}
	readsAfter := func() int {
		n := 0
		for _, r := range c.truth("reader") {
			if r.Start.After(written.End) {
				n++
			}
		}
		return n
	}
	testkit.WaitFor(t, "reader's reads while its cache is paused", 30*time.Second, func() (bool, string) {
		n := readsAfter()
		return n >= 4, fmt.Sprintf("%d reconciles", n)
	})
	if err := os.Remove(pause); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "reader's read of the new version", 30*time.Second, func() (bool, string) {
		recs := c.truth("reader")
		return len(recs) > 0 && callRV(recs[len(recs)-1], "get", "target") == newRV, fmt.Sprintf("%d reconciles", len(recs))
	})
	time.Sleep(500 * time.Millisecond) // let the last events drain
	c.stopT()
	spans := c.sink.Snapshot()

	truth := map[string]groundtruth.Record{}
	for _, r := range c.truth("reader") {
		truth[r.ReconcileID] = r
	}
	var staleTruth, fresh, flagged int
	for _, sp := range spans {
		if len(sp.HotLoops) > 0 {
			t.Errorf("%s's reconcile of %s: hot loops %+v", sp.Controller, sp.Name, sp.HotLoops)
		}
		rec, ok := truth[sp.ReconcileID]
		if sp.Controller != "reader" || sp.Name != "reader" || !ok {
			if len(sp.StaleReads) > 0 {
				t.Errorf("%s's reconcile of %s/%s: stale reads %+v", sp.Controller, sp.Namespace, sp.Name, sp.StaleReads)
			}
			continue
		}
		read := callRV(rec, "get", "target")
		// Ground truth: the read found the old version although it began after writer's
		// reconcile, and so its update, had returned; one that began while writer's reconcile
		// ran may have begun after the update returned, or not.
		isStale := read == target.ResourceVersion && rec.Start.After(written.End)
		mayBeStale := read == target.ResourceVersion && rec.End.After(written.Start)
		if isStale {
			staleTruth++
		}
		if read == newRV {
			fresh++
		}
		switch {
		case len(sp.StaleReads) == 0:
			if isStale {
				t.Errorf("reader's reconcile %s read target@%s after writer's update made %s: not flagged", sp.ReconcileID, read, newRV)
			}
		case len(sp.StaleReads) > 1:
			t.Errorf("reader's reconcile %s: %d stale reads %+v, want at most 1", sp.ReconcileID, len(sp.StaleReads), sp.StaleReads)
		default:
			flagged++
			r := sp.StaleReads[0]
			if !mayBeStale || r.UID != string(target.UID) || r.Name != "target" || r.Resource != "configmaps" ||
				r.ResourceVersion != read || r.NewerVersion != newRV || r.NewerWriter != "writer" || r.Age <= 0 {
				t.Errorf("reader's reconcile %s read target@%s (writer made %s): flagged %+v", sp.ReconcileID, read, newRV, r)
			}
		}
	}
	t.Logf("target created at %s, writer's update made %s; reader's reconciles: %d stale in truth, %d flagged, %d fresh after the resume; %d spans",
		target.ResourceVersion, newRV, staleTruth, flagged, fresh, len(spans))
	if staleTruth < 3 || flagged < staleTruth || fresh == 0 {
		t.Errorf("%d stale reads in truth, %d flagged, %d fresh reads of %s: want at least 3 flagged, all of them, and fresh reads after", staleTruth, flagged, fresh, newRV)
	}
	got := counters(t, spans, "reconscope_stale_reads_total")
	if want := map[string]float64{"controller=reader,resource=configmaps": float64(flagged)}; !maps.Equal(got, want) {
		t.Errorf("reconscope_stale_reads_total: %v, want %v", got, want)
	}
}

// TestHotLoop: controller looper patches the ConfigMap it reconciles (loop: each patch
// triggers its next reconcile, 4 times more than the default chain) and claims another one as
// many times, every claim after the first changing nothing (noop); controller calm patches its own ConfigMap twice and then
// settles, and creates and patches a child on each change the test makes. The ground truth
// says which reconciles read the version looper's previous patch made and which claims
// returned a version already made; one hot loop of each kind is reported for looper (one log
// line each, the counter, the span events from the threshold on), nothing for calm, and no
// stale read. (In truth the loop has as many self-triggered reconciles in a row as patches:
// the last one runs no script.)
func TestHotLoop(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	const ns = "hotloop"
	c := startControllers(t, ns, map[string][]string{"looper": nil, "calm": nil})
	bg := context.Background()
	createScripted(t, c.env, ns, nil)
	noopTarget := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "noop-target"}}
	if err := c.env.Client.Create(bg, noopTarget); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // both caches have noop-target
	loops := span.DefaultHotLoopChain + 4
	c.create(t, ns, "loop", "looper", fmt.Sprintf("times:%d;patch:configmap/loop", loops))
	c.create(t, ns, "noop", "looper", fmt.Sprintf("repeat:%d;claim:configmap/noop-target", loops))
	c.create(t, ns, "calm", "calm", "times:2;patch:configmap/calm")
	c.create(t, ns, "calm2", "calm", "times:3;create:configmap/calm2-child;patch:configmap/calm2-child")
	for i := range 2 {
		time.Sleep(500 * time.Millisecond)
		touch(t, c.env.Client, ns, "calm2", string(rune('a'+i)))
	}
	testkit.WaitFor(t, "looper's and calm's reconciles", 60*time.Second, func() (bool, string) {
		n := map[string]int{}
		for _, name := range []string{"looper", "calm"} {
			for _, r := range c.truth(name) {
				n[r.Name]++
			}
		}
		return n["loop"] >= loops+1 && n["noop"] >= loops && n["calm"] >= 3 && n["calm2"] >= 3, fmt.Sprint(n)
	})
	time.Sleep(2 * time.Second) // let the last events drain
	c.stopT()
	spans := c.sink.Snapshot()

	// Ground truth of loop: a reconcile is self-triggered when it read the version looper's
	// previous reconcile's patch returned; chain is how many in a row.
	type link struct {
		chain int
		noops int // claims so far that returned a version an earlier claim made
	}
	want := map[string]link{}
	var prevPatch string
	chain, longest := 0, 0
	made := map[string]bool{}
	noops := 0
	for _, r := range c.truth("looper") {
		switch r.Name {
		case "loop":
			if prevPatch != "" && r.ResourceVersion == prevPatch {
				chain++
			} else {
				chain = 0
			}
			longest = max(longest, chain)
			prevPatch = callRV(r, "patch", "loop")
			want[r.ReconcileID] = link{chain: chain}
		case "noop":
			rv := callRV(r, "claim", "noop-target")
			if made[rv] {
				noops++
			}
			made[rv] = true
			want[r.ReconcileID] = link{noops: noops}
		}
	}
	// calm's second and third reconciles of calm read the version its own previous patch made:
	// self-triggered too, but two in a row.
	calmSelf, calmPatch := 0, ""
	for _, r := range c.truth("calm") {
		if r.Name == "calm" {
			if calmPatch != "" && r.ResourceVersion == calmPatch {
				calmSelf++
			}
			calmPatch = callRV(r, "patch", "calm")
		}
	}
	t.Logf("loop: %d self-triggered reconciles in a row at most; noop-target: %d no-op claims; calm: %d self-triggered", longest, noops, calmSelf)
	if calmSelf == 0 {
		t.Errorf("calm was never triggered by its own patch: the calm case was not staged")
	}
	if longest < loops-1 || noops < loops-2 {
		t.Fatalf("no loop staged: %d self-triggered reconciles in a row, %d no-op claims", longest, noops)
	}
	starts := map[span.HotLoopKind]int{}
	for _, sp := range spans {
		if len(sp.StaleReads) > 0 {
			t.Errorf("%s's reconcile of %s: stale reads %+v", sp.Controller, sp.Name, sp.StaleReads)
		}
		w, ok := want[sp.ReconcileID]
		if sp.Controller != "looper" || !ok {
			if len(sp.HotLoops) > 0 {
				t.Errorf("%s's reconcile of %s/%s: hot loops %+v", sp.Controller, sp.Namespace, sp.Name, sp.HotLoops)
			}
			continue
		}
		var kind span.HotLoopKind
		count := 0
		switch sp.Name {
		case "loop":
			kind, count = span.HotLoopSelfTriggered, w.chain
		case "noop":
			kind, count = span.HotLoopNoopWrite, w.noops
		}
		if count < span.DefaultHotLoopChain {
			if len(sp.HotLoops) > 0 {
				t.Errorf("looper's reconcile of %s (%d links in truth): hot loops %+v", sp.Name, count, sp.HotLoops)
			}
			continue
		}
		if len(sp.HotLoops) != 1 {
			t.Errorf("looper's reconcile of %s (%d links in truth): hot loops %+v, want 1", sp.Name, count, sp.HotLoops)
			continue
		}
		h := sp.HotLoops[0]
		wantName, wantUID := sp.Name, sp.UID
		if kind == span.HotLoopNoopWrite {
			wantName, wantUID = "noop-target", string(noopTarget.UID)
		}
		if h.Kind != kind || h.Count != count || h.Start != (count == span.DefaultHotLoopChain) || h.Name != wantName || h.UID != wantUID || wantUID == "" {
			t.Errorf("looper's reconcile of %s (%d links in truth): %+v", sp.Name, count, h)
		}
		if h.Start {
			starts[h.Kind]++
		}
	}
	if want := map[span.HotLoopKind]int{span.HotLoopSelfTriggered: 1, span.HotLoopNoopWrite: 1}; !maps.Equal(starts, want) {
		t.Errorf("episodes started %v, want %v", starts, want)
	}
	lines := logLines(c.logs, "hot loop")
	t.Logf("log lines: %q", lines)
	if len(lines) != 2 || !strings.Contains(strings.Join(lines, "\n"), `"kind":"self_triggered","namespace":"hotloop","name":"loop"`) ||
		!strings.Contains(strings.Join(lines, "\n"), `"kind":"noop_write","namespace":"hotloop","name":"noop-target"`) {
		t.Errorf("hot loop log lines: %q, want one per episode", lines)
	}
	got := counters(t, spans, "reconscope_hot_loops_total")
	if want := map[string]float64{"controller=looper,kind=self_triggered": 1, "controller=looper,kind=noop_write": 1}; !maps.Equal(got, want) {
		t.Errorf("reconscope_hot_loops_total: %v, want %v", got, want)
	}
}
