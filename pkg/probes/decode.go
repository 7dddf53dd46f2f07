package probes

import (
	"strings"
	"time"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/span"
)

// Raw is one probe event as the kernel wrote it, with its strings already copied out.
type Raw struct {
	Entry bool
	// Deferred marks a deferred read (Probe.DeferredRead) of the record's entry site, sent at
	// the goroutine's next hit.
	Deferred    bool
	PID         uint32
	Time        uint64
	G           uint64
	Goid        int64
	SpanStart   uint64
	Nested      bool
	NoEntry     bool
	Args        [len(rbpf.TraceEventHead{}.Args)]uint64
	Vals        [len(rbpf.TraceEventHead{}.Vals)]uint64
	Str         [len(rbpf.TraceEvent{}.StrLen)]string // STR_COUNT: the site's strings, then the reconcile ID or error text
	Truncated   [len(rbpf.TraceEvent{}.StrLen)]bool
	ReconcileID string
	ErrorMsg    string
	// ErrorType is the concrete type of the returned error, resolved by the collector from
	// the itab in the site's error slot ("" when nil or unknown).
	ErrorType string
	// ItabType is the concrete type behind the itab in the site's Itab slot ("" when none).
	ItabType string
	// ObjectType is the dynamic type of the `any` whose type word is in the site's Type slot,
	// as %T prints it ("*v1.Pod"; "" when nil or unknown).
	ObjectType string
	// Incomplete marks fields that could not be read (unknown offsets, truncated strings).
	Incomplete bool
	// Worker is the function that called the probed one, past the work queue's own code (the
	// worker that processes the queue), named by WorkerName, at sites whose first value is
	// Frames; "" when unknown.
	Worker string
	// Function is the probed function the site belongs to (a generic shape body's name says
	// its shape).
	Function string
	// Key is, at a span's entry, the value of its Layout.Key slot (0: none): the controller
	// instance the span belongs to.
	Key uint64
}

func base(r *Raw, kind span.EventKind) span.Event {
	incomplete := r.Incomplete
	for _, t := range r.Truncated[:len(Layout{}.Strings)] { // the site's strings, not the ID or error text
		incomplete = incomplete || t
	}
	return span.Event{
		Kind:          kind,
		PID:           r.PID,
		Goid:          r.Goid,
		G:             r.G,
		Time:          r.Time,
		SpanStartTime: r.SpanStart,
		Nested:        r.Nested,
		NoEntry:       r.NoEntry,
		Incomplete:    incomplete,
		Key:           r.Key,
	}
}

func decodeReconcileEntry(r *Raw) span.Event {
	e := base(r, span.SpanStart)
	e.Controller = r.Str[0]
	e.Namespace = r.Str[1]
	e.Name = r.Str[2]
	e.ReconcileID = r.ReconcileID
	return e
}

// decodeReconcileReturn reads reconcile.Result{Requeue, RequeueAfter, ...} from the result
// slots and the error the collector resolved.
func decodeReconcileReturn(requeueSlot, afterSlot int) Decoder {
	return func(r *Raw) span.Event {
		e := base(r, span.SpanEnd)
		requeue := r.Args[requeueSlot]&0xff != 0
		after := time.Duration(int64(r.Args[afterSlot]))
		switch {
		case r.ErrorType != "":
			e.Result = span.ResultError
			e.ErrorType = r.ErrorType
			e.Error = r.ErrorMsg
		case after > 0:
			e.Result = span.ResultRequeueAfter
			e.RequeueAfter = after
		case requeue:
			e.Result = span.ResultRequeue
		default:
			e.Result = span.ResultSuccess
		}
		return e
	}
}

func decodeIgnore(*Raw) span.Event { return span.Event{} }

