package exporter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/reconscope/reconscope/pkg/span"
)

// DefaultQueueSize is how many spans a Queue holds for a writer that is behind.
const DefaultQueueSize = 4096

// Queue hands spans to a writer on a goroutine of its own, so that a slow or blocked writer
// (a standard output nobody reads, a full pipe) never stalls the caller: the tracer's event
// loop, which must keep draining the kernel's ring buffer and answer signals. At most size
// spans wait; a span that finds the queue full is dropped and counted (Dropped).
type Queue struct {
	w   Writer
	log *slog.Logger

	mu     sync.RWMutex // Write holds it shared, Close exclusively: no send on a closed channel
	closed bool
	ch     chan *span.Span
	done   chan struct{}

	dropped atomic.Uint64
	failed  atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

// NewQueue starts a queue of at most size spans (DefaultQueueSize when size <= 0) in front
// of w; what w returns as an error, and the first drop, are logged to log.
func NewQueue(w Writer, size int, log *slog.Logger) *Queue {
	if size <= 0 {
		size = DefaultQueueSize
	}
	q := &Queue{w: w, log: log, ch: make(chan *span.Span, size), done: make(chan struct{})}
	go q.run()
	return q
}

func (q *Queue) run() {
	defer close(q.done)
	bw, batch := q.w.(batchWriter)
	for s := range q.ch {
		var err error
		switch {
		case !batch:
			err = q.w.Write(s)
		case len(q.ch) > 0:
			err = bw.WriteBuffered(s) // more to come: written with them
		default:
			if err = bw.WriteBuffered(s); err == nil {
				err = bw.Flush()
			}
		}
		if err != nil {
			if q.failed.Add(1) == 1 {
				q.log.Warn("write span", "err", err)
			}
		}
	}
}

// batchWriter is a Writer that can leave spans in a buffer until Flush (JSONWriter): the
// queue flushes once no span waits, so a burst of spans costs one write, not one each.
type batchWriter interface {
	Writer
	WriteBuffered(s *span.Span) error
	Flush() error
}

// Write implements Writer: it never blocks. The span must not be changed after.
func (q *Queue) Write(s *span.Span) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		q.dropped.Add(1)
		return nil
	}
	select {
	case q.ch <- s:
	default:
		if q.dropped.Add(1) == 1 {
			q.log.Warn("output does not keep up: spans are dropped (is anything reading it?); the count is at exit and in reconscope_output_spans_dropped_total",
				"queue", cap(q.ch))
		}
	}
	return nil
}

// Dropped is how many spans were not written because the queue was full (or closed).
func (q *Queue) Dropped() uint64 { return q.dropped.Load() }

// Failed is how many spans the writer returned an error for.
func (q *Queue) Failed() uint64 { return q.failed.Load() }

// Close stops taking spans and waits until those queued are written, or ctx ends: a writer
// blocked for good is left behind (the program is exiting), and the spans still queued are
// counted as dropped. It waits once: a later call returns the first one's result.
func (q *Queue) Close(ctx context.Context) error {
	q.closeOnce.Do(func() { q.closeErr = q.close(ctx) })
	return q.closeErr
}

func (q *Queue) close(ctx context.Context) error {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
		left := len(q.ch)
		q.dropped.Add(uint64(left))
		return fmt.Errorf("output blocked: %d queued spans not written: %w", left, ctx.Err())
	}
}
