package span

import (
	"maps"
	"slices"
	"sort"
	"time"
)

// Options bounds the Assembler.
type Options struct {
	// AbandonAfter closes a span whose return has not come after this long (event time) as
	// abandoned. Zero means 10 minutes.
	AbandonAfter time.Duration
	// MaxOpen bounds the number of open spans; beyond it the oldest is closed as abandoned.
	// Zero means 65536.
	MaxOpen int
	// MaxCalls bounds the calls kept per span; further calls are counted in Stats.CallsDropped.
	// Zero means 256.
	MaxCalls int
	// ReorderWindow is how long (event time) a return that arrived before its entry waits for
	// it. Zero means 1 second.
	ReorderWindow time.Duration
	// MaxVersions bounds the object versions remembered with their writer, to name the trigger
	// of a reconcile that reads one; the oldest is forgotten first. Zero means 65536.
	MaxVersions int
	// FightAlternations and FightWindow: a controller fight is at least FightAlternations
	// changes of writer among the writes of one object's subresource within FightWindow.
	// Zero means DefaultFightAlternations and DefaultFightWindow; a negative
	// FightAlternations turns detection off.
	FightAlternations int
	FightWindow       time.Duration
	// HotLoopChain and HotLoopWindow: a hot loop is at least HotLoopChain self-triggered
	// reconciles of one object in a row, or no-op writes of one object, by one controller
	// within HotLoopWindow. Zero means DefaultHotLoopChain and DefaultHotLoopWindow; a negative
	// HotLoopChain turns detection off.
	HotLoopChain  int
	HotLoopWindow time.Duration
}

// Stats counts what the Assembler saw that did not become a normal span.
type Stats struct {
	Spans           uint64 // spans emitted, all results
	Abandoned       uint64 // spans closed without a return
	OrphanReturns   uint64 // returns for which no entry ever came
	OrphanCalls     uint64 // call events with no open span or no matching start
	CallsDropped    uint64 // calls beyond MaxCalls
	Evicted         uint64 // open spans closed early because MaxOpen was reached
	ReorderedPaired uint64 // returns that arrived before their entry and were paired anyway
	// Handoffs counts work-queue items whose Done came on another goroutine than their Get's
	// and was paired with it by the item (handoff.go); HandoffsLost, items whose worker moved
	// on to the next item before their Done, whose span could not wait for it (an item of
	// unknown identity): abandoned.
	Handoffs     uint64
	HandoffsLost uint64
	// HeldForWriter counts spans whose emission waited (up to 250 ms of event time) for a
	// traced write in flight, so the writer of a version one of their watch events delivered
	// could be named (writeawait.go).
	HeldForWriter uint64
}

type goroutineKey struct {
	pid  uint32
	goid int64
	g    uint64
}

func keyOf(e *Event) goroutineKey {
	if e.Goid >= 0 {
		return goroutineKey{pid: e.PID, goid: e.Goid}
	}
	return goroutineKey{pid: e.PID, goid: -1, g: e.G}
}

type openSpan struct {
	span  Span
	key   goroutineKey
	depth int // nested entries (recursion) not yet returned
	// calls begun and not yet ended, innermost last, per goroutine: the span's own and those
	// of goroutines it started (which the kernel lets join it).
	calls map[goroutineKey][]openCall // nil until the first call
	// last is, per goroutine, the index in span.Calls of the call that ended last, while no
	// other call has begun since (the call a CallObject event describes).
	last map[goroutineKey]int // nil until a call ended
	// at is the span's entry time as the kernel knows it (byStart's key, the SpanStartTime of
	// its events), which a handler inside a work-queue item moves span.Start from.
	at uint64
	// queue: a work-queue item's span (Get handed the item, Done ends it). handler: a handler
	// probe's span (a sync handler, controller-runtime's Reconcile) ran inside it and gives it
	// its fields, its times and, when it returned (handlerEnd), its result.
	queue      bool
	handler    bool
	handlerEnd *Event
	// What the worker did with the item before Done: retried it (AddRateLimited), or
	// requeued it after a delay (requeueAfter; -1: not read).
	retry        bool
	requeued     bool
	requeueAfter time.Duration
	// triggers are the adds the span serves (triggers.go), named with their writers at its end.
	triggers triggerSet
	// item is a work-queue item's identity (Event.Item), 0 unknown; handed: its worker took
	// the next item before its Done (handoff.go), so it is no longer in Assembler.open.
	item   uint64
	handed bool
}

