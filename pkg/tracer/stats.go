package tracer

import (
	"sync"
	"sync/atomic"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/span"
)

// Stats is what a Tracer counted.
type Stats struct {
	Kernel    collector.Counters
	Reader    collector.ReadStats
	Assembler span.Stats
	Processes int // traced now
	Sites     int // probe sites attached now, those of idle executables (Idle) too
	Open      int // reconciles in flight (open spans), as of the last housekeeping
	// Idle counts the executables kept attached without a process, awaiting a restart
	// (Options.Grace).
	Idle int
	// HeldDropped counts spans of processes admitted at exec that were dropped because too
	// many waited for Options.Admit's verdict (those of processes Admit rejects are not counted:
	// they are not wanted).
	HeldDropped uint64
	// Excluded counts the spans of unselected controllers (Options.Controllers,
	// ProcessMeta.Controllers) that reached user space and were dropped there: those of a
	// controller instance done before its first span was read here (the kernel skips the later
	// ones, Kernel.Excluded), every one of a work queue of unknown name and worker
	// (span.UnnamedQueue), and those the kernel could not be told of.
	Excluded uint64
}

// Stats returns the counters; safe while Run runs. Reader and assembler figures are updated
// at each housekeeping and are final once Run returned.
func (t *Tracer) Stats() Stats {
	k, err := t.col.Counters()
	if err != nil {
		t.log.Warn("read kernel counters", "err", err)
	}
	t.mu.Lock()
	procs := len(t.procs)
	sites := 0
	for _, e := range t.exes {
		if e.att != nil {
			sites += len(e.plan.Sites)
		}
		if e.calls != nil {
			sites += len(e.callsPlan.Sites)
		}
	}
	idle := len(t.idleExes())
	t.mu.Unlock()
	return Stats{Kernel: k, Reader: t.col.ReadStats(), Assembler: t.figures.get(), Processes: procs, Sites: sites, Idle: idle,
		Open: int(t.figures.open.Load()), HeldDropped: t.adm.heldDropped(), Excluded: t.sel.excluded.Load()}
}

// figures are the assembler's figures for Stats, copied on Run's goroutine (the assembler is
// Run's alone).
type figures struct {
	mu    sync.Mutex
	stats span.Stats
	open  atomic.Int64 // reconciles in flight
}

func (f *figures) set(s span.Stats) {
	f.mu.Lock()
	f.stats = s
	f.mu.Unlock()
}

func (f *figures) get() span.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}
