package probes

import (
	"math/bits"
	"regexp"
	"strings"
	"time"

	"github.com/reconscope/reconscope/pkg/span"
)

// WorkQueueProbes make a span of every item a worker takes from a client-go work queue
// (k8s.io/client-go/util/workqueue, the generic Typed queue of v0.31+, under its rate-limiting
// and delaying wrappers), in any Go program: from the moment Get hands the item to the worker
// to the worker's Done for it, on that goroutine. Handler probes (a sync handler, controller-
// runtime's Reconcile) that run inside the bracket enrich the same span (span.Assembler).
//
// Every item costs two hits, both at instructions the kernel emulates: Get's direct call of
// the runtime's map insert (processing.Insert(item), after the item was popped: once per item
// handed, never while the worker waits), and Done's entry (PUSHQ BP). The item is read at
// Done, whose arguments are the queue and the item; its layout follows the queue's shape
// (one generic body per shape: strings, NamespacedName-like structs, pointers, other types).
//
// The queue's name (the Name of its config, which its workqueue_* metrics carry) is not kept
// by the queue: it is seen when the queue is made (newQueueWithConfig's entry, its result at
// the RETs: once per queue), so queues made before the process was traced are unnamed.
var WorkQueueProbes = append([]*Probe{
	itemKnown(workQueueBracket(`string`, layout().str(0, str(2, 3)), decodeQueueDoneKey)),
	// types.NamespacedName and controller-runtime's reconcile.Request{NamespacedName}: both
	// strings in slots 2-5.
	stringsKnown(workQueueBracket(nsNameShape, layout().str(0, str(2, 3)).str(1, str(4, 5)), decodeQueueDoneObject)),
	// controller-runtime's queue (before its priority queue, v0.23's default): its Reconcile
	// probe makes these items' spans already; the bracket would only add two hits per item.
	superseded(workQueueBracket(crRequestShape, layout().str(0, str(2, 3)).str(1, str(4, 5)), decodeQueueDoneObject)),
	// pointers (garbage collector events and nodes, ...): the item's Go type, no key.
	itemKnown(workQueueBracket(`\*.*`, layout(), decodeQueueDoneType)),
	// structs of strings (kube-controller-manager's taint eviction items, ...): the item's Go
	// type, no key (which field names the object is not known), known by identity.
	itemKnown(workQueueBracket(stringStructShape(1), layout(), decodeQueueDoneType)),
	stringsKnown(except(workQueueBracket(stringStructShape(2), layout(), decodeQueueDoneType), nsNameShape)),
	stringsKnown(workQueueBracket(stringStructShape(3), layout(), decodeQueueDoneType)),
	// any other shape (structs, numbers, interface {}): its Go type.
	others(workQueueBracket(`[^*].*`, layout(), decodeQueueDoneType)),

	// The queue's name, once per queue: newQueueWithConfig(config TypedQueueConfig[T]{Name,
	// ...}, updatePeriod) *Typed[T]: dict in slot 0, Name in slots 1-2; the queue in slot 0 at
	// its RETs.
	{ID: "client-go/workqueue-name", Module: clientGo, MinVersion: "v0.31.0", Role: RoleMark,
		Symbol:      regexp.MustCompile(`^k8s\.io/client-go/util/workqueue\.newQueueWithConfig\[go\.shape\..*\]$`),
		Entry:       layout().str(0, str(1, 2)),
		Return:      layout(),
		DecodeEntry: decodeQueueNamed, DecodeReturn: decodeQueueMade},
}, requeueProbes()...)

