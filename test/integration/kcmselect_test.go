package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestKubeControllerManagerSelectController traces the test bed's stripped
// kube-controller-manager (all its default controllers) from its exec with the controller
// choice of `trace --controller deployment`, under TestKubeControllerManagerQueues' workload.
// Every span must be a deployment span, as many as its own
// workqueue_work_duration_seconds_count{name="deployment"}; the other queues' items must have
// been skipped: the kernel's counter of early exits is above zero, and kernel and agent
// together skipped at least every item of the other named queues that had work. The
// replicaset sync handler is not attached, the deployment one is.
func TestKubeControllerManagerSelectController(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	selected, err := discovery.NewControllers([]string{"deployment"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	catalog, left := probes.SelectSyncHandlers(probes.Catalog(), selected.Selects)
	if !slices.Contains(left, "sync/replicaset") || slices.Contains(left, "sync/deployment") {
		t.Fatalf("sync handlers left out: %v, want sync/replicaset and not sync/deployment", left)
	}
	env, tr, sink, stop := traceControllerManager(t, ctx, tracer.Options{Controllers: selected, Catalog: catalog}, func(plan *probes.Plan) {
		if attached := plan.Probes(); !slices.Contains(attached, "sync/deployment") || slices.Contains(attached, "sync/replicaset") {
			t.Errorf("probes attached: %s; want sync/deployment and not sync/replicaset", attached)
		}
	})
	defer tr.Close()

	kcmWorkload(t, env.Client)

	var spans []span.Span
	var st tracer.Stats
	counts := waitQueuesQuiet(t, "kube-controller-manager", env.ControllerManagerURL, 90*time.Second, func() error {
		spans = spansOf(sink.Snapshot(), env.ControllerManagerPID)
		st = tr.Stats()
		return nil
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	others := map[string]int{}
	deployment := 0
	for _, sp := range spans {
		if sp.Controller == "deployment" {
			deployment++
		} else {
			others[sp.Controller]++
		}
	}
	if len(others) > 0 {
		t.Errorf("spans of controllers not selected: %v", others)
	}
	if uint64(deployment) != counts["deployment"] || deployment == 0 {
		t.Errorf("deployment: %d items done (its workqueue_work_duration_seconds_count), %d spans", counts["deployment"], deployment)
	}
	var excludedItems uint64
	var busy []string
	for q, n := range counts {
		if q == "deployment" || handedOff[q] || n == 0 {
			continue
		}
		excludedItems += n
		busy = append(busy, fmt.Sprintf("%s=%d", q, n))
	}
	slices.Sort(busy)
	t.Logf("deployment: %d items, %d spans; other named queues' items: %d (%s)", counts["deployment"], deployment, excludedItems, strings.Join(busy, " "))
	t.Logf("skipped: %d by the kernel (no record), %d by the agent; records read: %d; kernel hits %d",
		st.Kernel.Excluded, st.Excluded, st.Reader.Events, st.Kernel.Hits)
	if counts["replicaset"] == 0 {
		t.Errorf("queue replicaset had no work: nothing to exclude")
	}
	if st.Kernel.Excluded == 0 {
		t.Errorf("the kernel skipped no item of an excluded controller (counter excluded = 0)")
	}
	if st.Kernel.Excluded+st.Excluded < excludedItems {
		t.Errorf("%d items of excluded named queues done, but only %d skipped by the kernel and %d by the agent",
			excludedItems, st.Kernel.Excluded, st.Excluded)
	}
}

// traceControllerManager starts the test bed with its stripped kube-controller-manager running
// all its controllers, traced from its exec by a tracer of opts (testenv.TraceExeWith), whose
// plan attached goes to attached. It returns the test bed, the running tracer, its sink and
// the function that stops its Run.
func traceControllerManager(t *testing.T, ctx context.Context, opts tracer.Options, attached func(*probes.Plan)) (*testenv.Env, *tracer.Tracer, *testkit.Sink, func() error) {
	t.Helper()
	env, tracers := traceControllerManagerBy(t, ctx, []tracer.Options{opts}, func(_ int, plan *probes.Plan) { attached(plan) })
	return env, tracers[0].tr, tracers[0].sink, tracers[0].stop
}

// runningTracer is a tracer whose Run runs, its sink and the function that stops its Run.
type runningTracer struct {
	tr   *tracer.Tracer
	sink *testkit.Sink
	stop func() error
}

// traceControllerManagerBy is traceControllerManager with one tracer of each of opts, all
// attached from the exec; attached is given each one's index and plan.
func traceControllerManagerBy(t *testing.T, ctx context.Context, opts []tracer.Options, attached func(int, *probes.Plan)) (*testenv.Env, []runningTracer) {
	t.Helper()
	tracers := make([]runningTracer, len(opts))
	env := testenv.Start(t, testenv.Options{
		ControllerManager:         []string{"*"},
		StrippedControllerManager: true,
		ControllerManagerFlags:    []string{"--authorization-always-allow-paths=/healthz,/metrics"},
		BeforeControllerManager: func(path string) {
			for i, o := range opts {
				traced, s, plan := testenv.TraceExeWith(t, ctx, path, o)
				attached(i, plan)
				tracers[i] = runningTracer{traced, s, testkit.Go(t, traced.Run)}
			}
		},
	})
	return env, tracers
}
