// Package probes is reconscope's probe catalog: which Go functions to probe, in which
// modules, what each probe site reads (Go ABI register slots, struct-field offsets), and the
// pure functions that turn one decoded probe event into a span event.
//
// The catalog is data (Catalog below). Given a symbols.Binary, NewPlan turns it into the
// exact sites to attach, or says exactly what is missing.
package probes

import (
	"regexp"

	"github.com/reconscope/reconscope/pkg/span"
)

// Role says whether a probe opens a span or records a call inside one.
type Role uint8

// Roles. The values are the C ROLE_* constants (bpf/include/events.h).
const (
	RoleSpan Role = 1 // ROLE_SPAN
	RoleCall Role = 2 // ROLE_CALL
)

// Register slots of Go's register ABI (integer arguments and results, in order):
// amd64 RAX RBX RCX RDI RSI R8 R9 R10 R11, arm64 R0..R8. None means unused.
const None = -1

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
}

// Layout is what one site (entry or return) reads.
type Layout struct {
	Strings [3]StringArg
	Ctx     int // slot of the context.Context's data word (reconcile ID), or None
	Err     int // slot of a returned error's itab (its data word follows), or None
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
	// Symbol matches the functions to probe.
	Symbol *regexp.Regexp
	Role   Role
	Entry  Layout
	Return Layout
	// DecodeEntry and DecodeReturn interpret the two sites' events.
	DecodeEntry, DecodeReturn Decoder
}

func str(ptr, length int) StringArg { return StringArg{Ptr: ptr, Len: length, Base: None} }

var noString = StringArg{Ptr: None, Len: None, Base: None}

// controllerName reads controller-runtime's Controller.Name through the receiver (slot 0).
var controllerName = StringArg{Ptr: None, Len: None, Base: 0, Field: FieldRef{
	Type: "sigs.k8s.io/controller-runtime/pkg/internal/controller.Controller", Path: "Name"}}

const controllerRuntime = "sigs.k8s.io/controller-runtime"

// Catalog is the built-in probe catalog.
var Catalog = []*Probe{
	{
		// v0.23+: generic shape body; receiver, dictionary, ctx (2 words), req (ns, name);
		// returns Result{Requeue, RequeueAfter, Priority} then error.
		ID:           "controller-runtime/reconcile",
		Module:       controllerRuntime,
		MinVersion:   "v0.23.0",
		Symbol:       regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.\(\*Controller\[go\.shape\..*\]\)\.Reconcile$`),
		Role:         RoleSpan,
		Entry:        Layout{Strings: [3]StringArg{controllerName, str(4, 5), str(6, 7)}, Ctx: 3, Err: None},
		Return:       Layout{Strings: [3]StringArg{noString, noString, noString}, Ctx: None, Err: 3},
		DecodeEntry:  decodeReconcileEntry,
		DecodeReturn: decodeReconcileReturn(0, 1),
	},
	{
		// v0.19–v0.22: generic, Result{Requeue, RequeueAfter} then error.
		ID:           "controller-runtime/reconcile",
		Module:       controllerRuntime,
		MinVersion:   "v0.19.0",
		MaxVersion:   "v0.22.99",
		Symbol:       regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.\(\*Controller\[go\.shape\..*\]\)\.Reconcile$`),
		Role:         RoleSpan,
		Entry:        Layout{Strings: [3]StringArg{controllerName, str(4, 5), str(6, 7)}, Ctx: 3, Err: None},
		Return:       Layout{Strings: [3]StringArg{noString, noString, noString}, Ctx: None, Err: 2},
		DecodeEntry:  decodeReconcileEntry,
		DecodeReturn: decodeReconcileReturn(0, 1),
	},
	{
		// up to v0.18: not generic; receiver, ctx (2 words), req (ns, name).
		ID:           "controller-runtime/reconcile",
		Module:       controllerRuntime,
		MaxVersion:   "v0.18.99",
		Symbol:       regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.\(\*Controller\)\.Reconcile$`),
		Role:         RoleSpan,
		Entry:        Layout{Strings: [3]StringArg{controllerName, str(3, 4), str(5, 6)}, Ctx: 2, Err: None},
		Return:       Layout{Strings: [3]StringArg{noString, noString, noString}, Ctx: None, Err: 2},
		DecodeEntry:  decodeReconcileEntry,
		DecodeReturn: decodeReconcileReturn(0, 1),
	},
}
