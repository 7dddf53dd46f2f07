// Package testkit is what reconscope's tests share, so that each exists once: waiting for a
// condition (Eventually, WaitFor, Poll), running a stage in the background (Go), a buffer safe
// for a writer in another goroutine (LogBuffer), a logger that says nothing (Quiet), a span sink
// (Sink), spans compared with a program's ground truth (Compare, Mismatch) and read as runs of
// one detail (DetailRuns), go build of the module's programs (Build) and an OTLP receiver
// (otlp.go). It depends on the standard library, pkg/span, test/groundtruth and, for the
// receiver, gRPC and the OTLP protobufs only: no Kubernetes package, so that a unit test can use
// it without pulling in the Kubernetes test bed (test/testenv) or eBPF (internal/bpftest).
package testkit

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconscope/reconscope/pkg/span"
)

// Polling intervals of WaitFor: the first poll follows at once, the next after minPoll, each
// wait doubling up to maxPoll, so a quick condition is seen quickly and an expensive one (an
// HTTP query) is not asked too often.
const (
	minPoll = 10 * time.Millisecond
	maxPoll = 200 * time.Millisecond
)

// WaitFor polls cond until it holds. After timeout it fails t with what and what cond said
// last. cond may call t.Fatal (e.g. for a process that died). The timeout only guards against a
// hang: a test must not depend on how fast anything is.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() (ok bool, detail string)) {
	t.Helper()
	ok, detail := poll(timeout, cond)
	switch {
	case ok:
	case detail != "":
		t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, detail)
	default:
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Poll polls cond as WaitFor does until it holds or timeout has passed, and tells whether it
// held. It fails nothing: it is for a test that goes on after the timeout to report what it
// saw beside its other checks (with t.Errorf, or by the assertions that follow), and for a
// cleanup that may give up. A test that cannot go on without cond calls WaitFor.
func Poll(timeout time.Duration, cond func() bool) bool {
	ok, _ := poll(timeout, func() (bool, string) { return cond(), "" })
	return ok
}

// poll is the loop of WaitFor and Poll: it calls cond at once, then after minPoll, each wait
// doubling up to maxPoll, until cond holds or timeout has passed, and returns cond's last
// answer.
func poll(timeout time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	for wait := minPoll; ; wait = min(2*wait, maxPoll) {
		ok, detail := cond()
		if ok || time.Now().After(deadline) {
			return ok, detail
		}
		time.Sleep(wait)
	}
}

// Eventually is WaitFor for a condition with nothing to say about itself.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	WaitFor(t, what, timeout, func() (bool, string) { return cond(), "" })
}

// LogBuffer collects what a logger or a process writes from other goroutines while the test
// reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger returns a text logger at level Info that writes into l.
func (l *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, nil))
}

// Go runs run in a goroutine with a context that the returned stop cancels; stop then waits for
// run to return and returns its error (later calls return it again). When the test has not
// called stop by its end, its cleanup does, and fails t on an error.
func Go(t testing.TB, run func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var called atomic.Bool
	wait := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if called.Load() {
			return
		}
		if err := wait(); err != nil {
			t.Errorf("testkit: stop: %v", err)
		}
	})
	return func() error {
		called.Store(true)
		return wait()
	}
}

// Quiet returns a logger that drops everything, for code under test whose logs the test does
// not read.
func Quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Sink collects spans (it is a tracer.Writer); safe for a tracer writing while the test
// reads.
type Sink struct {
	mu    sync.Mutex
	spans []span.Span
}

// Write keeps a copy of sp.
func (s *Sink) Write(sp *span.Span) error {
	s.mu.Lock()
	s.spans = append(s.spans, *sp)
	s.mu.Unlock()
	return nil
}

// Snapshot returns the spans so far.
func (s *Sink) Snapshot() []span.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]span.Span(nil), s.spans...)
}

// Count returns how many spans came.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.spans)
}
