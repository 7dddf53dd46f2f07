// Package span turns decoded probe events into finished reconcile spans.
//
// It is pure: events in, spans out, no kernel and no clock of its own. The Assembler pairs
// each span entry with its return on the same goroutine (keyed by process and goroutine ID,
// never by thread), nests the calls made on that goroutine under the open span, derives the
// read/write/compute phases, and closes spans whose return never comes as abandoned.
package span

import (
	"slices"
	"sort"
	"time"
)

// Result is how a reconcile ended.
type Result string

// The results a span can have (the JSON contract's "result" field).
const (
	ResultSuccess      Result = "success"
	ResultError        Result = "error"
	ResultRequeue      Result = "requeue"
	ResultRequeueAfter Result = "requeue_after"
	ResultAbandoned    Result = "abandoned"
)

// EventKind says what a probe event marks.
type EventKind uint8

// Event kinds.
const (
	SpanStart  EventKind = iota + 1 // a reconcile (or sync handler) began
	SpanEnd                         // it returned
	CallStart                       // a call inside the reconcile began
	CallEnd                         // it returned
	CallStatus                      // the innermost open call learnt its HTTP status
	QueueAdd                        // a key was added to a work queue (Namespace, Name; RequeueAfter: its delay; RateLimited)
	// CallObject: the API call that just ended on this goroutine returned this object
	// (Call.Namespace, Name, UID, ResourceVersion: for a write, the object after it).
	CallObject
	// QueueLimitStart: the queue's rate limiter was asked for a key's delay (Namespace, Name);
	// QueueLimitEnd, on the same goroutine, is its answer (RequeueAfter). Together they give a
	// rate-limited add (RateLimited) its delay.
	QueueLimitStart
	QueueLimitEnd
	// QueueNamed: a work queue named Controller is being made on this goroutine; QueueMade,
	// next on the same goroutine, is the queue made (QueueID).
	QueueNamed
	QueueMade
	// QueueRequeue: the worker put the item of the work-queue span open on its goroutine back
	// in the queue: rate limited (RateLimited: a retry after an error) or after RequeueAfter
	// (-1: a delay not read).
	QueueRequeue
	// ObjectRead: a read on this goroutine, inside its span, found this object (Call.Namespace,
	// Name, UID, ResourceVersion; empty when the read found none). It is no call of the span:
	// a cache read probed at its entry alone (DetailReconcile), its object read at the
	// goroutine's next hit. The first read of the reconciled object gives the span its UID and
	// resourceVersion.
	ObjectRead
	// WatchEvent: an informer is delivering a watch event (Watch: add, update, delete, resync)
	// of Object to a handler on this goroutine; a QueueAdd that follows on it is that event's.
	WatchEvent
)

// CallKind names what a call inside a reconcile does.
type CallKind string

// Call kinds (the JSON contract's calls[].kind).
const (
	CallCacheGet  CallKind = "cache_get"
	CallCacheList CallKind = "cache_list"
	CallAPI       CallKind = "api"
)

// Event is one decoded probe hit, already interpreted by its probe's catalog entry.
type Event struct {
	Kind EventKind
	PID  uint32
	// Goroutine identity: the goroutine ID when it could be read (>= 0), else the g pointer.
	Goid int64
	G    uint64
	// Time is the kernel's monotonic clock in nanoseconds.
	Time uint64
	// SpanStartTime is, on any event, the entry time of the span the kernel saw open on this
	// goroutine (0 if none). It lets a return whose entry event was lost still be timed.
	SpanStartTime uint64
	// Nested marks a span entry while another span was open on the goroutine.
	Nested bool
	// NoEntry marks a span return that the kernel saw with no entry on its goroutine: the
	// entry's event was lost (or the probe was attached mid-call). It must not close a span
	// open on the goroutine: that span's own return was lost, and pairing the two would join
	// two different reconciles.
	NoEntry bool

	// Span entry fields.
	Controller  string
	Namespace   string
	Name        string
	ReconcileID string

	// Queue marks the SpanStart and SpanEnd of a work-queue item (Get handed it to the
	// worker, Done ended it); QueueID is the queue (its address), on SpanEnd, QueueMade and
	// QueueAdd (0: not known).
	Queue   bool
	QueueID uint64
	// Item is the work-queue item's identity on a work-queue item's SpanStart (Get) and
	// SpanEnd (Done) and on QueueRequeue (probes.Probe.ItemKnown: a string key's data
	// pointer, a pointer item); 0 where unknown. It pairs a Done with its Get when the worker
	// handed the item to another goroutine.
	Item uint64
	// ItemType is the Go type of a work-queue item that is not a key (SpanEnd of a queue).
	ItemType string
	// Worker is the function that called Done (SpanEnd of a queue), or the one that added
	// (QueueAdd), in its short form
	// ("controller.ProvisionController.processNextClaimWorkItem"): the controller of an item
	// whose queue's name is not known. "" when it was not read.
	Worker string

	// RateLimited marks a QueueAdd whose delay the queue's rate limiter chooses
	// (AddRateLimited): a QueueLimitEnd gives it.
	RateLimited bool

	// Span return fields.
	Result       Result
	RequeueAfter time.Duration
	ErrorType    string
	Error        string

	// Call fields.
	Call CallInfo
	// Watch event fields (WatchEvent): what happened (a WatchKind) and to which object.
	Watch  string
	Object ObjectRef

	// Incomplete marks an event some of whose fields could not be read (truncated strings,
	// unknown offsets).
	Incomplete bool

	// SingleStepped says the probe hit that made this event cost the traced thread a
	// single-step besides its trap (its site's instruction is not one the kernel emulates).
	SingleStepped bool
	// Key is, on a SpanStart, the controller instance the span belongs to (a work queue's
	// processing set, a controller): 0 when the probe names none. The kernel can exclude it.
	Key uint64
}

