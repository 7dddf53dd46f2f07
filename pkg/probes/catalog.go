// Package probes is reconscope's probe catalog: which Go functions to probe, in which
// modules, what each probe site reads (Go ABI register slots, struct-field offsets), and the
// pure functions that turn one decoded probe event into a span event.
//
// The catalog is data (the tables Catalog returns). Given a symbols.Binary, NewPlan turns it
// into the exact sites to attach, or says exactly what is missing.
package probes

// Over 500 lines, on purpose: this file is the catalog, a table (CONVENTIONS, habit 4). Most of
// its lines are the probe rows (handlerProbes, ReconcileReads, QueueProbes, WatchEventProbes,
// GoroutineProbes, SyncHandlers), and the rest is what a row is written with: the Probe and
// Layout types and the few helpers (layout, str, field, meta) every row calls. A reader checks a
// row against those and against its neighbours, so they stay in one file.

import (
	"regexp"
	"slices"
	"strings"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/span"
)

// Role says whether a probe opens a span or records a call inside one.
type Role uint8

// Roles: the C enum site_role (bpf/include/events.h).
const (
	RoleSpan  = Role(rbpf.TraceSiteRoleROLE_SPAN)
	RoleCall  = Role(rbpf.TraceSiteRoleROLE_CALL)
	RoleSpawn = Role(rbpf.TraceSiteRoleROLE_SPAWN)
	RoleExit  = Role(rbpf.TraceSiteRoleROLE_EXIT)
	RoleMark  = Role(rbpf.TraceSiteRoleROLE_MARK)
)

// String names the role as inspect prints it.
func (r Role) String() string {
	switch r {
	case RoleSpan:
		return "span"
	case RoleCall:
		return "call"
	case RoleSpawn:
		return "goroutine-start"
	case RoleExit:
		return "goroutine-exit"
	case RoleMark:
		return "queue-add"
	}
	return "unknown"
}

// Register slots of Go's register ABI (integer arguments and results, in order):
// amd64 RAX RBX RCX RDI RSI R8 R9 R10 R11, arm64 R0..R8; and the slot values that name no
// register, the C enum slot (bpf/include/events.h). Its values are all negative: clang before 15
// records no signedness in BTF, so bpf2go types the enum uint32 (SLOT_NONE is 1<<32 - 1), and
// (v + 1<<32) % (1<<32) - 1<<32 reads those 32 bits as the negative number (the same if a newer
// clang makes the enum int32).
const (
	// None means unused (SLOT_NONE).
	None = int((int64(rbpf.TraceSlotSLOT_NONE)+1<<32)%(1<<32) - 1<<32)
	// Saved, as a Base, means the pointer the call's entry kept (Layout.Save), read at its
	// return (SLOT_SAVED).
	Saved = int((int64(rbpf.TraceSlotSLOT_SAVED)+1<<32)%(1<<32) - 1<<32)
	// Frames, as the Base of a layout's first value, reads instead the return addresses of the
	// innermost frames at an entry site (SLOT_FRAMES): Raw.Vals hold four 32-bit addresses in
	// the ELF file, the probed function's own return address first, then its callers' up the
	// frame-pointer chain (0 where it ends). The collector names the first one outside the work
	// queue's code (Raw.Worker).
	Frames = int((int64(rbpf.TraceSlotSLOT_FRAMES)+1<<32)%(1<<32) - 1<<32)
)

// StringArg says where one string a site reads comes from: a (ptr, len) register pair, or a
// Go string header inside the struct a register points to (Base and Field).
type StringArg struct {
	Ptr, Len int
	Base     int      // register slot of a pointer to a struct, or None
	Field    FieldRef // the string field in that struct, when Base is set
}

// FieldRef names a struct field whose offset a site needs.
type FieldRef struct {
	Type string // full type name; generic types without their brackets
	Path string // field, dotted for nested fields
	// Add is added to the field's offset: for a field of a struct embedded at a known place
	// (ObjectMeta after TypeMeta in every Kubernetes object).
	Add uint64
}

// ValueArg is an 8-byte integer field of the struct a register (or the saved pointer) points to.
// A Field without a Type is the word at Field.Add bytes from the pointer (an item's first
// words, whatever its type).
type ValueArg struct {
	Base  int // register slot, Saved, or None
	Field FieldRef
}

