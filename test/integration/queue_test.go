package integration

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// truthOf waits until the ground truth has n records of object name, and returns them in
// attempt order.
func truthOf(t *testing.T, path, name string, n int, timeout time.Duration) []groundtruth.Record {
	t.Helper()
	var mine []groundtruth.Record
	testkit.WaitFor(t, fmt.Sprintf("%d reconciles of %s in the ground truth", n, name), timeout, func() (bool, string) {
		recs, _ := groundtruth.ReadFile(path)
		mine = mine[:0]
		for _, r := range recs {
			if r.Name == name {
				mine = append(mine, r)
			}
		}
		return len(mine) >= n, fmt.Sprintf("%d of them", len(mine))
	})
	sort.Slice(mine, func(i, j int) bool { return mine[i].Start.Before(mine[j].Start) })
	return mine
}

// spanOf is the span of the reconcile the fixture recorded as r.
func spanOf(t *testing.T, spans []span.Span, r groundtruth.Record) span.Span {
	t.Helper()
	for _, s := range spans {
		if s.ReconcileID == r.ReconcileID {
			return s
		}
	}
	t.Fatalf("no span for reconcile %s of %s (attempt %d)", r.ReconcileID, r.Name, r.Attempt)
	return span.Span{}
}

// touch changes a label of a ConfigMap: a watch event, so a plain add to the work queue.
func touch(t *testing.T, c client.Client, ns, name, value string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["touched"] = value
	if err := c.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// TestQueueWaitAbsorbedDelay: a reconcile returns RequeueAfter 2s (a delayed add); half a
// second later a change of the object adds it again, ready now: controller-runtime's priority
// queue makes the waiting item ready and the reconcile it hands out serves both adds (no
// reconcile comes at 2s). A later change's reconcile must report only its own short wait,
// not the time since the absorbed delay would have ended.
func TestQueueWaitAbsorbedDelay(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	f := startTracedFixture(t)
	const ns, name = "queue-absorb", "absorb"
	createScripted(t, f.env, ns, map[string]string{name: "times:1;requeue-after:2s"})
	first := truthOf(t, f.truth, name, 1, 60*time.Second)[0]
	time.Sleep(time.Until(first.End.Add(500 * time.Millisecond)))
	touch(t, f.env.Client, ns, name, "1")
	truthOf(t, f.truth, name, 2, 10*time.Second)
	time.Sleep(time.Until(first.End.Add(3500 * time.Millisecond)))
	touch(t, f.env.Client, ns, name, "2")
	truthOf(t, f.truth, name, 3, 10*time.Second)
	time.Sleep(time.Second) // nothing else comes; let the last events drain
	recs := truthOf(t, f.truth, name, 3, time.Second)
	if len(recs) != 3 {
		t.Fatalf("%d reconciles, want 3 (the delayed add absorbed): %+v", len(recs), recs)
	}
	f.stop(t)
	spans := f.sink.Snapshot()
	for i, r := range recs {
		s := spanOf(t, spans, r)
		t.Logf("reconcile %d at +%v: queue wait %v, backoff %v", i+1, r.Start.Sub(first.Start).Round(time.Millisecond), s.QueueWait, s.Backoff)
		if i == 0 {
			continue
		}
		// A change's reconcile starts within milliseconds of its add on an idle controller.
		if s.QueueWait > 300*time.Millisecond {
			t.Errorf("reconcile %d (a change's, served at once): queue wait %v, want < 300ms", i+1, s.QueueWait)
		}
		if i == 2 && s.Backoff != 0 {
			t.Errorf("reconcile 3 (a plain add): backoff %v, want 0", s.Backoff)
		}
	}
	// The second reconcile served the absorbed delayed add too: its backoff is the time from
	// that add (the first reconcile's return) to the change, about 500ms.
	if s := spanOf(t, spans, recs[1]); s.Backoff < 300*time.Millisecond || s.Backoff > 1500*time.Millisecond {
		t.Errorf("reconcile 2: backoff %v, want about 500ms (the absorbed RequeueAfter's add until the change)", s.Backoff)
	}
}

// TestQueueWaitRateLimitedBackoff: after each error controller-runtime re-adds the object rate
// limited; the default limiter's backoff is 5ms·2ⁿ. The backoff is reported as backoff, and
// the queue wait is only the time the object was ready in the queue.
func TestQueueWaitRateLimitedBackoff(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	f := startTracedFixture(t)
	const ns, name, errors = "queue-backoff", "backoff", 6
	createScripted(t, f.env, ns, map[string]string{name: fmt.Sprintf("times:%d;error", errors)})
	recs := truthOf(t, f.truth, name, errors+1, 60*time.Second)
	time.Sleep(500 * time.Millisecond)
	f.stop(t)
	spans := f.sink.Snapshot()
	for i := 1; i <= errors; i++ {
		s := spanOf(t, spans, recs[i])
		delay := 5 * time.Millisecond << (i - 1) // the exponential limiter's n-th delay
		gap := recs[i].Start.Sub(recs[i-1].End)
		t.Logf("reconcile %d: %v after the previous error's return; backoff %v, queue wait %v (limiter: %v)", i+1, gap.Round(time.Microsecond), s.Backoff, s.QueueWait, delay)
		if s.Backoff < delay || s.Backoff > delay+100*time.Millisecond {
			t.Errorf("reconcile %d: backoff %v, want the limiter's %v (plus the queue's own latency)", i+1, s.Backoff, delay)
		}
		// Backoff and queue wait are two parts of the gap between the return and the next
		// start, which do not overlap: a queue wait that counted the backoff would exceed the
		// gap by the backoff (at least the limiter's 5ms). A busy machine may lengthen either
		// part, never their sum beyond the gap (2ms: the two clocks read apart).
		if sum := s.Backoff + s.QueueWait; sum > gap+2*time.Millisecond {
			t.Errorf("reconcile %d: backoff %v + queue wait %v = %v, more than the %v from the previous return to this start: the queue wait counts the backoff", i+1, s.Backoff, s.QueueWait, sum, gap)
		}
	}
}

// TestCacheReadOutcome: a cache read of an object that is there is a hit (with its UID), of
// one that is not there not_found, never a bare status 0 like a hit.
func TestCacheReadOutcome(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	f := startTracedFixture(t)
	const ns, name = "cache-outcome", "reader"
	ctx := context.Background()
	createScripted(t, f.env, ns, nil)
	present := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "present"}}
	if err := f.env.Client.Create(ctx, present); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Annotations: map[string]string{"scripted.reconscope.io/script": "times:1;get:configmap/present;get:configmap/absent"}}}
	if err := f.env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	rec := truthOf(t, f.truth, name, 1, 60*time.Second)[0]
	time.Sleep(500 * time.Millisecond)
	f.stop(t)
	s := spanOf(t, f.sink.Snapshot(), rec)
	want := map[string]string{"present": span.OutcomeHit, "absent": span.OutcomeNotFound}
	got := map[string]int{}
	for _, c := range s.Calls {
		if c.Kind != span.CallCacheGet {
			continue
		}
		t.Logf("cache get %s/%s: outcome %q status %d error %q uid %q", c.Namespace, c.Name, c.Outcome, c.Status, c.Error, c.UID)
		w, ok := want[c.Name]
		if !ok {
			if c.Name == name && c.Outcome != span.OutcomeHit {
				t.Errorf("the reconciled object's own read: outcome %q, want hit", c.Outcome)
			}
			continue
		}
		got[c.Name]++
		if c.Outcome != w {
			t.Errorf("cache get of %s: outcome %q, want %q", c.Name, c.Outcome, w)
		}
		if c.Name == "present" && c.UID != string(present.UID) {
			t.Errorf("cache get of present: uid %q, want %q", c.UID, present.UID)
		}
	}
	for n := range want {
		if got[n] != 1 {
			t.Errorf("%d cache gets of %s, want 1", got[n], n)
		}
	}
}
