// Package controller is the fake controller's reconcile, in one place for the two programs the
// probes are tested and measured on: test/fakectl (the tests' fake controller, which prints its
// ground truth) and test/bench/testdata/reconcileloop (the benchmarks' traced process). It has
// the shapes of controller-runtime's pkg/internal/controller and pkg/reconcile without any
// Kubernetes dependency: a generic Controller whose first field is its Name, a Reconcile with
// controller-runtime's signature (ctx carrying a reconcile ID, a NamespacedName request,
// (Result, error) results, recovered panics), and a Handle shaped like its reconcileHandler.
//
// The probes find these functions by their symbols, which name this package's import path
// (Path): fakectltest.Probe points the catalog's reconcile probe at them. Reconcile and Handle
// are never inlined; their shapes are what the catalog's probe reads, so change them only
// together with controller-runtime's.
package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Path is this package's import path, the prefix of its functions' symbols and its types' names.
var Path = reflect.TypeFor[Request]().PkgPath()

// NamespacedName mirrors k8s.io/apimachinery/pkg/types.NamespacedName.
type NamespacedName struct{ Namespace, Name string }

// Request mirrors reconcile.Request.
type Request struct{ NamespacedName }

// Result mirrors controller-runtime v0.23+'s reconcile.Result.
type Result struct {
	Requeue      bool
	RequeueAfter time.Duration
	Priority     *int
}

// UID mirrors types.UID.
type UID string

type reconcileIDKey struct{}

// WithReconcileID returns ctx carrying the reconcile ID id, as controller-runtime's
// reconcileHandler adds it (the probe reads it from the context's value).
func WithReconcileID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, reconcileIDKey{}, UID(id))
}

// Controller mirrors the fields controller-runtime's Controller starts with.
type Controller[request comparable] struct {
	Name string
	Do   func(ctx context.Context, req request) (Result, error)
	// handled counts the reconciles that went through Handle.
	handled int
}

// Reconcile has controller-runtime's signature and, like it, recovers panics.
//
//go:noinline
func (c *Controller[request]) Reconcile(ctx context.Context, req request) (_ Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v [recovered]", r)
		}
	}()
	return c.Do(ctx, req)
}

// Handle calls Reconcile as controller-runtime's reconcileHandler does, from the same generic
// type. The compiler follows that call with a JMP, an instruction the kernel emulates (as it
// follows reconcileHandler's with a NOP): a return site at the return address
// (fakectltest.ReturnAddressProbe) is exact and not single-stepped.
//
//go:noinline
func (c *Controller[request]) Handle(ctx context.Context, req request) (res Result, err error) {
	if c.Do != nil {
		res, err = c.Reconcile(ctx, req)
	} else {
		err = errors.New("no reconciler")
	}
	c.handled++
	return
}
