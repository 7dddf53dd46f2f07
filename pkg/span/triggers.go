package span

import (
	"maps"
	"time"
)

// What a watch event did to its object (Event.Watch, Trigger.Event).
const (
	WatchAdd    = "add"
	WatchUpdate = "update"
	WatchDelete = "delete"
	// WatchResync is an update whose old and new objects are one version: an informer's
	// periodic resync.
	WatchResync = "resync"
)

// TriggerKind says why an object was added to its work queue.
type TriggerKind string

// Trigger kinds (the JSON contract's triggers[].kind).
const (
	// TriggerEvent: an informer delivered a watch event of the object itself.
	TriggerEvent TriggerKind = "event"
	// TriggerMapped: a watch event of another object was mapped to this one (controller-runtime's
	// Owns, Watches with a map function; a client-go handler enqueueing an owner): Object is
	// the event's object, not the enqueued one.
	TriggerMapped TriggerKind = "mapped"
	// TriggerResync: an informer's periodic resync delivered the object again.
	TriggerResync TriggerKind = "resync"
	// TriggerRetry: the worker put the object back after an error (a rate-limited add).
	TriggerRetry TriggerKind = "retry"
	// TriggerRequeue: the worker put it back because the reconcile asked (Result.Requeue).
	TriggerRequeue TriggerKind = "requeue"
	// TriggerRequeueAfter: the worker put it back after a delay (Result.RequeueAfter, AddAfter).
	TriggerRequeueAfter TriggerKind = "requeue_after"
	// TriggerOther: an add on a goroutine that was neither delivering a probed watch event nor
	// the object's worker (a timer, a handler type reconscope does not probe, another worker).
	TriggerOther TriggerKind = "other"
)

// MaxTriggers bounds the triggers a span lists: the first MaxTriggers adds it served, in
// order; Span.TriggersDropped counts the rest.
const MaxTriggers = 8

// WriterUntraced is a trigger's Writer when no traced write of the event's version was seen
// on this node.
const WriterUntraced = "untraced"

// ObjectRef names one version of a Kubernetes object.
type ObjectRef struct {
	Kind, Namespace, Name, UID, ResourceVersion string
}

// Trigger is one add a reconcile served: why its object was put in the work queue.
type Trigger struct {
	Kind TriggerKind
	// Event is what the watch event did (WatchAdd, WatchUpdate, WatchDelete, WatchResync),
	// for event, mapped and resync triggers; "" otherwise.
	Event string
	// Object is the watch event's object (for a mapped trigger another object than the span's),
	// as the informer delivered it; empty for requeues. Its UID and ResourceVersion are empty
	// when the object was not a typed Kubernetes object (an Unstructured, a delete the watch
	// missed).
	Object ObjectRef
	// Writer is the controller whose write made that version, when a traced process on this
	// node was seen writing it (by the time the reconcile ended), else WriterUntraced; ""
	// for requeues.
	Writer string
	// Function is, for an add of kind other, the function that added (past the queue's own
	// code, in WorkerName's short form: "main.resyncAll"), "" when not read.
	Function string
	// Time is when the add happened (monotonic ns).
	Time uint64
	// writeEnd is when the writer's write returned (monotonic ns), and writerPID its
	// process, when Writer is known.
	writeEnd  uint64
	writerPID uint32
}

// triggerSet is the triggers of the adds not yet served, bounded.
type triggerSet struct {
	list    []Trigger
	dropped int
	// lastEvent is the most recent watch-event trigger (event, mapped, resync), dropped or not.
	lastEvent    Trigger
	hasLastEvent bool
}

func (t *triggerSet) add(tr Trigger) {
	if len(t.list) < MaxTriggers {
		t.list = append(t.list, tr)
	} else {
		t.dropped++
	}
	if tr.Object.Kind != "" || tr.Event != "" {
		t.lastEvent, t.hasLastEvent = tr, true
	}
}

// delivery is a watch event being delivered on a goroutine.
type delivery struct {
	watch  string
	object ObjectRef
	time   uint64
}

// ended is the last span that ended on a worker goroutine: controller-runtime puts the object
// back (AddRateLimited, AddAfter) right after its Reconcile returned, on that goroutine.
type ended struct {
	key    objectKey
	result Result
}

// triggers follows what each goroutine is doing when it adds to a work queue, so that every
// add says why (Trigger): the watch event a goroutine is delivering (from the handler's entry
// until the next event it delivers: an informer's listener goroutine delivers nothing else),
// the span a worker is running or has just ended, and the requeues a client-go worker asked of
// a delaying queue, whose add comes later from the queue's own goroutine.
type triggers struct {
	max        int
	delivering map[goroutineKey]delivery
	ended      map[goroutineKey]ended
	expected   map[objectKey]expectedAdd
}

// expectedAdd is a requeue a client-go worker asked for when its item ended at time at.
type expectedAdd struct {
	kind TriggerKind
	at   uint64
}

func newTriggers(max int) *triggers {
	return &triggers{max: max, delivering: map[goroutineKey]delivery{}, ended: map[goroutineKey]ended{}, expected: map[objectKey]expectedAdd{}}
}