// resourceOf guesses the resource (lower-case plural) from an object's Go type as %T prints
// it: "*v1.ConfigMap" -> "configmaps", "*v1.PodList" -> "pods". Unstructured objects and
// unknown types give "".
func resourceOf(typeName string) string {
	name := typeName
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	name = strings.TrimSuffix(name, "List")
	if name == "" || strings.HasPrefix(name, "Unstructured") || typeName == "unknown" {
		return ""
	}
	r := strings.ToLower(name)
	switch {
	case strings.HasSuffix(r, "s"), strings.HasSuffix(r, "x"), strings.HasSuffix(r, "ch"), strings.HasSuffix(r, "sh"):
		return r + "es"
	case strings.HasSuffix(r, "y") && !strings.HasSuffix(r, "ay") && !strings.HasSuffix(r, "ey"):
		return r[:len(r)-1] + "ies"
	}
	return r + "s"
}

func decodeCacheEntry(kind span.CallKind) Decoder {
	return func(r *Raw) span.Event {
		e := base(r, span.CallStart)
		verb := "GET"
		if kind == span.CallCacheList {
			verb = "LIST"
		}
		e.Call = span.CallInfo{Kind: kind, Verb: verb, Resource: resourceOf(r.ItabType), Namespace: r.Str[0], Name: r.Str[1]}
		return e
	}
}

func decodeCallReturn(r *Raw) span.Event {
	e := base(r, span.CallEnd)
	if r.ErrorType != "" {
		e.Call.Error = r.ErrorType
	} else if IsUID(r.Str[0]) {
		e.Call.UID, e.Call.ResourceVersion = r.Str[0], r.Str[1]
	}
	return e
}

// IsUID reports whether s is the text form of a UUID, as the API server makes every object's
// UID. A UID read through a pointer to something that is not a typed Kubernetes object (an
// Unstructured, a store that holds other values) is garbage and fails this check.
func IsUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}

// readObject fills the call's object from the strings an objectReturn layout read, when they
// are those of a Kubernetes object.
func readObject(r *Raw, c *span.CallInfo) {
	if !IsUID(r.Str[2]) {
		return
	}
	c.Namespace, c.Name, c.UID, c.ResourceVersion = r.Str[0], r.Str[1], r.Str[2], r.Str[3]
}

// decodeObjectRead is a read of an object (strings 0-3: namespace, name, UID,
// resourceVersion) that is no call of the span (ReconcileReads): an ObjectRead event, whose
// Call names the object when the strings are a Kubernetes object's (nothing when the call did
// not fill it), so the hit it stands for is counted either way.
func decodeObjectRead(r *Raw) span.Event {
	e := base(r, span.ObjectRead)
	readObject(r, &e.Call)
	return e
}

func decodeListerEntry(r *Raw) span.Event {
	e := base(r, span.CallStart)
	e.Call = span.CallInfo{Kind: span.CallCacheGet, Verb: "GET", Resource: r.Str[0]}
	return e
}

// decodeObjectReturn is the return of a read that returns the object (a lister's Get).
func decodeObjectReturn(r *Raw) span.Event {
	e := base(r, span.CallEnd)
	e.Call.Outcome = cacheOutcome(r)
	if r.ErrorType != "" {
		e.Call.Error = r.ErrorType
		return e
	}
	readObject(r, &e.Call)
	return e
}

// decodeCacheGetReturn is controller-runtime's cache Get's return: the object read, and the
// read's outcome.
func decodeCacheGetReturn(r *Raw) span.Event {
	e := decodeCallReturn(r)
	e.Call.Outcome = cacheOutcome(r)
	return e
}

// cacheOutcome is a cache read's outcome: a hit without an error; not found for the error
// controller-runtime's cache and client-go's listers return for an object not in the cache
// (apierrors.NewNotFound: a *errors.StatusError whose message ends in "not found"); any other
// error (or a StatusError whose message could not be read) is an error.
func cacheOutcome(r *Raw) string {
	switch {
	case r.ErrorType == "":
		return span.OutcomeHit
	case r.ErrorType == "*errors.StatusError" && strings.HasSuffix(r.ErrorMsg, " not found"):
		return span.OutcomeNotFound
	}
	return span.OutcomeError
}

// decodeResultObject is the object an API call's response was decoded into.
func decodeResultObject(r *Raw) span.Event {
	if r.ErrorType != "" {
		return span.Event{}
	}
	e := base(r, span.CallObject)
	readObject(r, &e.Call)
	if e.Call.UID == "" {
		return span.Event{}
	}
	return e
}

