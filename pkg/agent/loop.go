package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// Options configures a Loop.
type Options struct {
	// Tracer traces the processes the Loop keeps.
	Tracer *tracer.Tracer
	// Admission decides on each process found; its ProcRoot is where /proc is scanned.
	Admission *Admission
	// Interval is the time between two scans of /proc; zero means
	// discovery.DefaultScanInterval.
	Interval time.Duration
	// Execs, when set, receives the PID of each process that called execve
	// (tracer.Tracer.WatchExecs): each one prompts a scan before the next Interval.
	Execs <-chan int
	// Logger receives what the Loop traces and why it does not; nil means slog.Default().
	Logger *slog.Logger
}

// Loop is the node's watch → decide → trace loop: it watches the processes of the node
// (discovery.Watcher), decides on each new one (Admission) and traces those kept
// (tracer.Tracer.TracePID), when their executable has code the catalog knows.
type Loop struct {
	opts Options
	log  *slog.Logger
}

// NewLoop returns a Loop. Start it with Run.
func NewLoop(opts Options) *Loop {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Loop{opts: opts, log: opts.Logger}
}

// traced is the outcome of tracing one process the watcher found.
type traced struct {
	p    discovery.Process
	meta tracer.ProcessMeta
	plan *probes.Plan
	err  error
}

// podIndexSyncWait bounds how long Run waits for the pod index's first list of this node's pods
// before it looks at processes, so that another node's pods (several nodes on one kernel) are
// known for what they are from the first scan. Without API access it goes on after this wait,
// and traces every process with host-only metadata.
const podIndexSyncWait = 10 * time.Second

// renameEvery is how often the pods of traced processes whose container was not named yet are
// looked up again, and those of pods the index did not hold (Elsewhere) too.
const renameEvery = 2 * time.Second

// Run scans /proc and traces what it finds until ctx ends. Each process is traced on its own
// goroutine: one waits only for the inspection of its own executable (the tracer bounds how
// many run at once), never for another's. The agent's own process is never traced.
func (l *Loop) Run(ctx context.Context) {
	a := l.opts.Admission
	if a.Pods != nil {
		synced, cancel := context.WithTimeout(ctx, podIndexSyncWait)
		a.Pods.WaitSynced(synced)
		cancel()
	}
	w := discovery.NewWatcher(discovery.WatcherOptions{ProcRoot: a.ProcRoot, Interval: l.opts.Interval, Execs: l.opts.Execs, Logger: l.log})
	go func() {
		if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			l.log.Error("process scan", "err", err)
		}
	}()
	t := l.opts.Tracer
	self := os.Getpid()
	// Executables with nothing to trace (probes.Untraceable), by the identity the watcher
	// reads: another process of one is skipped before the tracer identifies its file.
	untraceable := map[proc.StatFileID]bool{}
	// Traced processes whose container the pod index did not know yet: looked up again.
	unnamed := map[int]discovery.Process{}
	// Processes in pods the index does not hold (another node's, on a shared kernel): looked
	// up again, traced if their pod turns out to be this node's.
	elsewhere := map[int]discovery.Process{}
	events := w.Events()
	results := make(chan traced)
	trace := func(p discovery.Process, meta tracer.ProcessMeta) {
		go func() {
			plan, err := t.TracePID(p.PID)
			select {
			case results <- traced{p: p, meta: meta, plan: plan, err: err}:
			case <-ctx.Done():
			}
		}()
	}
	tick := time.NewTicker(renameEvery)
	defer tick.Stop()
	for {
		var ev discovery.Event
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			for pid, p := range unnamed {
				if meta, ok := a.named(p); ok {
					t.SetProcessMeta(pid, meta)
					delete(unnamed, pid)
				} else if _, v := a.Decide(p); v == Elsewhere {
					// traced before the index could tell (no API access at the start)
					t.UntracePID(pid)
					delete(unnamed, pid)
					elsewhere[pid] = p
					l.log.Info("stopped tracing: its pod is not on this node", "pid", pid, "exe", p.Exe, "pod_uid", p.Container.PodUID)
				}
			}
			for pid, p := range elsewhere {
				meta, v := a.Decide(p)
				if v == Elsewhere {
					continue
				}
				delete(elsewhere, pid)
				if v == Trace {
					trace(p, meta)
				}
			}
			continue
		case r := <-results:
			p := r.p
			if r.err != nil {
				if probes.Untraceable(r.err) {
					untraceable[p.ExeID] = true
					l.log.Debug("not traced", "pid", p.PID, "exe", p.Exe, "reason", r.err)
					continue
				}
				l.log.Warn("cannot trace", "pid", p.PID, "exe", p.Exe, "err", r.err)
				continue
			}
			if a.unnamed(p, r.meta) {
				unnamed[p.PID] = p
			}
			t.SetProcessMeta(p.PID, r.meta)
			l.log.Info("tracing", "pid", p.PID, "exe", p.Exe, "pod", r.meta.Pod, "container", r.meta.Container, "probes", r.plan.Probes())
			continue
		case e, ok := <-events:
			if !ok {
				events = nil // the watcher stopped (its first scan failed: said above)
				continue
			}
			ev = e
		}
		if exited, ok := ev.(discovery.Exited); ok {
			delete(unnamed, exited.PID) // the tracer notices exits itself and closes their spans
			delete(elsewhere, exited.PID)
			continue
		}
		started, ok := ev.(discovery.Started)
		if !ok {
			continue
		}
		p := started.Process
		if p.PID == self {
			continue
		}
		if untraceable[p.ExeID] {
			// Said each time, at debug: which processes the agent looked at and let go, as
			// for the first process of the executable below.
			l.log.Debug("not traced", "pid", p.PID, "exe", p.Exe, "reason", "its executable has nothing to trace (found before)")
			continue
		}
		switch meta, v := a.Decide(p); v {
		case Elsewhere:
			elsewhere[p.PID] = p
			l.log.Debug("not traced: its pod is not on this node", "pid", p.PID, "exe", p.Exe, "pod_uid", p.Container.PodUID)
		case Trace:
			trace(p, meta)
		}
	}
}