// watchEvent remembers the event goroutine k is delivering.
func (t *triggers) watchEvent(k goroutineKey, e *Event) {
	if _, ok := t.delivering[k]; ok || len(t.delivering) < t.max {
		t.delivering[k] = delivery{watch: e.Watch, object: e.Object, time: e.Time}
	}
}

// spanEnded remembers the span s that ended on goroutine k, and, when its worker asked a
// client-go queue to put the item back (requeue: the kind), expects that add.
func (t *triggers) spanEnded(k goroutineKey, s *Span, requeue TriggerKind, at uint64) {
	if s.Name == "" {
		return
	}
	ok := objectKey{pid: s.PID, namespace: s.Namespace, name: s.Name}
	if _, found := t.ended[k]; found || len(t.ended) < t.max {
		t.ended[k] = ended{key: ok, result: s.Result}
	}
	if _, found := t.expected[ok]; requeue != "" && (found || len(t.expected) < t.max) {
		t.expected[ok] = expectedAdd{kind: requeue, at: at}
	}
}

// requeueKind is the trigger of a requeue by a worker whose reconcile ended with result r.
func requeueKind(r Result, rateLimited bool, after time.Duration) TriggerKind {
	switch {
	case after > 0 && !rateLimited:
		return TriggerRequeueAfter
	case r == ResultError:
		return TriggerRetry
	case r == ResultRequeueAfter:
		return TriggerRequeueAfter
	}
	return TriggerRequeue
}

// classify says why add e of object ok, on goroutine k, happened; open is the span open on k.
func (t *triggers) classify(k goroutineKey, e *Event, ok objectKey, open *openSpan) Trigger {
	tr := Trigger{Time: e.Time}
	if open != nil && open.span.Name == e.Name && open.span.Namespace == e.Namespace {
		// the worker puts its own item back, inside its bracket
		r := ResultSuccess
		if e.RateLimited {
			r = ResultError
		}
		tr.Kind = requeueKind(r, e.RateLimited, e.RequeueAfter)
		return tr
	}
	if en, found := t.ended[k]; found && en.key == ok && open == nil { // not while it runs another
		delete(t.ended, k) // one add per reconcile: the next is something else
		tr.Kind = requeueKind(en.result, e.RateLimited, e.RequeueAfter)
		return tr
	}
	if d, found := t.delivering[k]; found {
		tr.Event, tr.Object = d.watch, d.object
		switch {
		case d.watch == WatchResync:
			tr.Kind = TriggerResync
		case d.object.Name == e.Name && d.object.Namespace == e.Namespace:
			tr.Kind = TriggerEvent
		default:
			tr.Kind = TriggerMapped
		}
		return tr
	}
	if x, found := t.expected[ok]; found {
		delete(t.expected, ok)
		tr.Kind = x.kind
		return tr
	}
	tr.Kind, tr.Function = TriggerOther, e.Worker
	return tr
}

// served gives s the triggers of the adds it serves, each event named with its writer from
// the versions writes made (lookup), and the span's trigger controller: the writer of the
// most recent event among them, which it returns (false: no event among them).
func (t *triggerSet) served(s *Span, lookup func(version) (written, bool)) (Trigger, bool) {
	s.Triggers = t.list
	s.TriggersDropped = t.dropped
	for i := range s.Triggers {
		nameWriter(&s.Triggers[i], lookup)
	}
	if !t.hasLastEvent {
		return Trigger{}, false
	}
	last := t.lastEvent
	nameWriter(&last, lookup)
	s.TriggerController = last.Writer
	if last.Writer == WriterUntraced {
		s.TriggerController = TriggerUnknown
		return last, true
	}
	if last.writeEnd <= s.Start {
		s.TriggerLag = time.Duration(s.Start - last.writeEnd)
		s.TriggerLagKnown = true
	}
	return last, true
}

func nameWriter(tr *Trigger, lookup func(version) (written, bool)) {
	if tr.Kind != TriggerEvent && tr.Kind != TriggerMapped && tr.Kind != TriggerResync {
		return
	}
	tr.Writer = WriterUntraced
	if tr.Object.UID == "" || tr.Object.ResourceVersion == "" {
		return
	}
	if w, ok := lookup(version{tr.Object.UID, tr.Object.ResourceVersion}); ok {
		tr.Writer, tr.writeEnd, tr.writerPID = w.controller, w.end, w.pid
	}
}

// processExited forgets what process pid's goroutines were doing.
func (t *triggers) processExited(pid uint32) {
	maps.DeleteFunc(t.delivering, func(k goroutineKey, _ delivery) bool { return k.pid == pid })
	maps.DeleteFunc(t.ended, func(k goroutineKey, _ ended) bool { return k.pid == pid })
	maps.DeleteFunc(t.expected, func(k objectKey, _ expectedAdd) bool { return k.pid == pid })
}

// requeueWait is how long a requeue a client-go worker asked for is waited for: longer than
// client-go's default rate limiter's longest backoff (1000 s).
const requeueWait = 30 * time.Minute

// expire forgets the requeues asked for longer than requeueWait before now that never came (a
// queue shut down, an item forgotten): a later add of the object is not one of them.
func (t *triggers) expire(now uint64) {
	after := requeueWait
	maps.DeleteFunc(t.expected, func(_ objectKey, x expectedAdd) bool {
		return now > x.at && time.Duration(now-x.at) > after
	})
}
