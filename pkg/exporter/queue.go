package exporter

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

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
	return newQueue(w, size, log, batchDelay(runtime.GOMAXPROCS(0)))
}

// batchDelay is the queue's wait for the rest of a burst with procs processors. On one (the
// agent's run and trace) the queue's goroutine runs only once the producer has handed over
// its burst and waits itself: the burst is in the channel already, and a wait would only be
// one more wakeup of the process (and of the runtime's monitor thread after it) per burst.
func batchDelay(procs int) time.Duration {
	if procs == 1 {
		return 0
	}
	return BatchDelay
}

// BatchDelay is how long a Queue that has written every span it had waits for more before it
// flushes its writer and sleeps on its channel. The tracer hands spans over in bursts (those
// of the events of one read of the ring buffer, BENCHMARKS.md section 5): waiting on the
// channel after each span, the queue's goroutine was woken once per span, and wrote once per
// span, which cost the agent more CPU than writing the spans (BenchmarkQueue). A span waits
// at most this long longer to be written.
const BatchDelay = 5 * time.Millisecond

func newQueue(w Writer, size int, log *slog.Logger, delay time.Duration) *Queue {
	if size <= 0 {
		size = DefaultQueueSize
	}
	q := &Queue{w: w, log: log, ch: make(chan *span.Span, size), done: make(chan struct{})}
	go q.run(delay)
	return q
}

// run writes the spans as they come; once none waits it gives the writer's producer delay to
// add more (no wakeup while it sleeps), and only when none came meanwhile it flushes and waits
// on the channel.
func (q *Queue) run(delay time.Duration) {
	defer close(q.done)
	bw, batch := q.w.(batchWriter)
	write := func(s *span.Span) {
		var err error
		if batch {
			err = bw.WriteBuffered(s) // flushed once the burst is written
		} else {
			err = q.w.Write(s)
		}
		q.fail(err)
	}
	flush := func() {
		if batch {
			q.fail(bw.Flush())
		}
	}
	for s := range q.ch {
		write(s)
		for waited := false; ; {
			select {
			case next, ok := <-q.ch:
				if !ok {
					flush()
					return
				}
				write(next)
				waited = false
				continue
			default:
			}
			if waited || delay <= 0 {
				break
			}
			time.Sleep(delay)
			waited = true
		}
		flush()
	}
}

// fail counts a writer's error and logs the first.
func (q *Queue) fail(err error) {
	if err != nil && q.failed.Add(1) == 1 {
		q.log.Warn("write span", "err", err)
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