// Layout is what one site (entry or return) reads.
type Layout struct {
	Strings [len(rbpf.TraceSiteConfig{}.Str)]StringArg // STR_SPECS
	Values  [len(rbpf.TraceSiteConfig{}.Val)]ValueArg  // VAL_SPECS
	Ctx     int                                        // slot of the context.Context's data word (reconcile ID), or None
	Err     int                                        // slot of a returned error's itab (its data word follows), or None
	// Save keeps this register at a call's entry for its return sites (Base: Saved), or None.
	// At a goroutine-start site it is the register holding the g the site is about: the
	// creating goroutine at the entry, the new one at the return.
	Save int
	// Itab is a slot holding an interface's itab whose concrete type the decoder wants named
	// (Raw.ItabType), or None.
	Itab int
	// Key, at a span's entry, is the slot whose value names the controller instance the span
	// belongs to (a work queue's processing set, a controller's receiver), or None. User space
	// learns which controller a key is from the span; once it excluded that controller it
	// writes the key into the kernel's excluded map, and the entry exits before any record.
	Key int
	// Type is a slot holding the type word of an empty interface (any) whose dynamic type the
	// decoder wants named (Raw.ObjectType), or None.
	Type int
}

// Fields are the struct fields the layout reads, strings first, in slot order.
func (l *Layout) Fields() []FieldRef {
	var out []FieldRef
	for _, s := range l.Strings {
		if s.Base != None {
			out = append(out, s.Field)
		}
	}
	for _, v := range l.Values {
		if v.Base != None && v.Base != Frames && v.Field.Type != "" {
			out = append(out, v.Field)
		}
	}
	return out
}

// Decoder turns a raw event of one site into a span event.
type Decoder func(r *Raw) span.Event

// Probe is one catalog entry.
type Probe struct {
	// ID names the probe in output and flags.
	ID string
	// Module is the Go module whose code the probe targets; the probe applies only to
	// binaries that contain it. Empty: any binary.
	Module string
	// MinVersion and MaxVersion bound the module versions (semver, inclusive) whose code has
	// this layout. Empty: unbounded.
	MinVersion, MaxVersion string
	// Symbol matches the functions to probe, except those Unless matches (when set).
	Symbol, Unless *regexp.Regexp
	Role           Role
	// Result, when set, decides between the layouts of one probe when the module's version
	// is unknown (a devel or replaced build): the size of a result type the layout expects.
	// (The functions' argument sizes cannot: for ABIInternal functions .gopclntab records
	// the arguments' spill area only, not the results, which are in registers.)
	Result *ResultSize
	// EntryOnly probes have no return sites (the function never returns, like runtime.goexit1).
	EntryOnly bool
	// Calls, when set, puts the probe's two sites at direct calls inside each function Symbol
	// matches, instead of at that function's entry and RETs (see CallPair).
	Calls *CallPair
	// ReturnCallers, when set, matches functions that hold every call of the probed functions,
	// all of them direct calls: no func value or interface method reaches the probed functions
	// themselves. On amd64 the plan then probes the return at the instruction after each
	// call (the return address, where the results are still in the ABI registers and g in R14)
	// instead of at the RETs, which the kernel single-steps, when at least one of those
	// instructions is one the kernel emulates and no branch of a caller targets one; otherwise
	// the RETs. (On arm64 the kernel simulates RET: the RETs stay.)
	ReturnCallers *regexp.Regexp
	// Bracket, when set, puts the probe's two sites in two functions: the entry site at the
	// single direct call, in each function Symbol matches, of a function Bracket.Call matches,
	// and the return site at the entry of the sibling method Bracket.End (a work queue's Get
	// hands an item to a worker, its Done ends the item). Both or neither are attached: where
	// the function has not exactly one such call, the probe does not apply to it.
	Bracket *Bracket
	// SupersededBy, when set, leaves the probe out of a plan that attaches the probe of that
	// ID, whose spans already cover the functions' work at a lower cost (controller-runtime's
	// Reconcile covers the items of its reconcile.Request queue).
	SupersededBy string
	// Enriches, when set, names the span probe inside whose spans this span probe's function
	// runs (a kube-controller-manager sync handler inside its work queue's item:
	// client-go/workqueue), whose spans have the controller, the object and the result without
	// it. At DetailCalls the two make one span, with the handler's start, error type and
	// message. At DetailReconcile the probe is left out of a plan where that one has sites (its
	// return sites are RETs, which the kernel single-steps, for the handler's error alone) and
	// kept where it has none (Detail.Catalog); a per-controller detail attaches it with the call
	// probes (CallProbes), recording only in the spans of controllers at calls.
	Enriches string
	// ItemResult marks a call probe whose hits say what a work-queue item's worker did with it
	// (a requeue, a retry): the span's result, kept at every Detail.
	ItemResult bool
	// DeferredRead marks an entry-only probe whose entry reads nothing when it is hit: it keeps
	// the register Entry.Save (a pointer to an out-parameter the call fills, as cache Get's
	// obj) in the goroutine's state, and at the goroutine's next hit, whatever its site, the
	// kernel reads the strings Entry names through that pointer (Base Saved) and sends them as a
	// deferred record of the entry site, decoded by DecodeReturn. The call has returned by then,
	// so no return site (a RET the kernel single-steps) is needed. Only inside a span.
	DeferredRead bool
	// ItemKnown marks a work-queue probe (the bracket, its requeue calls) of a shape whose item
	// is known by the word in slot 2 at each of its sites: a string key's data pointer, a
	// pointer item, a number (at Get, the processing set's insert takes it there as at Done).
	// It pairs an item's Done with its Get when the worker handed the item to another
	// goroutine (span.Event.Item); NamespacedName-like structs and other shapes are passed to
	// the insert by address, so their items are not known that way.
	ItemKnown bool
	// Fallback probes are used only when no earlier catalog entry with the same ID found
	// sites: a Calls probe's shape is looked for first, the plain sites are the fallback.
	Fallback bool
	Entry    Layout
	Return   Layout
	// DecodeEntry and DecodeReturn interpret the two sites' events.
	DecodeEntry, DecodeReturn Decoder
}