// requeueProbes see what the worker did with the item before Done, on its goroutine, per
// shape: AddRateLimited (a retry: the handler failed) and AddAfter (a requeue after a delay;
// AddRateLimited calls it too, with its backoff). Forget, or nothing, is a success and costs
// no hit. AddAfter(item T, duration): recv, dict, item, duration: the delay's slot follows
// the item's.
func requeueProbes() []*Probe {
	var out []*Probe
	for _, q := range []struct {
		shape     string
		delaySlot int
		cr        bool
		known     bool
		strings   bool
		except    string
	}{
		{`string`, 4, false, true, false, ""},
		{nsNameShape, 6, false, false, true, ""},
		{crRequestShape, 6, true, false, false, ""},
		{`\*.*`, 3, false, true, false, ""},
		{stringStructShape(1), 4, false, true, false, ""},
		{stringStructShape(2), 6, false, false, true, nsNameShape},
		{stringStructShape(3), 8, false, false, true, ""},
		{`[^*].*`, None, false, false, false, ""},
	} {
		retry := &Probe{ID: "client-go/workqueue-requeue", Module: clientGo, MinVersion: "v0.31.0", Role: RoleCall, EntryOnly: true, ItemResult: true,
			Symbol:      regexp.MustCompile(workQueue + `\(\*rateLimitingType\[go\.shape\.` + q.shape + `\]\)\.AddRateLimited$`),
			Entry:       layout(),
			Return:      layout(),
			DecodeEntry: decodeQueueRetry, DecodeReturn: decodeIgnore}
		after := &Probe{ID: "client-go/workqueue-requeue", Module: clientGo, MinVersion: "v0.31.0", Role: RoleCall, EntryOnly: true, ItemResult: true,
			Symbol:      regexp.MustCompile(workQueue + `\(\*delayingType\[go\.shape\.` + q.shape + `\]\)\.AddAfter$`),
			Entry:       layout(),
			Return:      layout(),
			DecodeEntry: decodeQueueAddAfter(q.delaySlot), DecodeReturn: decodeIgnore}
		if q.cr {
			superseded(retry)
			superseded(after)
		}
		if q.delaySlot == None {
			others(retry)
			others(after)
		}
		if q.known {
			itemKnown(retry)
			itemKnown(after)
		}
		if q.strings {
			stringsKnown(retry)
			stringsKnown(after)
		}
		if q.except != "" {
			except(retry, q.except)
			except(after, q.except)
		}
		out = append(out, retry, after)
	}
	return out
}

// itemKnown marks p ItemKnown: its decoders give each event the item's identity (slot 2: a
// string's data pointer, a pointer), of its shape (shapeItem).
func itemKnown(p *Probe) *Probe {
	p.ItemKnown = true
	for _, d := range []*Decoder{&p.DecodeEntry, &p.DecodeReturn} {
		*d = withItem(*d, func(r *Raw) uint64 { return r.Args[2] })
	}
	return p
}

// withItem is decode giving each event the identity of its item, whose words item reads from
// the record, of the shape of the record's function (shapeItem).
func withItem(decode Decoder, item func(*Raw) uint64) Decoder {
	return func(r *Raw) span.Event {
		e := decode(r)
		e.Item = shapeItem(item(r), r.Function)
		return e
	}
}

// shapeItem is the identity of an item whose words give item, in a queue of the shape of fn
// (Get, Done, AddRateLimited or AddAfter of one instantiation): items of two shapes are never
// one, though their words may be the same (a Node's name, the key of a string queue, is also
// the field of a struct item of another queue).
func shapeItem(item uint64, fn string) uint64 {
	if item == 0 {
		return 0
	}
	_, shape, _ := strings.Cut(fn, "[go.shape.")
	shape, _, _ = strings.Cut(shape, "])")
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(shape); i++ {
		h ^= uint64(shape[i])
		h *= 1099511628211
	}
	return item ^ h
}

// stringsKnown marks p ItemKnown for a shape of two or three strings: an item is known by its
// first two strings' data pointers (the same in the queue's copy and the worker's; equal items
// are one item of the queue, never processed twice at once). At Done and the requeue calls the
// item is in the argument slots (2 and 4); at Get's map insert, slot 2 points to the key, whose
// words 0 and 2 the site reads (Vals 0 and 1).
func stringsKnown(p *Probe) *Probe {
	p.ItemKnown = true
	inArgs := func(r *Raw) uint64 { return stringsItem(r.Args[2], r.Args[4]) }
	if p.Bracket != nil {
		p.Entry = p.Entry.val(0, ValueArg{Base: 2}).val(1, ValueArg{Base: 2, Field: FieldRef{Add: 16}})
		p.DecodeEntry = withItem(p.DecodeEntry, func(r *Raw) uint64 { return stringsItem(r.Vals[0], r.Vals[1]) })
		p.DecodeReturn = withItem(p.DecodeReturn, inArgs)
		return p
	}
	p.DecodeEntry = withItem(p.DecodeEntry, inArgs)
	return p
}

