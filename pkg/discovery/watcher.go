package discovery

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/reconscope/reconscope/pkg/proc"
)

// Event is what a [Watcher] sends: [Started] or [Exited].
type Event interface {
	isEvent()
}

// Started announces a process, once: when the Watcher first sees it, and again only if its PID
// comes back as another process (PID reuse) or it execs another executable, each time after an
// [Exited] for the PID.
type Started struct {
	// Process is the process, as read when it was first seen.
	Process Process
}

// Exited says that a process announced by [Started] is gone from /proc (it exited, or became a
// zombie), or that it exec'd another executable (a [Started] follows).
type Exited struct {
	// PID is the process ID that Started announced.
	PID int
}

func (Started) isEvent() {}
func (Exited) isEvent()  {}

// DefaultScanInterval is how often a [Watcher] rescans /proc unless told otherwise.
const DefaultScanInterval = 2 * time.Second

// DefaultExecScanInterval is how often the agent rescans /proc in full when exec
// notifications find new processes: a scan reads every process's stat and executable (3 ms
// for 70 processes here, BenchmarkScan), the agent's largest cost at rest when it ran every
// DefaultScanInterval. Exits are noticed by the tracer itself.
const DefaultExecScanInterval = 30 * time.Second

// WatcherOptions configures a [Watcher].
type WatcherOptions struct {
	// ProcRoot is where proc is mounted. Empty means [DefaultProcRoot].
	ProcRoot string
	// Interval is the time between two scans. Zero means [DefaultScanInterval]. A process
	// that lives less than Interval may go unseen; one that exits is reported up to Interval
	// late.
	Interval time.Duration
	// Buffer is the capacity of the events channel. Zero means 64. When the receiver falls
	// behind, the Watcher waits: it never drops an event.
	Buffer int
	// Logger receives the Watcher's warnings. Nil means slog.Default().
	Logger *slog.Logger
	// Execs, when set, receives the PID of each process that called execve (the agent feeds
	// it from the sched_process_exec raw tracepoint): those processes are read before the next
	// Interval, at most one batch per WakeDelay, so a new controller is traced at once. Only
	// they are read, not the whole of /proc: on a node where something execs every second
	// (exec probes, shell scripts) a full scan per exec would cost more than the interval's.
	// A PID of 0 says that notifications were lost: the next batch is a full scan.
	Execs <-chan int
	// WakeDelay is the least time between two batches prompted by Execs. Zero means 100ms.
	WakeDelay time.Duration
}

// Watcher is the stage that finds processes: it rescans /proc at an interval and sends a
// [Started] for each new process and an [Exited] for each one gone, on the channel returned by
// Events. Events of one scan come Exited first, then Started, each in PID order.
//
// With WatcherOptions.Execs, the process of an exec anywhere on the host is read at once
// (batched by WakeDelay), so a new controller is traced about as soon as it runs; the periodic
// scan stays the safety net that notices exits and what notifications missed, and can run far
// less often (the agent: [DefaultExecScanInterval]).
type Watcher struct {
	opts   WatcherOptions
	log    *slog.Logger
	events chan Event
	known  map[int]identity

	warnedDenied, warnedScan bool
}

