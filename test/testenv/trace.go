package testenv

import (
	"context"
	"testing"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// Trace makes a tracer of the whole catalog that writes its spans into a new sink and logs
// nothing, and traces the process pid with it; what names the process in the failure. The
// caller runs and closes the tracer.
func Trace(t testing.TB, what string, pid int) (*tracer.Tracer, *testkit.Sink, *probes.Plan) {
	t.Helper()
	return traceWith(t, tracer.Options{}, "trace "+what, func(tr *tracer.Tracer) (*probes.Plan, error) { return tr.TracePID(pid) })
}

// TraceDetail is Trace with the catalog's probes that detail keeps (--detail).
func TraceDetail(t testing.TB, what string, pid int, detail probes.Detail) (*tracer.Tracer, *testkit.Sink, *probes.Plan) {
	t.Helper()
	return traceWith(t, tracer.Options{Catalog: detail.Catalog(probes.Catalog())}, "trace "+what, func(tr *tracer.Tracer) (*probes.Plan, error) { return tr.TracePID(pid) })
}

// TraceCatalog is Trace with catalog in place of the whole catalog.
func TraceCatalog(t testing.TB, what string, pid int, catalog []*probes.Probe) (*tracer.Tracer, *testkit.Sink, *probes.Plan) {
	t.Helper()
	return traceWith(t, tracer.Options{Catalog: catalog}, "trace "+what, func(tr *tracer.Tracer) (*probes.Plan, error) { return tr.TracePID(pid) })
}

// TraceWith is Trace with a tracer of opts (the whole catalog unless it names one; its Writer
// and Logger are set here), e.g. a per-controller detail.
func TraceWith(t testing.TB, what string, pid int, opts tracer.Options) (*tracer.Tracer, *testkit.Sink, *probes.Plan) {
	t.Helper()
	return traceWith(t, opts, "trace "+what, func(tr *tracer.Tracer) (*probes.Plan, error) { return tr.TracePID(pid) })
}

// traceWith makes a tracer of opts (the whole catalog unless it names one) that writes its
// spans into a new sink and logs nothing, and calls start with it; doing names start in the
// failure.
func traceWith(t testing.TB, opts tracer.Options, doing string, start func(*tracer.Tracer) (*probes.Plan, error)) (*tracer.Tracer, *testkit.Sink, *probes.Plan) {
	t.Helper()
	s := &testkit.Sink{}
	opts.Writer, opts.Logger = s, testkit.Quiet()
	tr, err := tracer.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := start(tr)
	if err != nil {
		tr.Close()
		t.Fatalf("%s: %v", doing, err)
	}
	return tr, s, plan
}

// TraceExe makes a tracer of the whole catalog that writes its spans into a new sink, attaches
// the executable at path before any process runs it, and traces every process that execs it
// from its first instruction (as `trace --exe` does) until ctx ends. The caller runs and closes
// the tracer.
func TraceExe(t testing.TB, ctx context.Context, path string) (*tracer.Tracer, *testkit.Sink, *probes.Plan) {
	t.Helper()
	return TraceExeWith(t, ctx, path, tracer.Options{})
}

// TraceExeWith is TraceExe with a tracer of opts (its Writer, Logger and AdmitExecs are set
// here), e.g. a choice of controllers.
func TraceExeWith(t testing.TB, ctx context.Context, path string, opts tracer.Options) (*tracer.Tracer, *testkit.Sink, *probes.Plan) {
	t.Helper()
	opts.AdmitExecs = true
	tr, s, plan := traceWith(t, opts, "attach "+path, func(tr *tracer.Tracer) (*probes.Plan, error) { return tr.AttachExe(path) })
	execs, err := tr.WatchExecs(ctx)
	if err != nil {
		tr.Close()
		t.Fatalf("watch execs: %v", err)
	}
	go func() {
		for range execs { // WatchExecs admits the executable's processes itself
		}
	}()
	return tr, s, plan
}
