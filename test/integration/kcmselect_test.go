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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	selected, err := discovery.NewControllers([]string{"deployment"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	catalog, left := probes.SelectSyncHandlers(probes.Catalog, selected.Selects)
	if !slices.Contains(left, "sync/replicaset") || slices.Contains(left, "sync/deployment") {
		t.Fatalf("sync handlers left out: %v, want sync/replicaset and not sync/deployment", left)
	}
	var (
		tr   *tracer.Tracer
		sink *testkit.Sink
		stop func() error
	)
	env := testenv.Start(t, testenv.Options{
		ControllerManager:         []string{"*"},
		StrippedControllerManager: true,
		ControllerManagerFlags:    []string{"--authorization-always-allow-paths=/healthz,/metrics"},
		BeforeControllerManager: func(path string) {
			tracer, s, plan := testenv.TraceExeWith(t, ctx, path, tracer.Options{Controllers: selected, Catalog: catalog})
			probesAttached := plan.Probes()
			if !slices.Contains(probesAttached, "sync/deployment") || slices.Contains(probesAttached, "sync/replicaset") {
				t.Errorf("probes attached: %s; want sync/deployment and not sync/replicaset", probesAttached)
			}
			tr, sink, stop = tracer, s, testkit.Go(t, tracer.Run)
		},
	})
	defer tr.Close()

	kcmWorkload(t, env.Client)

	var counts map[string]uint64
	testkit.WaitFor(t, "a quiet moment of kube-controller-manager's work queues", 90*time.Second, func() (bool, string) {
		before, err := queueCounts(env.ControllerManagerURL)
		if err != nil {
			return false, err.Error()
		}
		time.Sleep(1500 * time.Millisecond) // the spans of the items done by then are read
		after, err := queueCounts(env.ControllerManagerURL)
		if err != nil {
			return false, err.Error()
		}
		counts = after
		for q, n := range after {
			if before[q] != n {
				return false, fmt.Sprintf("queue %s: %d items done, then %d", q, before[q], n)
			}
		}
		return true, ""
	})
	spans := sink.Snapshot()
	st := tr.Stats()
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