// CallPair names two functions the probed function calls directly, one after the other: the
// probe's entry site is the `CALL` of Entry, its return site the `CALL` of Return that follows
// (none for an EntryOnly probe, whose Return is ""),
// each read with the callee's arguments in the ABI registers. The kernel emulates a uprobe on
// `CALL rel32` (amd64) and simulates `BL` (arm64), where a RET (amd64) or the entry's store
// (arm64) is single-stepped. The plan takes these sites only when the function has exactly one
// direct call of each, in that order; otherwise the probe does not apply (its Fallback does).
type CallPair struct {
	Entry, Return string
}

// Bracket names the two sites of a span that begins inside one method and ends at the entry
// of another of the same type (Probe.Bracket).
type Bracket struct {
	// Call matches the callee whose direct call in the probed function opens the span.
	Call *regexp.Regexp
	// End is the name of the method whose entry ends the span, in place of the probed
	// function's last name element (".Done" for ".Get").
	End string
}

// ResultSize names a result type by an interface method that returns it (symbols.Binary.
// MethodResultSize): Method's result Out has type Type, of Size bytes for this layout.
type ResultSize struct {
	Method string
	Out    int
	Type   string
	Size   int
}

// reconcileResult is reconcile.Result of a reconciler's Reconcile method: {Requeue,
// RequeueAfter} (16 bytes) until v0.22, with Priority *int (24 bytes) from v0.23.
func reconcileResult(size int) *ResultSize {
	return &ResultSize{Method: "Reconcile", Out: 0, Type: "reconcile.Result", Size: size}
}

func str(ptr, length int) StringArg { return StringArg{Ptr: ptr, Len: length, Base: None} }

var noString = StringArg{Ptr: None, Len: None, Base: None}

// field reads a string field of the struct that register base points to (or Saved).
func field(base int, typ, path string) StringArg {
	return StringArg{Ptr: None, Len: None, Base: base, Field: FieldRef{Type: typ, Path: path}}
}

// layout returns a Layout that reads nothing; its methods add what a site reads.
func layout() Layout {
	l := Layout{Ctx: None, Err: None, Save: None, Itab: None, Key: None, Type: None}
	for i := range l.Strings {
		l.Strings[i] = noString
	}
	for i := range l.Values {
		l.Values[i] = ValueArg{Base: None}
	}
	return l
}

func (l Layout) str(i int, a StringArg) Layout { l.Strings[i] = a; return l }
func (l Layout) val(i int, v ValueArg) Layout  { l.Values[i] = v; return l }
func (l Layout) ctx(slot int) Layout           { l.Ctx = slot; return l }
func (l Layout) err(slot int) Layout           { l.Err = slot; return l }
func (l Layout) save(slot int) Layout          { l.Save = slot; return l }
func (l Layout) itab(slot int) Layout          { l.Itab = slot; return l }
func (l Layout) key(slot int) Layout           { l.Key = slot; return l }
func (l Layout) typ(slot int) Layout           { l.Type = slot; return l }

const (
	controllerRuntime = "sigs.k8s.io/controller-runtime"
	clientGo          = "k8s.io/client-go"
	kubernetes        = "k8s.io/kubernetes"
	crController      = "sigs.k8s.io/controller-runtime/pkg/internal/controller.Controller"
	restRequest       = "k8s.io/client-go/rest.Request"
	objectMeta        = "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta"
	namespacedName    = "k8s.io/apimachinery/pkg/types.NamespacedName"
	statusError       = "k8s.io/apimachinery/pkg/api/errors.StatusError"
	// typeMetaSize is the size of metav1.TypeMeta (two strings), which every Kubernetes object
	// embeds right before its ObjectMeta: the UID of any object is at 32 + ObjectMeta.UID.
	typeMetaSize = 32
)

// meta reads a string field of the ObjectMeta of the Kubernetes object that base points to.
func meta(base int, path string) StringArg {
	return StringArg{Ptr: None, Len: None, Base: base, Field: FieldRef{Type: objectMeta, Path: path, Add: typeMetaSize}}
}

// objectReturn reads an object's namespace, name, UID and resourceVersion (strings 0-3) from
// the object base points to.
func objectReturn(base int) Layout {
	return layout().str(0, meta(base, "Namespace")).str(1, meta(base, "Name")).
		str(2, meta(base, "UID")).str(3, meta(base, "ResourceVersion"))
}