type queueKey struct {
	pid uint32
	id  uint64
}

type objectKey struct {
	pid             uint32
	namespace, name string
}

type version struct{ uid, resourceVersion string }

// written is who made a version (the controller, in process pid), and when its write
// returned (monotonic ns).
type written struct {
	controller string
	pid        uint32
	end        uint64
}

type spanKey struct {
	pid   uint32
	start uint64
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

type openCall struct {
	info  CallInfo
	start uint64
}

// Assembler pairs events into spans. It is not safe for concurrent use: feed it from one
// goroutine.
type Assembler struct {
	opts    Options
	open    map[goroutineKey]*openSpan
	byStart map[spanKey]*openSpan // the same spans, by process and entry time
	queued  map[objectKey]*queued // unserved work-queue adds per object
	// limiting: the key whose rate-limiter delay is being computed, per goroutine, and how
	// deep (a limiter may ask others: MaxOf).
	limiting map[goroutineKey]limiting
	pending  map[goroutineKey]Event // returns that came before their entry
	// versions: the object versions writes made, with their writer; versionOrder is their
	// insertion order (oldest first), to bound them.
	versions     map[version]written
	versionOrder []version
	// fights: the recent writers of each object's subresources, to detect fights.
	fights boundedStates[fightKey, fightState]
	// loops: the recent self-triggered reconciles and no-op writes, to detect hot loops.
	loops boundedStates[loopKey, loopState]
	// queueNames are the names of the work queues seen made, by process and queue; naming is
	// the name of the queue being made on a goroutine (QueueNamed, until its QueueMade).
	queueNames map[queueKey]string
	naming     map[goroutineKey]string
	// triggers follows what the goroutines that add to queues are doing (triggers.go).
	triggers *triggers
	// latest is the newest version traced writes made of each object (conflicts.go).
	latest   *latestWrites
	handoffs handoffs
	// held: finished spans waiting for a write in flight to name their triggers' writers
	// (writeawait.go), in the order they finished.
	held  []heldSpan
	stats Stats
	emit  func(Span)
}

// NewAssembler returns an Assembler that hands each finished span to emit.
func NewAssembler(opts Options, emit func(Span)) *Assembler {
	if opts.AbandonAfter == 0 {
		opts.AbandonAfter = 10 * time.Minute
	}
	if opts.MaxOpen == 0 {
		opts.MaxOpen = 65536
	}
	if opts.MaxCalls == 0 {
		opts.MaxCalls = 256
	}
	if opts.ReorderWindow == 0 {
		opts.ReorderWindow = time.Second
	}
	if opts.MaxVersions == 0 {
		opts.MaxVersions = 65536
	}
	if opts.FightAlternations == 0 {
		opts.FightAlternations = DefaultFightAlternations
	}
	if opts.FightWindow <= 0 {
		opts.FightWindow = DefaultFightWindow
	}
	if opts.HotLoopChain == 0 {
		opts.HotLoopChain = DefaultHotLoopChain
	}
	if opts.HotLoopWindow <= 0 {
		opts.HotLoopWindow = DefaultHotLoopWindow
	}
	return &Assembler{
		opts:     opts,
		open:     make(map[goroutineKey]*openSpan),
		byStart:  make(map[spanKey]*openSpan),
		queued:   make(map[objectKey]*queued),
		limiting: make(map[goroutineKey]limiting),
		pending:  make(map[goroutineKey]Event),
		versions: make(map[version]written),
		emit:     emit,

		queueNames: make(map[queueKey]string),
		naming:     make(map[goroutineKey]string),
		triggers:   newTriggers(opts.MaxOpen),
		latest:     newLatestWrites(opts.MaxVersions),
		handoffs:   newHandoffs(),
	}
}

// Stats returns the counters so far.
func (a *Assembler) Stats() Stats { return a.stats }

// Open returns the number of spans open now.
func (a *Assembler) Open() int { return len(a.open) }

// Add feeds one event.
func (a *Assembler) Add(e Event) {
	if len(a.held) > 0 {
		defer a.releaseHeld(e.Time, false)
	}
	k := keyOf(&e)
	if e.Kind != SpanStart && e.Kind != SpanEnd { // those count their hit where they pair
		if o := a.spanOf(k, &e); o != nil {
			o.span.ProbeHits.add(&e)
		}
	}
	switch e.Kind {
	case SpanStart:
		a.start(k, e)
	case SpanEnd:
		a.end(k, e)
	case CallStart:
		o := a.spanOf(k, &e)
		if o == nil {
			a.stats.OrphanCalls++
			return
		}
		if o.calls == nil {
			o.calls = map[goroutineKey][]openCall{}
		}
		o.calls[k] = append(o.calls[k], openCall{info: e.Call, start: e.Time})
		delete(o.last, k)
	case CallEnd:
		a.callEnd(k, e)
	case QueueAdd:
		a.queueAdd(k, e)
	case WatchEvent:
		a.triggers.watchEvent(k, &e)
	case QueueLimitStart:
		ok := objectKey{pid: e.PID, namespace: e.Namespace, name: e.Name}
		if l, found := a.limiting[k]; found && l.key == ok {
			l.depth++
			a.limiting[k] = l
		} else if found || len(a.limiting) < a.opts.MaxOpen {
			a.limiting[k] = limiting{key: ok, depth: 1}
		}
	case QueueLimitEnd:
		l, found := a.limiting[k]
		if !found {
			return
		}
		if l.depth > 1 { // an inner limiter's answer: the outermost one counts
			l.depth--
			a.limiting[k] = l
			return
		}
		delete(a.limiting, k)
		if q := a.queued[l.key]; q != nil && q.limited > 0 {
			q.limited--
			q.readyAt(e.Time + uint64(max(e.RequeueAfter, 0)))
		}
	case QueueNamed:
		if len(a.naming) < a.opts.MaxOpen {
			a.naming[k] = e.Controller
		}
	case QueueMade:
		name, ok := a.naming[k]
		delete(a.naming, k)
		if ok && name != "" && (len(a.queueNames) < a.opts.MaxOpen || a.queueNames[queueKey{e.PID, e.QueueID}] != "") {
			a.queueNames[queueKey{e.PID, e.QueueID}] = name
		}
	case QueueRequeue:
		if o := a.requeued(k, &e); o != nil && o.queue {
			switch {
			case e.RateLimited:
				o.retry = true
			case !o.retry: // AddRateLimited's own AddAfter is its backoff, not a requeue
				o.requeued, o.requeueAfter = true, e.RequeueAfter
			}
		}
	case ObjectRead:
		if o := a.spanOf(k, &e); o != nil && (e.SpanStartTime == 0 || e.SpanStartTime == o.at) {
			o.learnObject(e.Call)
			if e.Call.Name == o.span.Name && e.Call.Namespace == o.span.Namespace {
				a.checkRead(o, e.Call, e.Time) // no call: the read's one hit is its time
			}
		}
	case CallObject:
		if o := a.spanOf(k, &e); o != nil {
			a.callObject(o, k, e.Call)
		}
	case CallStatus:
		if o := a.spanOf(k, &e); o != nil && len(o.calls[k]) > 0 {
			o.calls[k][len(o.calls[k])-1].info.Status = e.Call.Status
		}
	}
}

// spanOf finds the open span a call event belongs to: the one open on its goroutine, or the
// one its goroutine inherited (the kernel reports that span's entry time).
func (a *Assembler) spanOf(k goroutineKey, e *Event) *openSpan {
	if o := a.open[k]; o != nil {
		return o
	}
	if e.SpanStartTime != 0 {
		return a.byStart[spanKey{pid: e.PID, start: e.SpanStartTime}]
	}
	return nil
}

func (a *Assembler) start(k goroutineKey, e Event) {
	if o := a.open[k]; o != nil {
		if e.Nested {
			if o.queue && !o.handler && !e.Queue && o.depth == 1 {
				a.enrich(o, e)
			}
			o.span.ProbeHits.add(&e)
			o.depth++
			return
		}
		// A work-queue item with no Done when its worker took the next one: handed to
		// another goroutine. Otherwise the previous span's return was lost: it can no longer
		// be finished.
		if o.queue && e.Queue {
			a.handOff(k, o)
		} else {
			a.abandon(k, o)
		}
	}
	if p, ok := a.pending[k]; ok && p.Time >= e.Time {
		delete(a.pending, k)
		a.stats.ReorderedPaired++
		o := a.newOpen(e)
		o.span.ProbeHits.add(&p)
		a.finish(o, p)
		return
	}
	if len(a.open) >= a.opts.MaxOpen {
		a.evictOldest()
	}
	o := a.newOpen(e)
	o.key = k
	if !e.Queue { // a work-queue item's object is known at its Done
		a.serve(o, objectKey{pid: e.PID, namespace: e.Namespace, name: e.Name})
	}
	a.open[k] = o
	a.byStart[spanKey{pid: e.PID, start: e.Time}] = o
	a.handoffs.opened(o, &e)
}

// queueAdd records a work-queue add. A delayed add (After) is ready at its time plus the
// delay; a rate-limited one when its rate limiter says (QueueLimitEnd), or, with an After
// too, at the earlier of the two (as controller-runtime's priority queue does).
func (a *Assembler) queueAdd(k goroutineKey, e Event) {
	ok := objectKey{pid: e.PID, namespace: e.Namespace, name: e.Name}
	q := a.queued[ok]
	if q == nil {
		if len(a.queued) >= a.opts.MaxOpen {
			return
		}
		q = &queued{added: e.Time}
		a.queued[ok] = q
	}
	q.triggers.add(a.triggers.classify(k, &e, ok, a.open[k]))
	if e.RateLimited {
		q.limited++
		if e.RequeueAfter > 0 {
			q.readyAt(e.Time + uint64(e.RequeueAfter))
		}
		return
	}
	q.readyAt(e.Time + uint64(max(e.RequeueAfter, 0)))
}

// serve gives s, a reconcile of the object ok that began at s.Start, the wait of the adds it
// serves: those that made the object ready by then. An object not ready yet at the start is
// another queue's (one process may run controllers whose keys coincide) or its ready add was
// not seen: its adds stay for a later reconcile. An object whose only adds are rate-limited
// ones whose delay was not seen (a rate limiter reconscope does not probe) is served too: all
// its wait counts as backoff, for its ready time is not known.
func (a *Assembler) serve(o *openSpan, ok objectKey) {
	s := &o.span
	q := a.queued[ok]
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
	delete(a.queued, ok)
}

// enrich makes the work-queue item o the span of the handler whose entry e is, which runs
// inside it: the handler's object, reconcile ID and times are the span's, and its result when
// it returns; its controller too, unless the queue's name is known (queueEnd). One span, not
// two.
func (a *Assembler) enrich(o *openSpan, e Event) {
	o.handler = true
	o.span.Controller, o.span.Namespace, o.span.Name, o.span.ReconcileID = e.Controller, e.Namespace, e.Name, e.ReconcileID
	o.span.Start = e.Time
	o.span.Incomplete = o.span.Incomplete || e.Incomplete
	a.serve(o, objectKey{pid: e.PID, namespace: e.Namespace, name: e.Name})
}

func (a *Assembler) newOpen(e Event) *openSpan {
	return &openSpan{
		at:    e.Time,
		queue: e.Queue,
		depth: 1,
		span: Span{
			Controller:  e.Controller,
			Namespace:   e.Namespace,
			Name:        e.Name,
			ReconcileID: e.ReconcileID,
			PID:         e.PID,
			Goid:        e.Goid,
			Start:       e.Time,
			Incomplete:  e.Incomplete,
			ProbeHits:   ProbeHits{}.with(&e),
			Key:         e.Key,
		},
	}
}

func (a *Assembler) end(k goroutineKey, e Event) {
	if e.Queue && a.endHandedOff(k, e) {
		return
	}
	o := a.open[k]
	if o != nil && e.NoEntry && o.queue && o.item != 0 && o.item == e.Item {
		// Its Done, after this goroutine ended a handed-off item for the kernel.
		e.NoEntry, e.SpanStartTime = false, o.at
	}
	if o != nil && e.SpanStartTime != 0 && e.SpanStartTime != o.at {
		// The kernel says this return's span began at another time than the open one: the
		// open span's return and this one's entry were lost. Do not pair them.
		a.abandon(k, o)
		o = nil
	}
	if o == nil && e.Queue && e.NoEntry {
		// Done for an item whose Get was not seen (handed before the probes were attached).
		a.stats.OrphanReturns++
		return
	}
	if o == nil {
		if e.SpanStartTime == 0 {
			// Perhaps its entry is still on its way (another CPU): wait for it a little.
			if _, ok := a.pending[k]; ok {
				a.stats.OrphanReturns++
			}
			a.pending[k] = e
			return
		}
		// The entry event was lost, but the kernel kept its time: a span without the
		// entry's fields, marked incomplete.
		o = &openSpan{depth: 1, span: Span{PID: e.PID, Goid: e.Goid, Start: e.SpanStartTime, Incomplete: true}}
		o.span.ProbeHits.add(&e)
		a.finish(o, e)
		return
	}
	if e.NoEntry {
		// Both this return's entry and the open span's return were lost.
		a.abandon(k, o)
		a.stats.OrphanReturns++
		return
	}
	o.span.ProbeHits.add(&e)
	if o.depth > 1 {
		o.depth--
		if o.handler && o.depth == 1 && !e.Queue {
			o.handlerEnd = &e // the handler returned: its result is the item's
		}
		return
	}
	a.remove(k, o)
	if o.queue {
		e = a.queueEnd(o, e)
	}
	a.finish(o, e)
}

// queueEnd completes a work-queue item's span at its Done (e): the queue's name is its
// controller, the item its object, and its result what the worker did with it, unless a
// handler ran inside it, whose fields and return are the span's.
func (a *Assembler) queueEnd(o *openSpan, e Event) Event {
	if o.handler {
		if name := a.queueNames[queueKey{e.PID, e.QueueID}]; name != "" {
			o.span.Controller = name // as the queue's workqueue_* metrics name it
		}
		if o.handlerEnd != nil {
			return *o.handlerEnd
		}
		e.Incomplete = true // the handler's return was not seen
		return e
	}
	s := &o.span
	s.Controller = a.queueNames[queueKey{e.PID, e.QueueID}]
	if s.Controller == "" {
		s.Controller = e.Worker
	}
	if s.Controller == "" {
		s.Controller = UnnamedQueue
	}
	s.Namespace, s.Name, s.ItemType = e.Namespace, e.Name, e.ItemType
	if s.Name != "" {
		a.serve(o, objectKey{pid: e.PID, namespace: e.Namespace, name: e.Name})
	}
	switch {
	case o.retry:
		e.Result = ResultError
	case o.requeued && o.requeueAfter > 0:
		e.Result, e.RequeueAfter = ResultRequeueAfter, o.requeueAfter
	case o.requeued && o.requeueAfter == 0:
		e.Result = ResultRequeue
	case o.requeued:
		e.Result, e.Incomplete = ResultRequeueAfter, true // a delay not read
	default:
		e.Result = ResultSuccess
	}
	return e
}

// UnnamedQueue is the controller of a work-queue item whose queue's name is not known (a queue
// made without a Name, or before the process was traced) when the function that processes it
// (Event.Worker) is not known either.
const UnnamedQueue = "workqueue"

func (a *Assembler) finish(o *openSpan, e Event) {
	s := o.span
	if e.Time > s.Start {
		s.Duration = time.Duration(e.Time - s.Start)
	}
	s.Result = e.Result
	s.RequeueAfter = e.RequeueAfter
	s.ErrorType = e.ErrorType
	s.Error = e.Error
	s.Incomplete = s.Incomplete || e.Incomplete
	// Calls still open at the return were cut short (a panic unwound them).
	for _, cs := range o.calls {
		if len(cs) > 0 {
			a.stats.OrphanCalls += uint64(len(cs))
			if o.key == keyOf(&e) {
				s.Incomplete = true // the reconcile's own call never returned (panic)
			}
		}
	}
	finalize(&s)
	var requeue TriggerKind
	switch {
	case o.queue && o.retry:
		requeue = TriggerRetry
	case o.queue && o.requeued && o.requeueAfter > 0:
		requeue = TriggerRequeueAfter
	case o.queue && o.requeued:
		requeue = TriggerRequeue
	}
	a.triggers.spanEnded(keyOf(&e), &s, requeue, e.Time)
	a.stats.Spans++
	// A span behind a held one waits its turn: spans leave in the order they finished (an
	// object's reconciles link each to the one before, in that order).
	if awaits := a.awaitsWrite(&o.triggers); awaits || len(a.held) > 0 {
		if awaits {
			a.stats.HeldForWriter++
		}
		a.held = append(a.held, heldSpan{s: s, triggers: o.triggers, until: e.Time + uint64(writeWait)})
		return
	}
	a.nameAndEmit(s, &o.triggers)
}

// written looks up who made version v.
func (a *Assembler) written(v version) (written, bool) {
	w, ok := a.versions[v]
	return w, ok
}

func (a *Assembler) callEnd(k goroutineKey, e Event) {
	o := a.spanOf(k, &e)
	if o == nil || len(o.calls[k]) == 0 {
		a.stats.OrphanCalls++
		return
	}
	stack := o.calls[k]
	c := stack[len(stack)-1]
	o.calls[k] = stack[:len(stack)-1]
	if len(o.calls[k]) == 0 {
		delete(o.calls, k)
	}
	info := c.info
	mergeCallInfo(&info, e.Call)
	if len(o.span.Calls) >= a.opts.MaxCalls {
		a.stats.CallsDropped++
		o.span.Incomplete = true
		return
	}
	var d time.Duration
	if e.Time > c.start {
		d = time.Duration(e.Time - c.start)
	}
	o.span.Calls = append(o.span.Calls, Call{CallInfo: info, Start: c.start, Duration: d, Depth: len(o.calls[k]), Goroutine: k.goid})
	if call := &o.span.Calls[len(o.span.Calls)-1]; call.Kind == CallAPI && call.IsWrite() && call.Status == 409 {
		call.ConflictWriter = a.latest.conflictWriter(&o.span, call)
	}
	if o.last == nil {
		o.last = map[goroutineKey]int{}
	}
	o.last[k] = len(o.span.Calls) - 1
	o.learnObject(info)
	if info.Kind == CallCacheGet {
		a.checkRead(o, info, c.start)
	}
}

// learnObject takes the reconciled object's UID from any call that names it, and its
// resourceVersion from the first read of it.
func (o *openSpan) learnObject(info CallInfo) {
	if info.UID == "" || info.Name != o.span.Name || info.Namespace != o.span.Namespace {
		return
	}
	if o.span.UID == "" {
		o.span.UID = info.UID
	}
	if o.span.ResourceVersion == "" && !info.IsWrite() && info.UID == o.span.UID {
		o.span.ResourceVersion = info.ResourceVersion
	}
}

// callObject gives the object an API call returned to the call that just ended on goroutine k.
func (a *Assembler) callObject(o *openSpan, k goroutineKey, obj CallInfo) {
	i, ok := o.last[k]
	if !ok || i >= len(o.span.Calls) {
		return
	}
	delete(o.last, k)
	c := &o.span.Calls[i]
	if c.Kind != CallAPI || c.UID != "" || (c.Name != "" && c.Name != obj.Name) {
		return
	}
	c.Namespace, c.Name, c.UID, c.ResourceVersion = obj.Namespace, obj.Name, obj.UID, obj.ResourceVersion
	o.learnObject(c.CallInfo)
	if !c.IsWrite() || c.Status >= 300 {
		return
	}
	end := c.Start + uint64(max(c.Duration, 0))
	// A write that returned the version the reconcile read changed nothing: it made no version.
	noop := c.UID == o.span.UID && c.ResourceVersion == o.span.ResourceVersion
	if c.Verb == "PUT" || c.Verb == "PATCH" {
		// An update or patch that returned a version already made (the one this reconcile
		// read of the object, or one a traced write made before) changed nothing either.
		uid, rv := readBefore(&o.span, c)
		_, made := a.versions[version{c.UID, c.ResourceVersion}]
		noop = noop || made || (uid == c.UID && rv == c.ResourceVersion)
		a.noopWrite(o, c, noop, end)
	}
	if noop {
		return
	}
	a.remember(version{c.UID, c.ResourceVersion}, written{controller: o.span.Controller, pid: o.span.PID, end: end})
	a.latest.wrote(c.UID, c.ResourceVersion, o.span.Controller, end)
	if f := a.fightWrite(c, writer{pid: o.span.PID, controller: o.span.Controller}, end); f != nil {
		o.addFight(*f)
	}
}

// maxFights bounds the fights one span reports.
const maxFights = 8

// addFight adds f to the span's fights, or replaces the one of the same object's subresource
// (the latest write's view, keeping the episode's Start mark).
func (o *openSpan) addFight(f Fight) {
	for i := range o.span.Fights {
		if g := &o.span.Fights[i]; g.UID == f.UID && g.Subresource == f.Subresource {
			f.Start = f.Start || g.Start
			*g = f
			return
		}
	}
	if len(o.span.Fights) < maxFights {
		o.span.Fights = append(o.span.Fights, f)
	}
}

// remember records who wrote version v, forgetting the oldest version beyond MaxVersions.
func (a *Assembler) remember(v version, w written) {
	if _, ok := a.versions[v]; ok {
		return // a no-op write returned a version someone already made
	}
	if len(a.versionOrder) >= a.opts.MaxVersions {
		delete(a.versions, a.versionOrder[0])
		a.versionOrder = a.versionOrder[1:]
	}
	a.versions[v] = w
	a.versionOrder = append(a.versionOrder, v)
}

// readVersionWriter names the writer of the version s read, when the write was seen here.
func (a *Assembler) readVersionWriter(s *Span) {
	if s.UID == "" || s.ResourceVersion == "" {
		return
	}
	w, ok := a.versions[version{s.UID, s.ResourceVersion}]
	if !ok {
		s.ReadVersionWriter = TriggerUnknown
		return
	}
	s.ReadVersionWriter = w.controller
}

// mergeCallInfo fills what the call's return learnt (status, UID) into what its entry knew.
func mergeCallInfo(dst *CallInfo, ret CallInfo) {
	if ret.Status != 0 {
		dst.Status = ret.Status
	}
	if ret.UID != "" {
		dst.UID = ret.UID
		dst.ResourceVersion = ret.ResourceVersion
	}
	if ret.Error != "" {
		dst.Error = ret.Error
	}
	if ret.Outcome != "" {
		dst.Outcome = ret.Outcome
	}
	if dst.Verb == "" {
		dst.Verb = ret.Verb
	}
	if dst.Resource == "" {
		dst.Resource = ret.Resource
	}
	if dst.Namespace == "" {
		dst.Namespace = ret.Namespace
	}
	if dst.Name == "" {
		dst.Name = ret.Name
	}
	if dst.Subresource == "" {
		dst.Subresource = ret.Subresource
	}
}

func (a *Assembler) remove(k goroutineKey, o *openSpan) {
	if a.open[k] == o { // a handed-off span's goroutine has another span open now
		delete(a.open, k)
	}
	if a.byStart[spanKey{pid: o.span.PID, start: o.at}] == o {
		delete(a.byStart, spanKey{pid: o.span.PID, start: o.at})
	}
	a.handoffs.closed(o)
}

func (a *Assembler) abandon(k goroutineKey, o *openSpan) {
	a.remove(k, o)
	s := o.span
	s.Result = ResultAbandoned
	s.Incomplete = true
	finalize(&s)
	a.readVersionWriter(&s)
	o.triggers.served(&s, a.written)
	a.stats.Abandoned++
	a.stats.Spans++
	a.emit(s)
}

func (a *Assembler) evictOldest() {
	var oldestK goroutineKey
	var oldest *openSpan
	for k, o := range a.open {
		if oldest == nil || o.span.Start < oldest.span.Start {
			oldestK, oldest = k, o
		}
	}
	if oldest != nil {
		a.stats.Evicted++
		a.abandon(oldestK, oldest)
	}
}

// Expire closes, as abandoned, every span open for longer than AbandonAfter at monotonic
// time now, and gives up on returns that waited longer than ReorderWindow for their entry.
func (a *Assembler) Expire(now uint64) {
	for _, k := range a.sortedKeys(func(o *openSpan) bool {
		return now > o.span.Start && time.Duration(now-o.span.Start) > a.opts.AbandonAfter
	}) {
		a.abandon(k, a.open[k])
	}
	a.expireHandedOff(now, 0)
	a.releaseHeld(now, false)
	for k, q := range a.queued {
		ref := q.added
		if q.readyKnown {
			ref = q.ready
		}
		if now > ref && time.Duration(now-ref) > a.opts.AbandonAfter {
			delete(a.queued, k) // an add no reconcile served (another controller's queue)
		}
	}
	a.expireFights(now)
	a.expireLoops(now)
	a.triggers.expire(now)
	for k, p := range a.pending {
		if now > p.Time && time.Duration(now-p.Time) > a.opts.ReorderWindow {
			delete(a.pending, k)
			a.stats.OrphanReturns++
		}
	}
}

// ProcessExited closes every span still open in process pid as abandoned: its returns will
// never come.
func (a *Assembler) ProcessExited(pid uint32) {
	for _, k := range a.sortedKeys(func(o *openSpan) bool { return o.span.PID == pid }) {
		a.abandon(k, a.open[k])
	}
	a.expireHandedOff(0, pid)
	for k := range a.pending {
		if k.pid == pid {
			delete(a.pending, k)
			a.stats.OrphanReturns++
		}
	}
	maps.DeleteFunc(a.queued, func(k objectKey, _ *queued) bool { return k.pid == pid })
	maps.DeleteFunc(a.limiting, func(k goroutineKey, _ limiting) bool { return k.pid == pid })
	maps.DeleteFunc(a.queueNames, func(k queueKey, _ string) bool { return k.pid == pid })
	maps.DeleteFunc(a.naming, func(k goroutineKey, _ string) bool { return k.pid == pid })
	a.triggers.processExited(pid)
}

// Flush closes every open span as abandoned (the agent is stopping).
func (a *Assembler) Flush() {
	for _, k := range a.sortedKeys(func(*openSpan) bool { return true }) {
		a.abandon(k, a.open[k])
	}
	a.expireHandedOff(0, 0)
	a.releaseHeld(0, true)
	a.stats.OrphanReturns += uint64(len(a.pending))
	clear(a.pending)
}

// sortedKeys returns the keys of open spans that match, oldest first, so output is stable.
func (a *Assembler) sortedKeys(match func(*openSpan) bool) []goroutineKey {
	var ks []goroutineKey
	for k, o := range a.open {
		if match(o) {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return a.open[ks[i]].span.Start < a.open[ks[j]].span.Start })
	return ks
}

// finalize derives the phases and the no-op flag from the calls. Calls may overlap (nested
// calls, goroutines the reconcile started): each instant of the span counts once, as write
// when any write runs then, else as read when any read runs, else as compute. So the three
// phases always add up to the span's duration.
func finalize(s *Span) {
	type edge struct {
		t     uint64
		write bool
		delta int
	}
	end := s.Start + uint64(s.Duration)
	edges := make([]edge, 0, 2*len(s.Calls))
	wrote := false
	for _, c := range s.Calls {
		w := c.IsWrite()
		wrote = wrote || w
		from, to := max(c.Start, s.Start), min(c.Start+uint64(c.Duration), end)
		if to <= from {
			continue
		}
		edges = append(edges, edge{from, w, +1}, edge{to, w, -1})
	}
	sort.Slice(edges, func(i, j int) bool { return edges[i].t < edges[j].t })
	var read, write time.Duration
	reads, writes := 0, 0
	prev := s.Start
	for _, e := range edges {
		if d := time.Duration(e.t - prev); d > 0 {
			switch {
			case writes > 0:
				write += d
			case reads > 0:
				read += d
			}
		}
		prev = e.t
		if e.write {
			writes += e.delta
		} else {
			reads += e.delta
		}
	}
	s.Phases = Phases{Fetch: read, Apply: write, Diff: s.Duration - read - write}
	s.Noop = !wrote && s.Result != ResultAbandoned
}

// OpenSince reports whether a span of process pid is open that began (kernel time) before t:
// a reconcile in flight since then.
func (a *Assembler) OpenSince(pid uint32, t uint64) bool {
	for _, o := range a.open {
		if o.span.PID == pid && o.at < t {
			return true
		}
	}
	return false
}

// DropCalls takes out of s what only detail calls gives: its calls, the phases and no-op
// verdict they make (all compute, a no-op, as at detail reconcile), its fights, stale reads
// and no-op-write hot loops (a self-triggered hot loop comes from its triggers: kept). The agent
// drops them from the spans of a controller at detail reconcile whose instance the kernel
// traced at detail calls (before it knew the controller, or while a switch ended).
func (s *Span) DropCalls() {
	s.Calls = nil
	s.Fights = nil
	s.StaleReads = nil
	s.HotLoops = slices.DeleteFunc(s.HotLoops, func(h HotLoop) bool { return h.Kind == HotLoopNoopWrite })
	finalize(s)
}