// stringsItem is the identity of an item of strings whose first two data pointers are a, b.
func stringsItem(a, b uint64) uint64 {
	if a == 0 && b == 0 {
		return 0
	}
	return a ^ bits.RotateLeft64(b, 32) ^ 0x9e3779b97f4a7c15
}

// superseded leaves p out of plans that attach controller-runtime's Reconcile probe.
func superseded(p *Probe) *Probe {
	p.SupersededBy = "controller-runtime/reconcile"
	return p
}

// The shapes whose items have a layout of their own: nsNameShape and crRequestShape name
// their objects; stringStructShape(n) is a struct of n strings (n register pairs; field names
// qualified by their package, tags kept).
const (
	nsNameShape    = `struct \{ Namespace string; Name string \}`
	crRequestShape = `struct \{ k8s\.io/apimachinery/pkg/types\.NamespacedName \}`
	stringField    = `[^ ;"{}]+ string(?: "(?:[^"\\]|\\.)*")?`
)

func stringStructShape(n int) string {
	return `struct \{ ` + stringField + strings.Repeat(`; `+stringField, n-1) + ` \}`
}

// knownShapes are the shapes whose items have a layout of their own: others leaves them out.
var knownShapes = regexp.MustCompile(`\[go\.shape\.(string|` + crRequestShape + `|` + stringStructShape(1) + `|` + stringStructShape(2) + `|` + stringStructShape(3) + `)\]`)

// others makes p, whose Symbol matches every shape but pointers, leave out knownShapes.
func others(p *Probe) *Probe {
	p.Unless = knownShapes
	return p
}

// except makes p, whose Symbol matches shape among others, leave out shape.
func except(p *Probe, shape string) *Probe {
	p.Unless = regexp.MustCompile(`\[go\.shape\.` + shape + `\]`)
	return p
}

const workQueue = `^k8s\.io/client-go/util/workqueue\.`

// workQueueID is the ID of the work-queue item's span probe (workQueueBracket).
const workQueueID = "client-go/workqueue"

// workQueueBracket is the span probe of one shape of the Typed queue: Get's direct call of the
// runtime's map insert opens the span, Done's entry (recv, dict, item) ends it.
func workQueueBracket(shape string, done Layout, decode Decoder) *Probe {
	return &Probe{ID: workQueueID, Module: clientGo, MinVersion: "v0.31.0", Role: RoleSpan,
		Symbol:  regexp.MustCompile(workQueue + `\(\*Typed\[go\.shape\.` + shape + `\]\)\.Get$`),
		Bracket: &Bracket{Call: mapInsert, End: "Done"},
		// key: the map the call inserts into (mapassign(type, map, key)), the queue's
		// processing set: one per queue, for the kernel's exclusion of a controller.
		Entry:       layout().key(1),
		Return:      done.val(0, ValueArg{Base: Frames}),
		DecodeEntry: decodeQueueGet, DecodeReturn: decode}
}

// mapInsert matches the runtime's map assignment functions (a set's Insert compiles to one).
var mapInsert = regexp.MustCompile(`^(runtime\.mapassign(_fast32|_fast64|_fast64ptr|_faststr)?|internal/runtime/maps\.runtime_mapassign.*)$`)

func decodeQueueGet(r *Raw) span.Event {
	e := base(r, span.SpanStart)
	e.Queue = true
	return e
}

// queueDone is the end of a work-queue item: the queue (slot 0) names its controller.
func queueDone(r *Raw) span.Event {
	e := base(r, span.SpanEnd)
	e.Queue = true
	e.QueueID = r.Args[0]
	e.Result = span.ResultSuccess
	e.Worker = r.Worker
	return e
}

func decodeQueueDoneKey(r *Raw) span.Event {
	e := queueDone(r)
	e.Namespace, e.Name = splitKey(r.Str[0])
	return e
}

func decodeQueueDoneObject(r *Raw) span.Event {
	e := queueDone(r)
	e.Namespace, e.Name = r.Str[0], r.Str[1]
	return e
}

// decodeQueueDoneType names the item by its Go type, from the shape of the probed function
// (its pointer shape names the type; other shapes name their underlying type).
func decodeQueueDoneType(r *Raw) span.Event {
	e := queueDone(r)
	e.ItemType = shapeOf(r.Function)
	return e
}

