package exporter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/span"
)

// blockingWriter blocks every Write until release is closed; entered gets each span as its
// Write begins.
type blockingWriter struct {
	entered chan string
	release chan struct{}
	written []string
}

func (b *blockingWriter) Write(s *span.Span) error {
	b.entered <- s.Name
	<-b.release
	b.written = append(b.written, s.Name)
	return nil
}

// TestQueueBlockedWriter: a writer that never returns (standard output nobody reads) does not
// stall the caller: Write returns at once, spans beyond the queue are dropped and counted, and
// Close gives up at its deadline instead of waiting for the writer.
func TestQueueBlockedWriter(t *testing.T) {
	w := &blockingWriter{entered: make(chan string, 16), release: make(chan struct{})}
	var logs testkit.LogBuffer
	q := NewQueue(w, 2, logs.Logger())

	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_ = q.Write(&span.Span{Name: "s0"})
		<-w.entered // s0 is in the writer, blocked: the queue is empty again
		for _, n := range []string{"s1", "s2", "s3", "s4", "s5"} {
			_ = q.Write(&span.Span{Name: n})
		}
	}()
	select {
	case <-wrote:
	case <-time.After(time.Minute):
		t.Fatal("Write blocked behind a blocked writer")
	}
	// s1 and s2 wait in the queue; s3, s4, s5 found it full.
	if got := q.Dropped(); got != 3 {
		t.Errorf("Dropped() = %d, want 3", got)
	}
	if !strings.Contains(logs.String(), "output does not keep up") {
		t.Errorf("the first drop was not logged: %q", logs.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- q.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "2 queued spans not written") {
			t.Errorf("Close = %v, want the deadline and the 2 spans left", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close waited for a blocked writer past its deadline")
	}
	if got := q.Dropped(); got != 5 {
		t.Errorf("Dropped() after Close = %d, want 5 (3 refused, 2 left queued)", got)
	}
	_ = q.Write(&span.Span{Name: "late"}) // after Close: counted, no panic
	if got := q.Dropped(); got != 6 {
		t.Errorf("Dropped() after a late Write = %d, want 6", got)
	}
	// A second Close (the agent's deferred one) does not wait again nor count the queue twice.
	go func() { closed <- q.Close(context.Background()) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("second Close = %v, want the first one's result", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a second Close waited again for the blocked writer")
	}
	if got := q.Dropped(); got != 6 {
		t.Errorf("Dropped() after a second Close = %d, want 6", got)
	}
	close(w.release)
}

// TestQueueWritesInOrder: a writer that keeps up gets every span, in order, and Close returns
// once they are written.
func TestQueueWritesInOrder(t *testing.T) {
	w := &blockingWriter{entered: make(chan string, 1000), release: make(chan struct{})}
	close(w.release)
	q := NewQueue(w, 1000, testkit.Quiet())
	var want []string
	for i := range 500 {
		n := "s" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
		want = append(want, n)
		_ = q.Write(&span.Span{Name: n})
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q.Dropped() != 0 || strings.Join(w.written, ",") != strings.Join(want, ",") {
		t.Errorf("dropped %d, written %d spans, want all %d in order", q.Dropped(), len(w.written), len(want))
	}
}
