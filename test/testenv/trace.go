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
	s := &testkit.Sink{}
	tr, err := tracer.New(tracer.Options{Writer: s, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := tr.TracePID(pid)
	if err != nil {
		tr.Close()
		t.Fatalf("trace %s: %v", what, err)
	}
	return tr, s, plan
}

// TraceExe makes a tracer of the whole catalog that writes its spans into a new sink, attaches
// the executable at path before any process runs it, and traces every process that execs it
// from its first instruction (as `trace --exe` does) until ctx ends. The caller runs and closes
// the tracer.
func TraceExe(t testing.TB, ctx context.Context, path string) (*tracer.Tracer, *testkit.Sink, *probes.Plan) {
	t.Helper()
	s := &testkit.Sink{}
	tr, err := tracer.New(tracer.Options{Writer: s, Logger: testkit.Quiet(), AdmitExecs: true})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := tr.AttachExe(path)
	if err != nil {
		tr.Close()
		t.Fatalf("attach %s: %v", path, err)
	}
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
