package span

import (
	"maps"
	"slices"
	"time"
)

// queueWait is the assembler's part that measures how long an object waited in its work
// queue before a reconcile served it (Span.QueueWait, Span.Backoff): the adds not yet served,
// per object and queue, and the rate-limiter delays being computed. Its state is its own.
//
// One process often has several queues of the same keys: kube-controller-manager's
// serviceaccount and root_ca_cert_publisher controllers both queue a namespace's name, its
// deployment, disruption and endpoint controllers a Deployment's and its Service's. An add is
// therefore kept with its queue (Event.QueueID: the queue the add was made on, the one a
// work-queue item's Done names) and served by a reconcile of that queue; a reconcile whose
// queue is not known (0: controller-runtime's Reconcile, which does not see its queue) is
// served by the first of its object's queues that made it ready, and an add whose queue is
// not known by a reconcile of any queue.
type queueWait struct {
	max    int                     // bound on each map (Options.MaxOpen)
	queued map[objectKey][]*queued // unserved work-queue adds per object, one per queue
	// limiting: the key whose rate-limiter delay is being computed, per goroutine, and how
	// deep (a limiter may ask others: MaxOf).
	limiting map[goroutineKey]limiting
}

func newQueueWait(bound int) queueWait {
	return queueWait{max: bound, queued: map[objectKey][]*queued{}, limiting: map[goroutineKey]limiting{}}
}

// queued is what the assembler knows of an object waiting in one work queue: the adds not
// yet served by a reconcile, in the order they came. Each is kept apart: a reconcile serves
// the adds made by its start, and those made while it runs (its own writes' watch events,
// which put its key back) are the next reconcile's, though the reconcile of a work-queue item
// is known only at its end (Done).
type queued struct {
	queue uint64 // the queue (Event.QueueID), 0 when not known
	adds  []pendingAdd
}

// maxPendingAdds bounds an object's adds kept apart in one queue; the last absorbs the later
// ones (its ready time the earliest, its triggers dropped but counted).
const maxPendingAdds = 2 * MaxTriggers

// pendingAdd is one add (or, the last of a full queued, several) not yet served.
type pendingAdd struct {
	time uint64 // when it was made (monotonic ns)
	// ready is when it made the object ready (its time plus its delay), when readyKnown. Of
	// several adds the queue keeps the earliest: an add that is ready now absorbs a delayed
	// one (controller-runtime's priority queue), whichever came first.
	ready      uint64
	readyKnown bool
	// limited counts its rate-limited adds whose delay the rate limiter has not yet been seen
	// to give.
	limited int
	// trigger says why it happened; more counts the adds it absorbed, whose triggers are
	// dropped.
	trigger Trigger
	more    int
}

type limiting struct {
	key   objectKey
	depth int
}

func (a *pendingAdd) readyAt(t uint64) {
	if !a.readyKnown || t < a.ready {
		a.ready, a.readyKnown = t, true
	}
}

// entry returns the adds of object ok waiting in queue to be served, a new empty one if there
// were none; nil when there is no room for another object.
func (w *queueWait) entry(ok objectKey, queue uint64) *queued {
	qs := w.queued[ok]
	for _, q := range qs {
		if q.queue == queue {
			return q
		}
	}
	if qs == nil && len(w.queued) >= w.max {
		return nil
	}
	q := &queued{queue: queue}
	w.queued[ok] = append(qs, q)
	return q
}

// add records the work-queue add e, made for trigger. A delayed add (After) is ready at its
// time plus the delay; a rate-limited one when its rate limiter says (QueueLimitEnd), or, with
// an After too, at the earlier of the two (as controller-runtime's priority queue does).
func (q *queued) add(e *Event, trigger Trigger) {
	var a *pendingAdd
	if len(q.adds) < maxPendingAdds {
		q.adds = append(q.adds, pendingAdd{time: e.Time, trigger: trigger})
		a = &q.adds[len(q.adds)-1]
	} else {
		a = &q.adds[len(q.adds)-1]
		a.more++
	}
	if e.RateLimited {
		a.limited++
		if e.RequeueAfter > 0 {
			a.readyAt(e.Time + uint64(e.RequeueAfter))
		}
		return
	}
	a.readyAt(e.Time + uint64(max(e.RequeueAfter, 0)))
}

