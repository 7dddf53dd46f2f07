package span

import (
	"maps"
	"time"
)

// queueWait is the assembler's part that measures how long an object waited in its work
// queue before a reconcile served it (Span.QueueWait, Span.Backoff): the adds not yet served,
// per object, and the rate-limiter delays being computed. Its state is its own.
type queueWait struct {
	max    int                   // bound on each map (Options.MaxOpen)
	queued map[objectKey]*queued // unserved work-queue adds per object
	// limiting: the key whose rate-limiter delay is being computed, per goroutine, and how
	// deep (a limiter may ask others: MaxOf).
	limiting map[goroutineKey]limiting
}

func newQueueWait(bound int) queueWait {
	return queueWait{max: bound, queued: map[objectKey]*queued{}, limiting: map[goroutineKey]limiting{}}
}

// queued is what the assembler knows of an object waiting in a work queue: the adds not yet
// served by a reconcile.
type queued struct {
	added uint64 // the first such add (monotonic ns)
	// ready is the earliest moment one of them made the object ready (add time plus its delay),
	// when readyKnown. The queue keeps the earliest: an add that is ready now absorbs a
	// delayed one (controller-runtime's priority queue), whichever came first.
	ready      uint64
	readyKnown bool
	// limited counts rate-limited adds whose delay the rate limiter has not yet been seen
	// to give.
	limited int
	// triggers says why each add happened.
	triggers triggerSet
}

type limiting struct {
	key   objectKey
	depth int
}

func (q *queued) readyAt(t uint64) {
	if !q.readyKnown || t < q.ready {
		q.ready, q.readyKnown = t, true
	}
}

// entry returns the adds of object ok waiting to be served, made at time t if there were
// none; nil when there is no room for another object.
func (w *queueWait) entry(ok objectKey, t uint64) *queued {
	q := w.queued[ok]
	if q == nil {
		if len(w.queued) >= w.max {
			return nil
		}
		q = &queued{added: t}
		w.queued[ok] = q
	}
	return q
}

// add records the work-queue add e. A delayed add (After) is ready at its time plus the
// delay; a rate-limited one when its rate limiter says (QueueLimitEnd), or, with an After
// too, at the earlier of the two (as controller-runtime's priority queue does).
func (q *queued) add(e *Event) {
	if e.RateLimited {
		q.limited++
		if e.RequeueAfter > 0 {
			q.readyAt(e.Time + uint64(e.RequeueAfter))
		}
		return
	}
	q.readyAt(e.Time + uint64(max(e.RequeueAfter, 0)))
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
	if q := w.queued[l.key]; q != nil && q.limited > 0 {
		q.limited--
		q.readyAt(e.Time + uint64(max(e.RequeueAfter, 0)))
	}
}

// serve gives s, a reconcile of the object ok that began at s.Start, the wait of the adds it
// serves: those that made the object ready by then. An object not ready yet at the start is
// another queue's (one process may run controllers whose keys coincide) or its ready add was
// not seen: its adds stay for a later reconcile. An object whose only adds are rate-limited
// ones whose delay was not seen (a rate limiter reconscope does not probe) is served too: all
// its wait counts as backoff, for its ready time is not known.
func (w *queueWait) serve(o *openSpan, ok objectKey) {
	s := &o.span
	q := w.queued[ok]
	if q == nil {
		return
	}
	switch {
	case q.readyKnown && q.ready <= s.Start:
		s.QueueWait = time.Duration(s.Start - q.ready)
		if q.ready > q.added {
			s.Backoff = time.Duration(q.ready - q.added)
		}
	case !q.readyKnown && q.added <= s.Start:
		s.Backoff = time.Duration(s.Start - q.added)
	default:
		return
	}
	o.triggers = q.triggers
	delete(w.queued, ok)
}

// expire forgets the adds no reconcile served within after of monotonic time now (another
// controller's queue).
func (w *queueWait) expire(now uint64, after time.Duration) {
	for k, q := range w.queued {
		ref := q.added
		if q.readyKnown {
			ref = q.ready
		}
		if now > ref && time.Duration(now-ref) > after {
			delete(w.queued, k)
		}
	}
}

// processExited forgets process pid's adds and limiters.
func (w *queueWait) processExited(pid uint32) {
	maps.DeleteFunc(w.queued, func(k objectKey, _ *queued) bool { return k.pid == pid })
	maps.DeleteFunc(w.limiting, func(k goroutineKey, _ limiting) bool { return k.pid == pid })
}