// ProbeHits counts the probe hits a reconcile cost its process: the hits whose records
// joined its span (its entry and return, its calls, its queue's marks), by what each cost the
// traced thread. Hits that write no record (a goroutine's start or exit inside the span) are
// counted by the kernel only, not here.
type ProbeHits struct {
	Emulated      uint32 // one trap, the instruction run in the trap handler
	SingleStepped uint32 // a trap and a single-step of the instruction out of line
}

// add counts the hit of e.
func (h *ProbeHits) add(e *Event) {
	if e.SingleStepped {
		h.SingleStepped++
	} else {
		h.Emulated++
	}
}

// with returns h with the hit of e counted.
func (h ProbeHits) with(e *Event) ProbeHits {
	h.add(e)
	return h
}

// Total is the number of hits.
func (h ProbeHits) Total() uint32 { return h.Emulated + h.SingleStepped }

// CallInfo describes a call made inside a reconcile.
type CallInfo struct {
	Kind        CallKind
	Verb        string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	Status      int
	// UID and ResourceVersion are the object's: as read (cache and lister reads), or as the
	// API server returned it (API calls; for a write, the version the write made).
	UID             string
	ResourceVersion string
	// Error is the concrete type of the error the call returned, "" when none.
	Error string
	// Outcome is a cache read's (cache_get: controller-runtime's cache, client-go listers):
	// OutcomeHit, OutcomeNotFound or OutcomeError; "" for other calls.
	Outcome string
	// ConflictWriter is, for a write answered 409 Conflict, the controller whose write made the
	// newer version of the object it conflicted with, when a traced process on this node was
	// seen making it; WriterUntraced when not; "" on other calls, or when the version the
	// reconcile read of the object is not known.
	ConflictWriter string
}

// Outcomes of a cache read (CallInfo.Outcome).
const (
	OutcomeHit      = "hit"
	OutcomeNotFound = "not_found"
	OutcomeError    = "error"
)

// Call is a finished call inside a span.
type Call struct {
	CallInfo
	Start    uint64 // monotonic ns
	Duration time.Duration
	// Depth is 0 for a call made directly, 1 for a call made inside another call, ...
	Depth int
	// Goroutine is the ID of the goroutine that made the call: the reconcile's own, or one it
	// started.
	Goroutine int64
}