func decodeRequestEntry(r *Raw) span.Event {
	e := base(r, span.CallStart)
	e.Call = span.CallInfo{Kind: span.CallAPI, Verb: r.Str[0], Resource: r.Str[1], Namespace: r.Str[2], Name: r.Str[3], Subresource: r.Str[4]}
	return e
}

func decodeResponseStatus(r *Raw) span.Event {
	e := base(r, span.CallStatus)
	e.Call.Status = int(int64(r.Vals[0]))
	return e
}

func decodeSyncEntry(controller string) Decoder {
	return func(r *Raw) span.Event {
		e := base(r, span.SpanStart)
		e.Controller = controller
		e.Namespace, e.Name = splitKey(r.Str[0])
		return e
	}
}

func decodeSyncReturn(r *Raw) span.Event {
	e := base(r, span.SpanEnd)
	e.Result = span.ResultSuccess
	if r.ErrorType != "" {
		e.Result = span.ResultError
		e.ErrorType = r.ErrorType
		e.Error = r.ErrorMsg
	}
	return e
}

// splitKey splits a client-go cache key "namespace/name" (or "name").
func splitKey(key string) (namespace, name string) {
	if ns, n, ok := strings.Cut(key, "/"); ok {
		return ns, n
	}
	return "", key
}

func queueAdd(r *Raw, ns, name string, after time.Duration) span.Event {
	e := base(r, span.QueueAdd)
	e.Namespace, e.Name = ns, name
	e.RequeueAfter = after
	e.Worker = r.Worker   // the function that added
	e.QueueID = r.Args[0] // the queue added to (the receiver): a Done of its items names it
	return e
}

func decodePriorityQueueAdd(r *Raw) span.Event {
	if r.Args[6] == 0 { // no items
		return span.Event{}
	}
	e := queueAdd(r, r.Str[0], r.Str[1], time.Duration(int64(r.Args[2])))
	e.RateLimited = r.Args[3]&0xff != 0
	return e
}

// decodeRateLimitEntry: a rate limiter is asked for a key's delay...
func decodeRateLimitEntry(r *Raw) span.Event {
	e := base(r, span.QueueLimitStart)
	e.Namespace, e.Name = r.Str[0], r.Str[1]
	return e
}

// ... and decodeRateLimitReturn is its answer.
func decodeRateLimitReturn(r *Raw) span.Event {
	e := base(r, span.QueueLimitEnd)
	e.RequeueAfter = time.Duration(int64(r.Args[0]))
	return e
}

func decodeKeyQueueAdd(r *Raw) span.Event {
	ns, name := splitKey(r.Str[0])
	return queueAdd(r, ns, name, 0)
}

func decodeRequestQueueAdd(r *Raw) span.Event { return queueAdd(r, r.Str[0], r.Str[1], 0) }

// decodeWatchEvent turns a handler's entry into the watch event it delivers. The object's
// metadata is read at ObjectMeta's place in a typed Kubernetes object; of any other value
// (an Unstructured, client-go's DeletedFinalStateUnknown of a delete missed by the watch) only
// the type is kept. An update whose old and new objects have one resourceVersion is a resync.
func decodeWatchEvent(watch string) Decoder {
	return func(r *Raw) span.Event {
		e := base(r, span.WatchEvent)
		e.Watch = watch
		e.Object.Kind = kindOf(r.ObjectType)
		if IsUID(r.Str[2]) && strings.HasPrefix(r.ObjectType, "*") && !strings.Contains(r.ObjectType, "Unstructured") {
			e.Object.Namespace, e.Object.Name, e.Object.UID, e.Object.ResourceVersion = r.Str[0], r.Str[1], r.Str[2], r.Str[3]
			if watch == span.WatchUpdate && r.Str[4] != "" && r.Str[4] == r.Str[3] {
				e.Watch = span.WatchResync
			}
		} else {
			e.Incomplete = false // nothing read that the event claims
		}
		return e
	}
}

// kindOf is the kind of an object of Go type typeName as %T prints it: "*v1.Pod" -> "Pod".
func kindOf(typeName string) string {
	name := strings.TrimPrefix(typeName, "*")
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return name
}
