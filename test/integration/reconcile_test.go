// Package integration holds reconscope's privileged tests against real controllers: the
// scripted fixture controller (controller-runtime) on a real kube-apiserver, traced with
// real eBPF probes, compared one to one with the fixture's own ground truth.
package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

const fixturePkg = "./test/fixtures/scripted-controller"

// scripts are the scripted objects: every outcome the fixture can produce.
var scripts = map[string]string{
	"ok":            "success",
	"err-plain":     "times:1;error",
	"err-wrapped":   "times:1;error-wrapped",
	"err-status":    "times:1;error-status",
	"err-terminal":  "times:1;error-terminal",
	"requeue":       "times:1;requeue",
	"requeue-after": "times:1;requeue-after:50ms",
	"panic":         "times:1;panic",
	"slow":          "times:1;sleep:150ms",
	"deep":          "times:1;deep:300;gc",
}

// tracedFixture runs the fixture under the tracer and returns what both saw.
type tracedFixture struct {
	env     *testenv.Env
	ctl     *testenv.Process
	truth   string
	sink    *testkit.Sink
	tracer  *tracer.Tracer
	stopRun func() error // stops the tracer's Run; nil once stopped
	clock   ktime.Clock
	stats   tracer.Stats // final, once stopped
	plan    *probes.Plan
}

func startTracedFixture(t *testing.T, flags ...string) *tracedFixture {
	t.Helper()
	return startTracedFixtureArgs(t, []string{"--max-concurrent-reconciles", "4"}, flags...)
}

func startTracedFixtureArgs(t *testing.T, args []string, flags ...string) *tracedFixture {
	t.Helper()
	return startTracedFixtureDetail(t, probes.DetailCalls, args, flags...)
}

// startTracedFixtureDetail starts the fixture with args, built with flags, traced at detail.
func startTracedFixtureDetail(t *testing.T, detail probes.Detail, args []string, flags ...string) *tracedFixture {
	t.Helper()
	return startTracedFixtureCatalog(t, detail.Catalog(probes.Catalog()), args, flags...)
}

// startTracedFixtureCatalog starts the fixture with args, built with flags, traced with catalog.
func startTracedFixtureCatalog(t *testing.T, catalog []*probes.Probe, args []string, flags ...string) *tracedFixture {
	t.Helper()
	return startTracedFixtureOptions(t, tracer.Options{Catalog: catalog}, args, flags...)
}

// startTracedFixtureOptions starts the fixture with args, built with flags, traced by a tracer
// of opts.
func startTracedFixtureOptions(t *testing.T, opts tracer.Options, args []string, flags ...string) *tracedFixture {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	bin := testkit.Build(t, fixturePkg, flags...)
	truth := filepath.Join(t.TempDir(), "truth.jsonl")
	ctl := testenv.StartProcess(t, "scripted", exec.Command(bin, append([]string{"--kubeconfig", env.Kubeconfig,
		"--ground-truth", truth}, args...)...))

	tr, s, plan := testenv.TraceWith(t, "the fixture", ctl.PID(), opts)
	t.Logf("attached %s", plan)
	f := &tracedFixture{env: env, ctl: ctl, truth: truth, sink: s, tracer: tr, stopRun: testkit.Go(t, tr.Run), clock: tr.Clock(), plan: plan}
	t.Cleanup(func() { f.stop(t) })
	return f
}

func (f *tracedFixture) stop(t *testing.T) {
	if f.stopRun == nil {
		return
	}
	err := f.stopRun()
	f.stopRun = nil
	if err != nil {
		t.Errorf("tracer: %v", err)
	}
	f.stats = f.tracer.Stats() // before Close frees the kernel's counters
	if f.stats.Kernel.Hits == 0 {
		t.Errorf("the kernel counted no probe hit: %+v", f.stats.Kernel)
	}
	f.tracer.Close()
}

func createScripted(t *testing.T, env *testenv.Env, ns string, scripts map[string]string) {
	t.Helper()
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	createScriptedIn(t, env, ns, scripts)
}

// createScriptedIn creates every script's object in namespace ns, which exists.
func createScriptedIn(t *testing.T, env *testenv.Env, ns string, scripts map[string]string) {
	t.Helper()
	ctx := context.Background()
	for name, script := range scripts {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{"scripted.reconscope.io/script": script}}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
}

// settle waits until the ground truth has a line for every object and stops growing.
func settle(t *testing.T, path string, names []string) []groundtruth.Record {
	t.Helper()
	var recs []groundtruth.Record
	lastN, stableSince := -1, time.Now()
	testkit.WaitFor(t, "the ground truth to settle", 60*time.Second, func() (bool, string) {
		recs, _ = groundtruth.ReadFile(path)
		seen := map[string]bool{}
		for _, r := range recs {
			seen[r.Name] = true
		}
		all := true
		for _, n := range names {
			all = all && seen[n]
		}
		if len(recs) != lastN {
			lastN, stableSince = len(recs), time.Now()
		}
		return all && time.Since(stableSince) > 1500*time.Millisecond, fmt.Sprintf("%d lines", len(recs))
	})
	return recs
}

// fixtureBuild is one way the fixture is built: its name and go build flags.
type fixtureBuild struct {
	name  string
	flags []string
}

// forEachBuild runs test as a subtest for the fixture built plain and stripped (-s -w, like
// release builds).
func forEachBuild(t *testing.T, test func(t *testing.T, build fixtureBuild)) {
	for _, b := range []fixtureBuild{{"plain", nil}, {"stripped", []string{"-ldflags=-s -w"}}} {
		t.Run(b.name, func(t *testing.T) { test(t, b) })
	}
}

// runScripts creates every script's object in namespace ns, waits for the ground truth to
// settle and the last events to drain, stops the tracer and returns the ground truth.
func (f *tracedFixture) runScripts(t *testing.T, ns string) []groundtruth.Record {
	t.Helper()
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	createScripted(t, f.env, ns, scripts)
	recs := settle(t, f.truth, names)
	time.Sleep(300 * time.Millisecond) // let the last events drain
	f.stop(t)
	return recs
}

func TestReconcileSpansMatchGroundTruth(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	forEachBuild(t, func(t *testing.T, build fixtureBuild) {
		f := startTracedFixture(t, build.flags...)
		recs := f.runScripts(t, "gt-"+build.name)
		st := f.stats
		if st.Kernel.LostRingBuffer != 0 {
			t.Errorf("lost %d events", st.Kernel.LostRingBuffer)
		}
		spans := f.sink.Snapshot()
		testkit.Compare(t, recs, spans, testkit.Match{Wall: f.clock.Wall, Slack: 500 * time.Millisecond})
		// Every reconcile here was queued by an informer event or a requeue: its wait in
		// the queue was seen, and is short on an idle controller.
		waited := 0
		for _, s := range spans {
			if s.QueueWait > 0 && s.QueueWait < 5*time.Second {
				waited++
			}
		}
		if waited < len(spans)*9/10 {
			t.Errorf("only %d of %d spans have a queue wait", waited, len(spans))
		}
		outcomes := map[groundtruth.Outcome]int{}
		for _, r := range recs {
			outcomes[r.Outcome]++
		}
		t.Logf("%d reconciles: %v; assembler %+v", len(recs), outcomes, st.Assembler)
	})
}