// shapeOf returns the type a generic shape body was compiled for: "*garbagecollector.event"
// of "k8s.io/client-go/util/workqueue.(*Typed[go.shape.*k8s.io/kubernetes/pkg/controller/
// garbagecollector.event]).Done", with the package path cut to its last element as %T prints it.
func shapeOf(fn string) string {
	_, after, ok := strings.Cut(fn, "[go.shape.")
	if !ok {
		return ""
	}
	t, _, ok := strings.Cut(after, "])")
	if !ok {
		return ""
	}
	if t == "*uint8" {
		return "" // the shape of every pointer type in some compilers: not this item's type
	}
	star := strings.HasPrefix(t, "*")
	t = strings.TrimPrefix(t, "*")
	if !strings.ContainsAny(t, " {") {
		if i := strings.LastIndexByte(t, '/'); i >= 0 {
			t = t[i+1:]
		}
	}
	if star {
		t = "*" + t
	}
	return t
}

func decodeQueueNamed(r *Raw) span.Event {
	e := base(r, span.QueueNamed)
	e.Controller = r.Str[0]
	return e
}

func decodeQueueMade(r *Raw) span.Event {
	e := base(r, span.QueueMade)
	e.QueueID = r.Args[0]
	return e
}

func decodeQueueRetry(r *Raw) span.Event {
	e := base(r, span.QueueRequeue)
	e.RateLimited = true
	return e
}

func decodeQueueAddAfter(delaySlot int) Decoder {
	return func(r *Raw) span.Event {
		e := base(r, span.QueueRequeue)
		e.RequeueAfter = -1 // unknown: a shape whose layout is not known
		if delaySlot != None {
			e.RequeueAfter = max(time.Duration(int64(r.Args[delaySlot])), 0)
		}
		return e
	}
}

// WorkerPackage is the work queue's package: return addresses in its code (Done's wrappers
// for the delaying and rate-limiting queues, the instantiation's) are passed over to find the
// worker.
const WorkerPackage = "k8s.io/client-go/util/workqueue."

// PriorityQueuePackage is controller-runtime's priority queue's package, passed over as the
// work queue's is to find the function that added to it (its Add calls AddWithOpts).
const PriorityQueuePackage = "sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue."

// Worker picks, from the names of the functions holding the return addresses of a Done site's
// frames (innermost first, "" where unknown), the worker that called Done: the first outside
// the work queue's code and the runtime (a deferred Done returns through runtime.deferreturn
// when its defer is not open-coded), in WorkerName's short form; "" when none is.
func Worker(frames []string) string {
	for _, fn := range frames {
		switch {
		case fn == "":
			return "" // the chain is cut: what follows is not known to be the worker
		case strings.HasPrefix(fn, WorkerPackage), strings.HasPrefix(fn, PriorityQueuePackage), strings.HasPrefix(fn, "runtime."):
			continue
		}
		return WorkerName(fn)
	}
	return ""
}

// WorkerName is the short form of a worker function's name that names the spans of a queue
// without a name: the last element of its package path, the receiver's type without "(*...)",
// and the function, without type arguments and without the suffixes of the closures it holds
// (funcN, deferwrapN, gowrapN, N):
// "sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller.(*ProvisionController).processNextClaimWorkItem.func1.deferwrap1"
// is "controller.ProvisionController.processNextClaimWorkItem", "main.processNextWorkItem[go.shape.string]"
// is "main.processNextWorkItem".
func WorkerName(fn string) string {
	// Type arguments first: they may hold slashes and dots of other packages.
	var b strings.Builder
	depth := 0
	for _, c := range fn {
		switch {
		case c == '[':
			depth++
		case c == ']' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(c)
		}
	}
	fn = b.String()
	if i := strings.LastIndexByte(fn, '/'); i >= 0 {
		fn = fn[i+1:]
	}
	fn = receiverParens.Replace(fn)
	parts := strings.Split(fn, ".")
	for len(parts) > 2 && closureSuffix.MatchString(parts[len(parts)-1]) {
		parts = parts[:len(parts)-1]
	}
	return strings.Join(parts, ".")
}

// receiverParens takes the parentheses (and star) of a method's receiver out of its name.
var receiverParens = strings.NewReplacer("(*", "", "(", "", ")", "")

// closureSuffix is the last element the compiler adds to the name of a closure, a deferred or
// a go statement's wrapper inside a function.
var closureSuffix = regexp.MustCompile(`^(func|deferwrap|gowrap)?[0-9]+$`)