// NewWatcher returns a Watcher. Start it with Run.
func NewWatcher(opts WatcherOptions) *Watcher {
	if opts.ProcRoot == "" {
		opts.ProcRoot = DefaultProcRoot
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultScanInterval
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 64
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.WakeDelay <= 0 {
		opts.WakeDelay = 100 * time.Millisecond
	}
	return &Watcher{
		opts:   opts,
		log:    opts.Logger,
		events: make(chan Event, opts.Buffer),
		known:  map[int]identity{},
	}
}

// Events returns the channel the Watcher sends on. Run closes it when it returns.
func (w *Watcher) Events() <-chan Event { return w.events }

// Run scans at once, then every Interval, until ctx ends; then it closes the events channel
// and returns nil. It fails when the first scan cannot read the proc root; later failures are
// logged and the next scan tries again. Call Run once.
func (w *Watcher) Run(ctx context.Context) error {
	defer close(w.events)
	evs, err := w.scan()
	if err != nil {
		return err
	}
	t := time.NewTicker(w.opts.Interval)
	defer t.Stop()
	execs := w.opts.Execs
	var lastWake time.Time
	for {
		for _, ev := range evs {
			select {
			case w.events <- ev:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case pid, ok := <-execs:
			if !ok {
				execs = nil // no more prompts: the ticker alone
				evs = nil
				continue
			}
			if wait := w.opts.WakeDelay - time.Since(lastWake); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
			lastWake = time.Now()
			if pids, all := gather(execs, pid); !all {
				evs = w.look(pids, false)
				continue
			}
		}
		evs, err = w.scan()
		if err != nil {
			if !w.warnedScan {
				w.log.Warn("scan processes; retrying at every interval", "err", err)
				w.warnedScan = true
			}
			evs = nil
		}
	}
}

// scan compares /proc with what is known and returns the events that make up the difference.
func (w *Watcher) scan() ([]Event, error) {
	pids, err := proc.New(w.opts.ProcRoot).PIDs()
	if err != nil {
		return nil, err
	}
	evs := w.look(pids, true)
	w.warnedScan = false
	return evs, nil
}

// look reads the processes pids (sorted) and returns the events that make up the difference
// with what is known of them. With all, pids is every process in /proc, and a known process
// missing from it is over; without, only pids are looked at (processes that exec'd).
func (w *Watcher) look(pids []int, all bool) []Event {
	var exited []Event
	var started []Event
	seen := make(map[int]bool, len(pids))
	denied := 0
	for _, pid := range pids {
		if old, ok := w.known[pid]; ok {
			id, err := readIdentity(w.opts.ProcRoot, pid)
			if err == nil && id == old {
				seen[pid] = true
				continue
			}
			// Gone, or another process under the same PID, or an exec: the old one is over.
			delete(w.known, pid)
			exited = append(exited, Exited{PID: pid})
		}
		p, err := ReadProcess(w.opts.ProcRoot, pid)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				denied++
			}
			continue
		}
		seen[pid] = true
		w.known[pid] = identity{start: p.StartTime, exe: p.ExeID}
		started = append(started, Started{Process: p})
	}
	var gone []int
	if all { // a batch of exec'd processes says nothing of the others
		for pid := range w.known {
			if !seen[pid] {
				gone = append(gone, pid)
			}
		}
	}
	sort.Ints(gone)
	for _, pid := range gone {
		delete(w.known, pid)
		exited = append(exited, Exited{PID: pid})
	}
	sort.Slice(exited, func(i, j int) bool { return exited[i].(Exited).PID < exited[j].(Exited).PID })
	if denied > 0 && !w.warnedDenied {
		w.log.Warn("some processes cannot be inspected: permission denied reading their executable; run as root with CAP_SYS_PTRACE (and CAP_DAC_READ_SEARCH)",
			"processes", denied)
		w.warnedDenied = true
	}
	return append(exited, started...)
}

// maxLook is the most exec'd processes read one by one in a batch; more make a full scan.
const maxLook = 64

// gather returns first and the PIDs ch holds now, sorted and each once, without waiting; all
// says to scan /proc in full instead: notifications were lost (a PID of 0), or there are more
// than maxLook of them.
func gather(ch <-chan int, first int) (pids []int, all bool) {
	pids = append(pids, first)
	for more := true; more; {
		select {
		case pid, ok := <-ch:
			if !ok {
				more = false
				break
			}
			pids = append(pids, pid)
		default:
			more = false
		}
	}
	slices.Sort(pids)
	pids = slices.Compact(pids)
	return pids, len(pids) > maxLook || pids[0] <= 0
}
