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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
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
	env    *testenv.Env
	ctl    *testenv.Process
	truth  string
	sink   *testkit.Sink
	tracer *tracer.Tracer
	cancel context.CancelFunc
	done   chan error
	clock  ktime.Clock
	stats  tracer.Stats // final, once stopped
}

func startTracedFixture(t *testing.T, flags ...string) *tracedFixture {
	t.Helper()
	return startTracedFixtureArgs(t, []string{"--max-concurrent-reconciles", "4"}, flags...)
}

func startTracedFixtureArgs(t *testing.T, args []string, flags ...string) *tracedFixture {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	bin := testkit.Build(t, fixturePkg, flags...)
	truth := filepath.Join(t.TempDir(), "truth.jsonl")
	ctl := testenv.StartProcess(t, "scripted", exec.Command(bin, append([]string{"--kubeconfig", env.Kubeconfig,
		"--ground-truth", truth}, args...)...))

	s := &testkit.Sink{}
	tr, err := tracer.New(tracer.Options{Writer: s, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := tr.TracePID(ctl.PID())
	if err != nil {
		tr.Close()
		t.Fatalf("trace the fixture: %v", err)
	}
	t.Logf("attached %s", plan)
	ctx, cancel := context.WithCancel(context.Background())
	f := &tracedFixture{env: env, ctl: ctl, truth: truth, sink: s, tracer: tr, cancel: cancel, done: make(chan error, 1), clock: tr.Clock()}
	go func() { f.done <- tr.Run(ctx) }()
	t.Cleanup(func() { f.stop(t) })
	return f
}

func (f *tracedFixture) stop(t *testing.T) {
	if f.cancel == nil {
		return
	}
	f.cancel()
	f.cancel = nil
	if err := <-f.done; err != nil {
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
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
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
	deadline := time.Now().Add(60 * time.Second)
	lastN, stableSince := -1, time.Now()
	for time.Now().Before(deadline) {
		recs, _ := groundtruth.ReadFile(path)
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
		if all && time.Since(stableSince) > 1500*time.Millisecond {
			return recs
		}
		time.Sleep(100 * time.Millisecond)
	}
	recs, _ := groundtruth.ReadFile(path)
	t.Fatalf("ground truth did not settle: %d lines", len(recs))
	return nil
}

// wantResult maps the fixture's outcome to the span result reconscope must report.
func wantResult(r groundtruth.Record) span.Result {
	switch r.Outcome {
	case groundtruth.OutcomePanic:
		return span.ResultError // controller-runtime recovers it and returns an error
	}
	return span.Result(r.Outcome)
}

// compare matches spans to ground-truth records one to one by reconcile ID. A span must
// enclose the fixture's own measurement, and last at most slack longer (0: no upper bound;
// under heavy load a goroutine can wait long between the fixture's last clock reading and
// the RET instruction).
func compare(t *testing.T, recs []groundtruth.Record, spans []span.Span, clock ktime.Clock, slack time.Duration) {
	t.Helper()
	byID := map[string]span.Span{}
	for _, s := range spans {
		if s.ReconcileID == "" {
			t.Errorf("span without reconcile ID: %+v", s)
			continue
		}
		if _, dup := byID[s.ReconcileID]; dup {
			t.Errorf("two spans for reconcile %s", s.ReconcileID)
		}
		byID[s.ReconcileID] = s
	}
	if len(spans) != len(recs) {
		t.Errorf("%d spans for %d ground-truth reconciles", len(spans), len(recs))
	}
	for _, r := range recs {
		s, ok := byID[r.ReconcileID]
		if !ok {
			t.Errorf("%s/%s (%s, %s): no span", r.Namespace, r.Name, r.ReconcileID, r.Outcome)
			continue
		}
		var bad []string
		if s.Controller != r.Controller || s.Namespace != r.Namespace || s.Name != r.Name {
			bad = append(bad, fmt.Sprintf("object %s %s/%s", s.Controller, s.Namespace, s.Name))
		}
		if want := wantResult(r); s.Result != want {
			bad = append(bad, fmt.Sprintf("result %s, want %s", s.Result, want))
		}
		wantType := r.ErrorType
		if r.Outcome == groundtruth.OutcomePanic {
			wantType = "*errors.errorString"
		}
		if s.ErrorType != wantType {
			bad = append(bad, fmt.Sprintf("error type %q, want %q", s.ErrorType, wantType))
		}
		switch wantType {
		case "*errors.errorString", "*fmt.wrapError", "*errors.StatusError":
			want := r.Error
			if r.Outcome == groundtruth.OutcomePanic {
				want = fmt.Sprintf("panic: %s [recovered]", r.Panic)
			}
			if s.Error != want && !(strings.HasSuffix(s.Error, "…") && strings.HasPrefix(want, strings.TrimSuffix(s.Error, "…"))) {
				bad = append(bad, fmt.Sprintf("error %q, want %q", s.Error, want))
			}
		}
		if int64(s.RequeueAfter) != r.RequeueAfterNS {
			bad = append(bad, fmt.Sprintf("requeue after %v, want %v", s.RequeueAfter, time.Duration(r.RequeueAfterNS)))
		}
		// The probed frame encloses the fixture's Reconcile: it starts no later and ends no
		// earlier than the fixture measured (1ms slack for the two clocks' readings).
		start := clock.Wall(s.Start)
		end := start.Add(s.Duration)
		if start.After(r.Start.Add(time.Millisecond)) || end.Before(r.End.Add(-time.Millisecond)) {
			bad = append(bad, fmt.Sprintf("span [%s, %s] does not enclose the fixture's [%s, %s]",
				start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), r.Start.Format(time.RFC3339Nano), r.End.Format(time.RFC3339Nano)))
		}
		if slack > 0 && s.Duration > r.End.Sub(r.Start)+slack {
			bad = append(bad, fmt.Sprintf("duration %v, fixture measured %v", s.Duration, r.End.Sub(r.Start)))
		}
		if s.Incomplete {
			bad = append(bad, "marked incomplete")
		}
		if len(bad) > 0 {
			t.Errorf("%s/%s attempt %d (%s): %s", r.Namespace, r.Name, r.Attempt, r.Outcome, strings.Join(bad, "; "))
		}
	}
}

func TestReconcileSpansMatchGroundTruth(t *testing.T) {
	bpftest.Require(t)
	for _, build := range []struct {
		name  string
		flags []string
	}{{"plain", nil}, {"stripped", []string{"-ldflags=-s -w"}}} {
		t.Run(build.name, func(t *testing.T) {
			f := startTracedFixture(t, build.flags...)
			names := make([]string, 0, len(scripts))
			for n := range scripts {
				names = append(names, n)
			}
			sort.Strings(names)
			createScripted(t, f.env, "gt-"+build.name, scripts)
			recs := settle(t, f.truth, names)
			time.Sleep(300 * time.Millisecond) // let the last events drain
			f.stop(t)
			st := f.stats
			if st.Kernel.LostRingBuffer != 0 {
				t.Errorf("lost %d events", st.Kernel.LostRingBuffer)
			}
			spans := f.sink.Snapshot()
			compare(t, recs, spans, f.clock, 500*time.Millisecond)
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
}