// limitStart: goroutine k's rate limiter computes the delay of e's object.
func (w *queueWait) limitStart(k goroutineKey, e *Event) {
	ok := objectKey{pid: e.PID, namespace: e.Namespace, name: e.Name}
	if l, found := w.limiting[k]; found && l.key == ok {
		l.depth++
		w.limiting[k] = l
	} else if found || len(w.limiting) < w.max {
		w.limiting[k] = limiting{key: ok, depth: 1}
	}
}

// limitEnd: goroutine k's rate limiter gave its delay (e.RequeueAfter).
func (w *queueWait) limitEnd(k goroutineKey, e *Event) {
	l, found := w.limiting[k]
	if !found {
		return
	}
	if l.depth > 1 { // an inner limiter's answer: the outermost one counts
		l.depth--
		w.limiting[k] = l
		return
	}
	delete(w.limiting, k)
	// A rate limiter does not see its queue: its delay goes to the first add of the object
	// that waits for one, in whichever queue (two queues rarely back off one key at the same
	// moment).
	for _, q := range w.queued[l.key] {
		for i := range q.adds {
			if a := &q.adds[i]; a.limited > 0 {
				a.limited--
				a.readyAt(e.Time + uint64(max(e.RequeueAfter, 0)))
				return
			}
		}
	}
}

// serve gives s, a reconcile of the object ok from queue (0: not known) that began at
// s.Start, the wait and triggers of the adds it serves: those of its queue (or of a queue not
// known) made by its start, when they made the object ready by then; of a reconcile whose
// queue is not known, those of the first of the object's queues that did. Adds not ready yet
// at the start are another reconcile's or their ready add was not seen: they stay for a later
// reconcile, as do the adds made after the start. An object whose only adds are rate-limited
// ones whose delay was not seen (a rate limiter reconscope does not probe) is served too: all
// its wait counts as backoff, for its ready time is not known.
func (w *queueWait) serve(o *openSpan, ok objectKey, queue uint64) {
	qs := w.queued[ok]
	for _, exact := range []bool{true, false} {
		for i, q := range qs {
			if (exact && q.queue != queue) || (!exact && queue != 0 && q.queue != 0) {
				continue
			}
			if q.serve(o) {
				if len(q.adds) > 0 {
					return
				}
				if qs = slices.Delete(qs, i, i+1); len(qs) == 0 {
					delete(w.queued, ok)
				} else {
					w.queued[ok] = qs
				}
				return
			}
		}
	}
}

// serve gives o the wait and triggers of q's adds made by its start, when they made its object
// ready by then, takes them out of q and says whether it did.
func (q *queued) serve(o *openSpan) bool {
	s := &o.span
	n := 0 // the adds made by the start
	for n < len(q.adds) && q.adds[n].time <= s.Start {
		n++
	}
	if n == 0 {
		return false
	}
	var first pendingAdd // what the n adds add up to
	first.time = q.adds[0].time
	for _, a := range q.adds[:n] {
		if a.readyKnown {
			first.readyAt(a.ready)
		}
	}
	switch {
	case first.readyKnown && first.ready <= s.Start:
		s.QueueWait = time.Duration(s.Start - first.ready)
		if first.ready > first.time {
			s.Backoff = time.Duration(first.ready - first.time)
		}
	case !first.readyKnown:
		s.Backoff = time.Duration(s.Start - first.time)
	default:
		return false
	}
	var ts triggerSet
	for _, a := range q.adds[:n] {
		ts.add(a.trigger)
		ts.dropped += a.more
	}
	o.triggers = ts
	q.adds = slices.Delete(q.adds, 0, n)
	return true
}

// expire forgets the adds no reconcile served within after of monotonic time now (another
// controller's queue).
func (w *queueWait) expire(now uint64, after time.Duration) {
	for k, qs := range w.queued {
		qs = slices.DeleteFunc(qs, func(q *queued) bool {
			q.adds = slices.DeleteFunc(q.adds, func(a pendingAdd) bool {
				ref := a.time
				if a.readyKnown {
					ref = a.ready
				}
				return now > ref && time.Duration(now-ref) > after
			})
			return len(q.adds) == 0
		})
		if len(qs) == 0 {
			delete(w.queued, k)
		} else {
			w.queued[k] = qs
		}
	}
}

// processExited forgets process pid's adds and limiters.
func (w *queueWait) processExited(pid uint32) {
	maps.DeleteFunc(w.queued, func(k objectKey, _ []*queued) bool { return k.pid == pid })
	maps.DeleteFunc(w.limiting, func(k goroutineKey, _ limiting) bool { return k.pid == pid })
}