// crInternal matches the functions of controller-runtime's internal controller package. The
// generic Reconcile's shape body (v0.19+) is called only there: by reconcileHandler's shape body
// and by the instantiation wrapper (*Controller[reconcile.Request]).Reconcile, which method
// values and the reconcile.Reconciler interface reach. A shape body is never a func value nor
// an itab method (those are the wrappers), and Controller is internal to controller-runtime.
var crInternal = regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.`)

// Slots of the reconcile request {Namespace, Name} strings, by layout.
var (
	crGenericEntry = layout().str(0, field(0, crController, "Name")).str(1, str(4, 5)).str(2, str(6, 7)).ctx(3).key(0)
	crLegacyEntry  = layout().str(0, field(0, crController, "Name")).str(1, str(3, 4)).str(2, str(5, 6)).ctx(2).key(0)
	// sync handlers (recv, ctx context.Context, key string) error
	syncEntry  = layout().str(0, str(3, 4))
	syncReturn = layout().err(0)
)

// Catalog returns the built-in probe catalog, in a slice of its own: a caller may add to it,
// take from it or reorder it. The probes themselves are shared: do not change them. A probe ID
// may appear once per layout (module version range); the plan uses the entries whose range
// holds the binary's version.
func Catalog() []*Probe {
	out := slices.Clone(handlerProbes)
	out = append(out, syncProbes...)
	out = append(out, GoroutineProbes...)
	out = append(out, QueueProbes...)
	out = append(out, WorkQueueProbes...)
	return append(out, WatchEventProbes...)
}

// handlerProbes are the catalog's probes of controller-runtime's reconcile and of the calls a
// reconcile makes through controller-runtime and client-go.
var handlerProbes = []*Probe{
	// controller-runtime: every controller of a manager through one function.
	{ID: "controller-runtime/reconcile", Module: controllerRuntime, MinVersion: "v0.23.0", Role: RoleSpan,
		// generic shape body: recv, dict, ctx, req; returns Result{Requeue, RequeueAfter, Priority}, error
		Result: reconcileResult(24),
		Symbol: regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.\(\*Controller\[go\.shape\..*\]\)\.Reconcile$`),
		Entry:  crGenericEntry, Return: layout().err(3), ReturnCallers: crInternal,
		DecodeEntry: decodeReconcileEntry, DecodeReturn: decodeReconcileReturn(0, 1)},
	{ID: "controller-runtime/reconcile", Module: controllerRuntime, MinVersion: "v0.19.0", MaxVersion: "v0.22.99", Role: RoleSpan,
		// generic; Result{Requeue, RequeueAfter}
		Result: reconcileResult(16),
		Symbol: regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.\(\*Controller\[go\.shape\..*\]\)\.Reconcile$`),
		Entry:  crGenericEntry, Return: layout().err(2), ReturnCallers: crInternal,
		DecodeEntry: decodeReconcileEntry, DecodeReturn: decodeReconcileReturn(0, 1)},
	{ID: "controller-runtime/reconcile", Module: controllerRuntime, MaxVersion: "v0.18.99", Role: RoleSpan,
		// not generic: recv, ctx, req
		Symbol: regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.\(\*Controller\)\.Reconcile$`),
		Entry:  crLegacyEntry, Return: layout().err(2),
		DecodeEntry: decodeReconcileEntry, DecodeReturn: decodeReconcileReturn(0, 1)},

	// controller-runtime informer cache reads: Get(ctx, key, obj, opts...) error; the object's
	// UID is read at return through the obj pointer kept at entry.
	{ID: "controller-runtime/cache-get", Module: controllerRuntime, Role: RoleCall,
		Symbol:      regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/cache\.\(\*informerCache\)\.Get$`),
		Entry:       layout().str(0, str(3, 4)).str(1, str(5, 6)).save(8).itab(7),
		Return:      layout().str(0, meta(Saved, "UID")).str(1, meta(Saved, "ResourceVersion")).err(0),
		DecodeEntry: decodeCacheEntry(span.CallCacheGet), DecodeReturn: decodeCacheGetReturn},
	{ID: "controller-runtime/cache-list", Module: controllerRuntime, Role: RoleCall,
		Symbol:      regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/cache\.\(\*informerCache\)\.List$`),
		Entry:       layout().itab(3),
		Return:      layout().err(0),
		DecodeEntry: decodeCacheEntry(span.CallCacheList), DecodeReturn: decodeCallReturn},

	// client-go: every API request (typed clients, dynamic clients, controller-runtime's
	// client) goes through (*Request).request(ctx, fn) error.
	{ID: "client-go/request", Module: clientGo, Role: RoleCall,
		Symbol: regexp.MustCompile(`^k8s\.io/client-go/rest\.\(\*Request\)\.request$`),
		Entry: layout().str(0, field(0, restRequest, "verb")).str(1, field(0, restRequest, "resource")).
			str(2, field(0, restRequest, "namespace")).str(3, field(0, restRequest, "resourceName")).
			str(4, field(0, restRequest, "subresource")),
		Return:      layout().err(0),
		DecodeEntry: decodeRequestEntry, DecodeReturn: decodeCallReturn},
	// ... and the object an API call returned: Do(ctx).Into(obj) decodes the response into
	// obj right after request returns (controller-runtime's client and client-go's typed
	// clients alike: a write's object is updated from the response). Result is passed by
	// value on the stack; obj (runtime.Object) is in slots 0-1. Its metadata is read at the
	// return through the data word kept at the entry, and given to the API call just ended.
	{ID: "client-go/result-object", Module: clientGo, Role: RoleCall,
		Symbol:      regexp.MustCompile(`^k8s\.io/client-go/rest\.Result\.Into$`),
		Entry:       layout().save(1),
		Return:      objectReturn(Saved).err(0),
		DecodeEntry: decodeIgnore, DecodeReturn: decodeResultObject},
	// client-go listers (generated listers of client-go v0.31+ are listers.ResourceIndexer[T]):
	// Get(name) (T, error), one generic shape body for every pointer type. The object's
	// metadata is read at the return from the result in slot 0: kube-controller-manager's
	// controllers read the object of their key this way, first thing in their sync handler.
	// The receiver {indexer cache.Indexer; resource schema.GroupResource; namespace string} is
	// passed by value in slots 0-7: the resource's name (GroupResource.Resource) in slots 4-5.
	{ID: "client-go/lister-get", Module: clientGo, Role: RoleCall,
		Symbol:      regexp.MustCompile(`^k8s\.io/client-go/listers\.ResourceIndexer\[go\.shape\.\*uint8\]\.Get$`),
		Entry:       layout().str(0, str(4, 5)),
		Return:      objectReturn(0).err(1),
		DecodeEntry: decodeListerEntry, DecodeReturn: decodeObjectReturn},
	// ... and its HTTP status: transformResponse(ctx, resp *http.Response, req) runs inside it.
	{ID: "client-go/response", Module: clientGo, Role: RoleCall,
		Symbol:      regexp.MustCompile(`^k8s\.io/client-go/rest\.\(\*Request\)\.transformResponse$`),
		Entry:       layout().val(0, ValueArg{Base: 3, Field: FieldRef{Type: "net/http.Response", Path: "StatusCode"}}),
		Return:      layout(),
		DecodeEntry: decodeResponseStatus, DecodeReturn: decodeIgnore},
}

