package integration

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// TestKubeControllerManagerDetailsAgree traces the test bed's stripped kube-controller-manager
// with all its default controllers from its exec by two tracers at once, one at detail
// reconcile (the default: the work-queue item's bracket and what its worker did with it, the
// sync handlers left out) and one at detail calls (the sync handlers and the API calls too),
// while kcmWorkload runs. Both see the same reconciles: each span of one has exactly one span
// of the other with the same controller, object and goroutine, the one at calls starting inside
// the one at reconcile (a work-queue item's span starts at its handler's entry at calls, at
// Get's return at reconcile), the same result and the same queue wait (within a millisecond,
// once the two starts' difference is taken out), though keys of several queues coincide; the
// work queues' own metrics are the ground truth of both (checkQueueSpans). What reconcile
// detail gives up for kube-controller-manager is what the handler says: the error's type and
// message, and, from the lister read at calls, the object's UID. Its result is what the worker
// did with the item (AddRateLimited: error; AddAfter: requeue after its delay; else success),
// which is the result at calls too unless the handler failed: then calls says error (with the
// error), reconcile what the worker did.
func TestKubeControllerManagerDetailsAgree(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	details := []probes.Detail{probes.DetailReconcile, probes.DetailCalls}
	env, tracers := traceControllerManagerBy(t, ctx, []tracer.Options{
		{Catalog: details[0].Catalog(probes.Catalog())}, {Catalog: details[1].Catalog(probes.Catalog())},
	}, func(i int, plan *probes.Plan) { t.Logf("detail %s: attached %s", details[i], plan) })
	rec, calls := tracers[0], tracers[1]
	defer rec.tr.Close()
	defer calls.tr.Close()

	kcmWorkload(t, env.Client)
	var recSpans, callsSpans []span.Span
	counts := waitQueuesQuiet(t, "kube-controller-manager", env.ControllerManagerURL, 90*time.Second, func() error {
		recSpans = spansOf(rec.sink.Snapshot(), env.ControllerManagerPID)
		callsSpans = spansOf(calls.sink.Snapshot(), env.ControllerManagerPID)
		return nil
	})
	for _, x := range tracers {
		if err := x.stop(); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("reconcile", func(t *testing.T) { checkQueueSpans(t, env.ControllerManagerURL, counts, recSpans) })
	t.Run("calls", func(t *testing.T) { checkQueueSpans(t, env.ControllerManagerURL, counts, callsSpans) })

	// Each span at calls is paired with the span at reconcile of the same controller, object
	// and goroutine whose start is nearest to its own.
	type key struct {
		controller, namespace, name string
		goid                        int64
	}
	byKey := map[key][]int{}
	for i, s := range recSpans {
		k := key{s.Controller, s.Namespace, s.Name, s.Goid}
		byKey[k] = append(byKey[k], i)
	}
	paired := make([]bool, len(recSpans))
	var worstStart, worstWait time.Duration
	same, handlerErrors, results := 0, 0, map[string]int{}
	for _, c := range callsSpans {
		k := key{c.Controller, c.Namespace, c.Name, c.Goid}
		best, bestD := -1, time.Duration(0)
		for _, i := range byKey[k] {
			if paired[i] {
				continue
			}
			// The span at calls starts where its handler began, inside the item that is the
			// span at reconcile (Get's return to Done), give or take a millisecond for the two
			// tracers' clock reads at one hit.
			r := recSpans[i]
			if c.Start+uint64(time.Millisecond) < r.Start || c.Start > r.Start+uint64(r.Duration+time.Millisecond) {
				continue
			}
			if d := absDuration(time.Duration(int64(r.Start) - int64(c.Start))); best < 0 || d < bestD {
				best, bestD = i, d
			}
		}
		if best < 0 {
			t.Errorf("%s %s/%s (goroutine %d, %s, started at %d ns): a span at detail calls, none at detail reconcile", c.Controller, c.Namespace, c.Name, c.Goid, c.Result, c.Start)
			continue
		}
		paired[best] = true
		r := recSpans[best]
		worstStart = max(worstStart, bestD)
		// At calls the span starts at the handler's entry, after Get's return where it starts at
		// reconcile: its wait is longer by as much.
		dw := absDuration(c.QueueWait - r.QueueWait - time.Duration(int64(c.Start)-int64(r.Start)))
		worstWait = max(worstWait, dw)
		results[fmt.Sprintf("%s→%s", c.Result, r.Result)]++ // before a handler's error is set aside
		if c.ErrorType != "" && r.Result != c.Result {
			// The handler failed: detail calls says so, detail reconcile what the worker did
			// with the item (AddRateLimited: error; kube-controller-manager's namespace
			// controller waits for what remains with an AddAfter, its deployment controller
			// drops errors of a terminating namespace).
			handlerErrors++
			c.Result, c.RequeueAfter = r.Result, r.RequeueAfter
		}
		if r.Result != c.Result || r.RequeueAfter != c.RequeueAfter || dw > time.Millisecond {
			t.Errorf("%s %s/%s (goroutine %d): detail reconcile %s (after %v) waited %v, detail calls %s (after %v, %s %q) waited %v",
				c.Controller, c.Namespace, c.Name, c.Goid, r.Result, r.RequeueAfter, r.QueueWait, c.Result, c.RequeueAfter, c.ErrorType, c.Error, c.QueueWait)
			continue
		}
		same++
	}
	for i, r := range recSpans {
		if !paired[i] {
			t.Errorf("%s %s/%s (goroutine %d, %s, started at %d ns): a span at detail reconcile, none at detail calls", r.Controller, r.Namespace, r.Name, r.Goid, r.Result, r.Start)
		}
	}
	var pairs []string
	for p, n := range results {
		pairs = append(pairs, fmt.Sprintf("%s %d", p, n))
	}
	sort.Strings(pairs)
	t.Logf("%d spans at detail reconcile, %d at detail calls, %d the same (result, requeue delay, queue wait; %d whose handler failed and whose worker did not retry them compared by queue wait only); results calls→reconcile: %v; starts at most %v apart, queue waits %v (the starts' difference taken out)",
		len(recSpans), len(callsSpans), same, handlerErrors, pairs, worstStart, worstWait)
	if same == 0 {
		t.Error("no span the same at both details")
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