// Span is one finished reconcile.
type Span struct {
	Controller string
	Namespace  string
	Name       string
	// ItemType is the Go type of the work-queue item when the item is not a key (a namespace
	// and name): the span has no object then.
	ItemType string
	UID      string
	// ResourceVersion is the reconciled object's resourceVersion as the reconcile first read it
	// (from its cache or lister), "" when no read of it was seen.
	ResourceVersion string
	ReconcileID     string
	PID             uint32
	Goid            int64
	Start           uint64 // monotonic ns
	Duration        time.Duration
	Result          Result
	RequeueAfter    time.Duration
	ErrorType       string
	Error           string
	Calls           []Call
	Phases          Phases
	// Triggers are the adds to the work queue this reconcile served, in order: why it ran
	// (the first MaxTriggers; TriggersDropped counts the rest).
	Triggers        []Trigger
	TriggersDropped int
	// TriggerController is the writer of the most recent watch event among Triggers (event,
	// mapped or resync): the controller whose write made that event's version, TriggerUnknown
	// when that write was not seen on this node (kubectl, an untraced controller, another node),
	// "" when no watch event is among the triggers (requeues only, or no add seen).
	TriggerController string
	// TriggerLag is the time from the return of that write to the start of this reconcile
	// (watch delivery plus queue), when TriggerLagKnown: the write was seen here and returned
	// before this reconcile began.
	TriggerLag      time.Duration
	TriggerLagKnown bool
	// ReadVersionWriter is the controller whose write made the version of the object this
	// reconcile read (ResourceVersion): TriggerUnknown when that write was not seen on this
	// node, "" when no read was seen. (TriggerController meant this before issue 27.)
	ReadVersionWriter string
	// QueueWait is how long the object waited ready in its work queue: from the moment it
	// became ready (the earliest ready time of the adds not yet served by an earlier
	// reconcile: an add's time plus its After delay or its rate limiter's backoff) to this
	// reconcile's start. Zero when no add was seen.
	QueueWait time.Duration
	// Fights are the controller fights this reconcile's writes took part in (see Fight).
	Fights []Fight
	// HotLoops are the hot loops this reconcile took part in (see HotLoop): its own, when
	// its controller's write triggered it, and those of its no-op writes.
	HotLoops []HotLoop
	// StaleReads are the reads of versions older than one a traced write had already made
	// before the read began (see StaleRead); the first maxStaleReads.
	StaleReads []StaleRead
	// Backoff is how long the object was held back before it became ready: from the first add
	// not yet served to the moment it became ready (After delays, RequeueAfter, the rate
	// limiter's backoff after an error). Backoff + QueueWait is the time since that first add.
	Backoff time.Duration
	Noop    bool
	// ProbeHits are the probe hits the reconcile cost its process (see ProbeHits).
	ProbeHits ProbeHits
	// Incomplete is set when events of this span were lost or unreadable: fields may be missing.
	Incomplete bool
	// Key is the controller instance the span's entry named (Event.Key; 0: none): what the
	// kernel is told to exclude when the span's controller is not selected. Not exported.
	Key uint64

	// Process metadata, filled in by the agent before export.
	Exe       string
	Pod       string // namespace/name, when known
	Container string
	// Workload is the rest of what the agent knows of the process's pod (UID, owner, service
	// identity); nil when nothing is known. Shared between spans: never modified.
	Workload *Workload

	// TraceID is the OTLP trace ID (32 hex digits) the span was exported under, set by the
	// OTLP exporter when it queued the span; "" when it was not exported (sampled out,
	// dropped, or no OTLP export).
	TraceID string
}

// TriggerUnknown is Span.TriggerController when the version read was written by something not
// seen on this node.
const TriggerUnknown = "unknown"

// Workload is the Kubernetes identity of a traced process beyond its pod's namespace and name
// and its container's name, as OpenTelemetry's resource attributes name it.
type Workload struct {
	// PodUID is the pod's UID (k8s.pod.uid): from the pod, or from the process's cgroup path.
	PodUID string
	// Node is the pod's node (k8s.node.name).
	Node string
	// ContainerID is the traced process's container (container.id), from its cgroup path.
	ContainerID string
	// ServiceVersion is service.version: the pod's resource.opentelemetry.io/service.version
	// annotation, else its app.kubernetes.io/version label, else the container image's tag
	// and digest (OpenTelemetry's Kubernetes conventions); "" when none is known.
	ServiceVersion string
	// Kind and Name are the pod's owner workload: Deployment, StatefulSet, DaemonSet,
	// ReplicaSet (without a Deployment), Job, CronJob; "" for a pod without one (static or bare pods).
	Kind, Name string
	// ReplicaSet is the ReplicaSet between a Deployment and the pod (k8s.replicaset.name).
	ReplicaSet string
	// ServiceName, ServiceNamespace and ServiceInstanceID are service.name,
	// service.namespace and service.instance.id, resolved as OpenTelemetry's Kubernetes
	// conventions say.
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// Attributes are further resource attributes from the pod's
	// resource.opentelemetry.io/<key> annotations.
	Attributes map[string]string
}

// Phases splits a span's duration into the phases operators name: fetch (time in reads:
// cache and lister reads, API GETs and LISTs), apply (time in writes) and diff (the rest: the
// work that decides what to write, wherever it falls). Each instant counts once: as apply when
// any write runs then, else as fetch when any read runs, else as diff. So the three add up to
// the duration exactly, however reads and writes interleave or overlap (goroutines the
// reconcile started).
type Phases struct {
	Fetch time.Duration
	Diff  time.Duration
	Apply time.Duration
}

// IsWrite reports whether a call changes state in the API server.
func (c CallInfo) IsWrite() bool {
	switch c.Verb {
	case "POST", "PUT", "PATCH", "DELETE", "CREATE", "UPDATE", "DELETECOLLECTION":
		return true
	}
	return false
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