// ReconcileReads are the forms controller-runtime's cache read probe takes at DetailReconcile:
// one hit per cache Get, no return site, and the object's namespace, name, UID and
// resourceVersion read as the cache holds them, so that a span has the reconciled object's UID
// and resourceVersion (and the trigger they give) for one emulated hit more.
var ReconcileReads = []*Probe{
	// The cache reader copies the object it holds into the caller's: in CacheReader.Get,
	// reflect.Indirect(outVal).Set(reflect.Indirect(objVal)), one direct call of
	// reflect.Value.Set(v, x Value), Values of three words: x (slots 3-5) is the object read,
	// its data pointer in slot 4. At that `CALL` (emulated) the object is complete and is what
	// the caller gets; it is read there, at once. Every cache of a manager reads through a
	// CacheReader (informerCache, the multi-namespace cache), so this sees them all.
	{ID: "controller-runtime/cache-get", Module: controllerRuntime, Role: RoleCall,
		Symbol:      regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/cache/internal\.\(\*CacheReader\)\.Get$`),
		Calls:       &CallPair{Entry: "reflect.Value.Set"},
		EntryOnly:   true,
		Entry:       objectReturn(4),
		Return:      layout(),
		DecodeEntry: decodeObjectRead, DecodeReturn: decodeIgnore},
	// Where CacheReader.Get has another shape: a deferred read. informerCache.Get(ctx, key,
	// obj, opts...) fills obj (slots 7-8, an interface: its data word in 8); its entry keeps it,
	// and its namespace, name, UID and resourceVersion are read at the goroutine's next hit (a
	// later call's, or the reconcile's end). Not exact where the reconcile changed obj before
	// that hit (a write through it fills it from the response) or let it die (its memory may
	// hold another value by then): a read is kept only when it names the reconciled object.
	{ID: "controller-runtime/cache-get", Module: controllerRuntime, Role: RoleCall, Fallback: true,
		Symbol:    regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/cache\.\(\*informerCache\)\.Get$`),
		EntryOnly: true, DeferredRead: true,
		Entry:       objectReturn(Saved).save(8),
		Return:      layout(),
		DecodeEntry: decodeIgnore, DecodeReturn: decodeObjectRead},
}

