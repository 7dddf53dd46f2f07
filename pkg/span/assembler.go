package span

import "time"

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

type objectKey struct {
	pid             uint32
	namespace, name string
}

type spanKey struct {
	pid   uint32
	start uint64
}

type openCall struct {
	info  CallInfo
	start uint64
}

// Assembler pairs events into spans. It is not safe for concurrent use: feed it from one
// goroutine.
//
// It keeps the open spans, and calls a part for each feature, each part with its own state
// and file: the queue wait (queueWait, queuewait.go), the queues' names (queueNames,
// queuenames.go), who made each version (versionWriters, versions.go), why a reconcile ran
// (triggers, triggers.go), the latest write of each object (latestWrites, conflicts.go),
// work-queue items handed to another goroutine (handoffs, handoff.go), fights (fights.go),
// hot loops (hotloops.go), and spans held for a write in flight (writeawait.go). Calls are
// paired in calls.go; a work-queue item's span completed in queueitem.go; spans closed without
// their return in closing.go.
type Assembler struct {
	opts    Options
	open    map[goroutineKey]*openSpan
	byStart map[spanKey]*openSpan // the same spans, by process and entry time
	// queues: the unserved work-queue adds per object, for the queue wait (queuewait.go).
	queues  queueWait
	pending map[goroutineKey]Event // returns that came before their entry
	// versions: the object versions writes made, with their writer (versions.go).
	versions versionWriters
	// fights: the recent writers of each object's subresources, to detect fights.
	fights boundedStates[fightKey, fightState]
	// loops: the recent self-triggered reconciles and no-op writes, to detect hot loops.
	loops boundedStates[loopKey, loopState]
	// names are the names of the work queues seen made (queuenames.go).
	names queueNames
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
		queues:   newQueueWait(opts.MaxOpen),
		pending:  make(map[goroutineKey]Event),
		versions: newVersionWriters(opts.MaxVersions),
		emit:     emit,

		names:    newQueueNames(opts.MaxOpen),
		triggers: newTriggers(opts.MaxOpen),
		latest:   newLatestWrites(opts.MaxVersions),
		handoffs: newHandoffs(),
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
		ok := objectKey{pid: e.PID, namespace: e.Namespace, name: e.Name}
		if q := a.queues.entry(ok, e.QueueID); q != nil {
			q.add(&e, a.triggers.classify(k, &e, ok, a.open[k]))
		}
	case WatchEvent:
		a.triggers.watchEvent(k, &e)
	case QueueLimitStart:
		a.queues.limitStart(k, &e)
	case QueueLimitEnd:
		a.queues.limitEnd(k, &e)
	case QueueNamed:
		a.names.naming(k, e.Controller)
	case QueueMade:
		a.names.made(k, e.PID, e.QueueID)
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
	if !e.Queue { // a work-queue item's object and queue are known at its Done
		a.queues.serve(o, objectKey{pid: e.PID, namespace: e.Namespace, name: e.Name}, 0)
	}
	a.open[k] = o
	a.byStart[spanKey{pid: e.PID, start: e.Time}] = o
	a.handoffs.opened(o, &e)
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
