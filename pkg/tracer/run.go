package tracer

// The run loop: events from the collector into the assembler, whose spans come out through
// emit (write.go); housekeeping between them. Its state (dying) is Run's goroutine's own.

import (
	"context"
	"time"

	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
)

// Run reads events until ctx ends, then closes the spans still open (as abandoned, since
// their returns will not be seen) and detaches everything.
// their returns will not be seen) and detaches everything.
func (t *Tracer) Run(ctx context.Context) error {
	last := time.Now()
	n := 0
	house := func(idle bool) {
		now := time.Now()
		if now.Sub(last) < t.opts.Housekeeping {
			return
		}
		last = now
		t.housekeep(idle)
	}
	_, err := t.col.Run(ctx, func(e span.Event) {
		t.asm.Add(e)
		if n++; n&1023 == 0 {
			house(false)
		}
	}, func() {
		t.flushHeld()
		house(true)
	})
	t.asm.Flush()
	t.flushHeld()
	t.figures.set(t.asm.Stats())
	return err
}

// housekeep closes the spans of exited processes and expires old state. Run's goroutine only.
// A process seen dead is closed only at a later idle poll: idle means the ring buffer was
// drained, so every event the process wrote before it died has been read by then.
func (t *Tracer) housekeep(idle bool) {
	if idle {
		for pid := range t.dying {
			t.asm.ProcessExited(uint32(pid))
			t.UntracePID(pid)
			delete(t.dying, pid)
			t.log.Info("process exited", "pid", pid)
		}
	}
	for pid, p := range t.processes() {
		if !t.dying[pid] && p.exited(t.proc, pid) {
			t.dying[pid] = true
		}
	}
	t.expireIdle()
	if t.mixed {
		t.refreshDetail()
	}
	t.asm.Expire(ktime.Monotonic())
	t.figures.open.Store(int64(t.asm.Open()))
	t.figures.set(t.asm.Stats())
}