// addCaller reads, at a queue add's entry, the return addresses of its innermost frames: the
// function that added (past the queues' own code, Raw.Worker) names an add of kind other.
// Frame-pointer reads, no trap.
var addCaller = ValueArg{Base: Frames}

// QueueProbes see keys added to work queues, so a span can say how long its object waited:
// controller-runtime's priority queue (v0.20+, the default from v0.23) and client-go's typed
// work queue (kube-controller-manager, older controller-runtime). Only the first item of a
// multi-item add is seen.
var QueueProbes = []*Probe{
	{ID: "controller-runtime/queue-add", Module: controllerRuntime, Role: RoleMark,
		// AddWithOpts(o AddOpts{After, RateLimited, Priority}, items ...T): recv, dict, o (2-4), items (5-7)
		Symbol:    regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/controller/priorityqueue\.\(\*priorityqueue\[go\.shape\.struct \{ k8s\.io/apimachinery/pkg/types\.NamespacedName \}\]\)\.AddWithOpts$`),
		EntryOnly: true,
		Entry: layout().str(0, StringArg{Ptr: None, Len: None, Base: 5, Field: FieldRef{Type: "k8s.io/apimachinery/pkg/types.NamespacedName", Path: "Namespace"}}).
			str(1, StringArg{Ptr: None, Len: None, Base: 5, Field: FieldRef{Type: "k8s.io/apimachinery/pkg/types.NamespacedName", Path: "Name"}}).
			val(0, addCaller),
		Return:      layout(),
		DecodeEntry: decodePriorityQueueAdd, DecodeReturn: decodeIgnore},
	// ... and the delay its rate limiter gives a rate-limited add (AddRateLimited, after an
	// error): the priority queue asks its limiter on its own goroutine. Its default is client-go's
	// exponential limiter (5ms·2ⁿ); controller-runtime's default without the priority queue is
	// a MaxOf of that and a bucket limiter (the outermost answer counts). When(item T)
	// time.Duration: recv, dict, namespace (2-3), name (4-5); the delay in slot 0 at each RET.
	rateLimitProbe("TypedItemExponentialFailureRateLimiter"),
	rateLimitProbe("TypedMaxOfRateLimiter"),
	{ID: "client-go/queue-add", Module: clientGo, Role: RoleMark,
		// (*Typed[string]).Add(item string): recv, dict, item (2-3)
		Symbol:    regexp.MustCompile(`^k8s\.io/client-go/util/workqueue\.\(\*Typed\[go\.shape\.string\]\)\.Add$`),
		EntryOnly: true,
		Entry:     layout().str(0, str(2, 3)).val(0, addCaller), Return: layout(),
		DecodeEntry: decodeKeyQueueAdd, DecodeReturn: decodeIgnore},
	{ID: "client-go/queue-add", Module: clientGo, Role: RoleMark,
		// (*Typed[reconcile.Request]).Add(item): recv, dict, namespace (2-3), name (4-5)
		Symbol:    regexp.MustCompile(`^k8s\.io/client-go/util/workqueue\.\(\*Typed\[go\.shape\.struct \{ k8s\.io/apimachinery/pkg/types\.NamespacedName \}\]\)\.Add$`),
		EntryOnly: true,
		Entry:     layout().str(0, str(2, 3)).str(1, str(4, 5)).val(0, addCaller), Return: layout(),
		DecodeEntry: decodeRequestQueueAdd, DecodeReturn: decodeIgnore},
}

// WatchEventProbes see an informer deliver a watch event to a handler: the handler's entry
// (one emulated hit per event and handler) reads the event's object (its dynamic type, and the
// namespace, name, UID and resourceVersion of its ObjectMeta) on the goroutine that delivers
// it. A queue add on that goroutine is then that event's (span.Trigger). Only the handler
// types the informer calls through its interface are probed: controller-runtime's
// EventHandler (every For, Owns and Watches), and client-go's ResourceEventHandlerFuncs
// through its pointer method, which the interface's itab holds (a FilteringResourceEventHandler
// passes the events it keeps to such an inner handler: probing both would hit twice).
var WatchEventProbes = []*Probe{
	// controller-runtime v0.15+: (*EventHandler[object, request]).OnAdd(obj any,
	// isInInitialList bool): recv, dict, obj (2-3), isInInitialList (4)
	watchEventProbe(controllerRuntime, crHandler+"OnAdd$", "add", 2, None),
	// OnUpdate(oldObj, newObj any): recv, dict, old (2-3), new (4-5)
	watchEventProbe(controllerRuntime, crHandler+"OnUpdate$", "update", 4, 2),
	// OnDelete(obj any): recv, dict, obj (2-3)
	watchEventProbe(controllerRuntime, crHandler+"OnDelete$", "delete", 2, None),
	// client-go: (*ResourceEventHandlerFuncs).OnAdd(obj any, isInInitialList bool): recv, obj (1-2)
	watchEventProbe(clientGo, cgHandler+"OnAdd$", "add", 1, None),
	// OnUpdate(oldObj, newObj any): recv, old (1-2), new (3-4)
	watchEventProbe(clientGo, cgHandler+"OnUpdate$", "update", 3, 1),
	watchEventProbe(clientGo, cgHandler+"OnDelete$", "delete", 1, None),
}

const (
	crHandler = `^sigs\.k8s\.io/controller-runtime/pkg/internal/source\.\(\*EventHandler\[go\.shape\..*\]\)\.`
	cgHandler = `^k8s\.io/client-go/tools/cache\.\(\*ResourceEventHandlerFuncs\)\.`
)

// watchEventProbe reads, at the entry of a handler method, the object of an `any` whose type
// word is in slot obj (its data word next): its type, namespace, name, UID and resourceVersion
// (strings 0-3), and for an update the old object's resourceVersion (string 4) from the `any`
// in slot old: a resync delivers an update whose two versions are one.
func watchEventProbe(module, symbol, event string, obj, old int) *Probe {
	entry := objectReturn(obj + 1).typ(obj)
	if old != None {
		entry = entry.str(4, meta(old+1, "ResourceVersion"))
	}
	return &Probe{ID: "informer/" + event, Module: module, Role: RoleMark, EntryOnly: true,
		Symbol: regexp.MustCompile(symbol),
		Entry:  entry, Return: layout(),
		DecodeEntry: decodeWatchEvent(event), DecodeReturn: decodeIgnore}
}

// fieldUses says, for each struct field a probe or the error reader reads, what it gives
// spans: what they lack when its offset is unknown.
var fieldUses = map[string]string{
	"runtime.g goid":                   "goroutine IDs (events say goid 0; goroutines are still told apart by their g pointer)",
	crController + " Name":             "the controller name of controller-runtime reconcile spans",
	restRequest + " verb":              "the verb of API calls",
	restRequest + " resource":          "the resource of API calls",
	restRequest + " namespace":         "the namespace of API calls",
	restRequest + " resourceName":      "the object name of API calls",
	restRequest + " subresource":       "the subresource of API calls",
	objectMeta + " UID":                "the object UID of cache and lister reads, of API writes (and of the span) and of watch events (triggers)",
	objectMeta + " ResourceVersion":    "the object resourceVersion of cache and lister reads, of API writes and of watch events (triggers)",
	objectMeta + " Namespace":          "the object namespace of lister reads, of API writes and of watch events (triggers)",
	objectMeta + " Name":               "the object name of lister reads, of API writes (creates) and of watch events (triggers)",
	"net/http.Response StatusCode":     "the HTTP status of API calls",
	namespacedName + " Namespace":      "the namespace of work-queue adds (the span's time waiting in the queue)",
	namespacedName + " Name":           "the name of work-queue adds (the span's time waiting in the queue)",
	"errors.errorString s":             "the message of *errors.errorString errors (the type is still named)",
	"fmt.wrapError msg":                "the message of *fmt.wrapError errors (the type is still named)",
	"fmt.wrapErrors msg":               "the message of *fmt.wrapErrors errors (the type is still named)",
	statusError + " ErrStatus.Message": "the message of *errors.StatusError errors (the type is still named)",
}

func rateLimitProbe(limiter string) *Probe {
	return &Probe{ID: "controller-runtime/queue-rate-limit", Module: clientGo, Role: RoleMark,
		Symbol:      regexp.MustCompile(`^k8s\.io/client-go/util/workqueue\.\(\*` + limiter + `\[go\.shape\.struct \{ k8s\.io/apimachinery/pkg/types\.NamespacedName \}\]\)\.When$`),
		Entry:       layout().str(0, str(2, 3)).str(1, str(4, 5)),
		Return:      layout(),
		DecodeEntry: decodeRateLimitEntry, DecodeReturn: decodeRateLimitReturn}
}

// GoroutineProbes let goroutines started inside a span (client-go's slowStartBatch creates
// pods from such goroutines) join that span: the kernel copies the span state from the
// creating goroutine to the new one and drops it in runtime.goexit1. They cost three probe
// hits per goroutine created and ended in a traced process.
//
// Go's runtime.newproc (every go statement) runs a closure on the system stack (g0) that calls
// newproc1(fn, callergp, …) and hands the new g to runqput(pp, newg, next): both calls are
// probed there, at instructions the kernel does not single-step (Go 1.18 to 1.27 have this
// closure; newproc1's other caller, newcoro, makes coroutines that are not goroutines started
// by a go statement). Where the closure does not have that shape, newproc1's entry and RETs are
// probed instead.
var GoroutineProbes = []*Probe{
	{ID: "runtime/goroutine-start", Role: RoleSpawn,
		Symbol: regexp.MustCompile(`^runtime\.newproc\.func1$`),
		Calls:  &CallPair{Entry: "runtime.newproc1", Return: "runtime.runqput"},
		// the creating g: newproc1's callergp (slot 1); the new g: runqput's gp (slot 1)
		Entry: layout().save(1), Return: layout().save(1),
		DecodeEntry: decodeIgnore, DecodeReturn: decodeIgnore},
	{ID: "runtime/goroutine-start", Role: RoleSpawn, Fallback: true,
		// newproc1(fn *funcval, callergp *g, callerpc uintptr, parked bool, waitreason) *g, on g0
		Symbol: regexp.MustCompile(`^runtime\.newproc1$`),
		// the creating g: callergp (slot 1); the new g: the result (slot 0)
		Entry: layout().save(1), Return: layout().save(0),
		DecodeEntry: decodeIgnore, DecodeReturn: decodeIgnore},
	{ID: "runtime/goroutine-exit", Role: RoleExit,
		Symbol: regexp.MustCompile(`^runtime\.goexit1$`), EntryOnly: true,
		Entry: layout(), Return: layout(),
		DecodeEntry: decodeIgnore, DecodeReturn: decodeIgnore},
}

// SyncHandlers are kube-controller-manager's client-go workqueue sync handlers:
// (recv, ctx, key string) error, one span per call, the object from the key.
var SyncHandlers = []struct {
	Controller string
	Symbol     string
	Entry      Layout
	Return     Layout
}{
	{"replicaset", "k8s.io/kubernetes/pkg/controller/replicaset.(*ReplicaSetController).syncReplicaSet", syncEntry, syncReturn},
	{"deployment", "k8s.io/kubernetes/pkg/controller/deployment.(*DeploymentController).syncDeployment", syncEntry, syncReturn},
	{"statefulset", "k8s.io/kubernetes/pkg/controller/statefulset.(*StatefulSetController).sync", syncEntry, syncReturn},
	{"daemonset", "k8s.io/kubernetes/pkg/controller/daemon.(*DaemonSetsController).syncDaemonSet", syncEntry, syncReturn},
	{"job", "k8s.io/kubernetes/pkg/controller/job.(*Controller).syncJob", syncEntry, syncReturn},
	// sync(ctx, key) (*time.Duration, error)
	{"cronjob", "k8s.io/kubernetes/pkg/controller/cronjob.(*ControllerV2).sync", syncEntry, layout().err(1)},
	// syncService(logger klog.Logger (3 words), key string) error
	{"endpointslice", "k8s.io/kubernetes/pkg/controller/endpointslice.(*Controller).syncService", layout().str(0, str(4, 5)), syncReturn},
	{"endpoint", "k8s.io/kubernetes/pkg/controller/endpoint.(*Controller).syncService", syncEntry, syncReturn},
	{"namespace", "k8s.io/kubernetes/pkg/controller/namespace.(*NamespaceController).syncNamespaceFromKey", syncEntry, syncReturn},
	{"serviceaccount", "k8s.io/kubernetes/pkg/controller/serviceaccount.(*ServiceAccountsController).syncNamespace", syncEntry, syncReturn},
}

// syncProbes are the catalog's probes of SyncHandlers.
var syncProbes = func() []*Probe {
	var out []*Probe
	for _, h := range SyncHandlers {
		p := SyncProbe(h.Controller, h.Symbol, h.Entry.key(0), h.Return) // key: the controller, the receiver
		p.Module = kubernetes
		p.Enriches = workQueueID // the work queue's item is the span at detail reconcile
		out = append(out, p)
	}
	return out
}()

// syncPrefix starts the ID of every sync-handler probe; the controller's name follows.
const syncPrefix = "sync/"

// SyncProbe is a span probe on a client-go style sync handler whose entry reads the key
// (namespace/name) as string 0 and whose return reads the error.
func SyncProbe(controller, symbol string, entry, ret Layout) *Probe {
	return &Probe{
		ID:           syncPrefix + controller,
		Symbol:       regexp.MustCompile("^" + regexp.QuoteMeta(symbol) + "$"),
		Role:         RoleSpan,
		Entry:        entry,
		Return:       ret,
		DecodeEntry:  decodeSyncEntry(controller),
		DecodeReturn: decodeSyncReturn,
	}
}

// SelectSyncHandlers returns catalog without the sync-handler probes (SyncProbe: kube-
// controller-manager's, --probe ones) whose controller, fixed per probe, selects rejects, and
// the IDs of those left out: not attached, their calls cost no probe hit at all. Every other
// probe stays: work queues and controller-runtime name their controller at run time, where
// user space and the kernel drop the unselected ones.
func SelectSyncHandlers(catalog []*Probe, selects func(controller string) bool) (kept []*Probe, left []string) {
	kept = make([]*Probe, 0, len(catalog))
	for _, p := range catalog {
		if name, ok := strings.CutPrefix(p.ID, syncPrefix); ok && !selects(name) {
			left = append(left, p.ID)
			continue
		}
		kept = append(kept, p)
	}
	return kept, left
}
