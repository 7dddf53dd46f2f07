// Package tracer joins the pipeline's stages for one agent: it attaches the probe plan of
// each target executable once (keyed by device and inode, so every process of one binary
// shares it), traces the target processes, assembles spans from the collector's events, and
// hands them to the exporters. It notices when a traced process exits and closes its spans.
package tracer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// Options configures a Tracer.
type Options struct {
	Collector collector.Options
	Assembler span.Options
	Catalog   []*probes.Probe // nil: probes.Catalog
	Writer    exporter.Writer
	Logger    *slog.Logger
	// Clock turns kernel times into wall-clock times; zero: measured now.
	Clock exporter.Clock
	// Housekeeping is how often exited processes and expired spans are looked for.
	// Zero means 500ms.
	Housekeeping time.Duration
}

// Stats is what a Tracer counted.
type Stats struct {
	Kernel    collector.Counters
	Reader    collector.ReadStats
	Assembler span.Stats
	Processes int // traced now
	Sites     int // probe sites attached now
	Open      int // reconciles in flight (open spans), as of the last housekeeping
}

type exeKey struct{ dev, ino uint64 }

type exe struct {
	att  *collector.Attachment
	pids map[int]bool
	path string // the executable's path as the process sees it
}

// Tracer traces processes. Add targets with TracePID, then Run.
type Tracer struct {
	opts  Options
	log   *slog.Logger
	col   *collector.Collector
	clock exporter.Clock

	mu    sync.Mutex
	exes  map[exeKey]*exe
	procs map[int]exeKey
	dying map[int]bool // exited processes, closed at the next idle poll (their last events are read by then)
	meta  map[int]ProcessMeta

	asm     *span.Assembler
	open    atomic.Int64
	astats  span.Stats // the assembler's, copied on Run's goroutine
	statsMu sync.Mutex
}

// New loads the eBPF objects.
func New(opts Options) (*Tracer, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Catalog == nil {
		opts.Catalog = probes.Catalog
	}
	if opts.Clock == (exporter.Clock{}) {
		opts.Clock = exporter.NewClock()
	}
	if opts.Housekeeping == 0 {
		opts.Housekeeping = 500 * time.Millisecond
	}
	opts.Collector.Logger = opts.Logger
	col, err := collector.New(opts.Collector)
	if err != nil {
		return nil, err
	}
	t := &Tracer{
		opts:  opts,
		log:   opts.Logger,
		col:   col,
		clock: opts.Clock,
		exes:  map[exeKey]*exe{},
		procs: map[int]exeKey{},
		dying: map[int]bool{},
		meta:  map[int]ProcessMeta{},
	}
	t.asm = span.NewAssembler(opts.Assembler, t.emit)
	return t, nil
}

// Clock is the clock that turns span times into wall-clock times.
func (t *Tracer) Clock() exporter.Clock { return t.clock }

func (t *Tracer) emit(s span.Span) {
	t.mu.Lock()
	if k, ok := t.procs[int(s.PID)]; ok && s.Exe == "" {
		if e := t.exes[k]; e != nil {
			s.Exe = e.path
		}
	}
	if m, ok := t.meta[int(s.PID)]; ok {
		s.Pod, s.Container = m.Pod, m.Container
	}
	t.mu.Unlock()
	if t.opts.Writer != nil {
		if err := t.opts.Writer.Write(&s); err != nil {
			t.log.Warn("export span", "err", err)
		}
	}
}

// TracePID starts tracing process pid. It inspects the process's executable, attaches its
// plan unless another process of the same executable already did, and adds pid to the
// kernel's filter. It returns the plan.
func (t *Tracer) TracePID(pid int) (*probes.Plan, error) {
	exePath := fmt.Sprintf("/proc/%d/exe", pid)
	fi, err := os.Stat(exePath)
	if errors.Is(err, os.ErrPermission) {
		return nil, fmt.Errorf("process %d: %w (another user's process: run as root, or with CAP_SYS_PTRACE)", pid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return nil, fmt.Errorf("process %d: no device and inode for its executable", pid)
	}
	key := exeKey{dev: uint64(st.Dev), ino: st.Ino}

	t.mu.Lock()
	if _, ok := t.procs[pid]; ok {
		e := t.exes[t.procs[pid]]
		t.mu.Unlock()
		return e.att.Plan, nil
	}
	e := t.exes[key]
	t.mu.Unlock()

	if e == nil {
		bin, err := symbols.OpenPID(pid)
		if err != nil {
			return nil, fmt.Errorf("inspect process %d: %w", pid, err)
		}
		plan, err := probes.NewPlan(bin, t.opts.Catalog)
		if err != nil {
			bin.Close()
			return plan, fmt.Errorf("process %d (%s): %w", pid, bin.Path, err)
		}
		for _, o := range plan.Offsets {
			if o.Err != nil {
				t.log.Warn("field offset unknown: spans come without the fields that need it", "exe", bin.Path, "type", o.Type, "field", o.Path, "err", o.Err)
			}
		}
		att, err := t.col.Attach(exePath, plan)
		if err != nil {
			bin.Close()
			return plan, fmt.Errorf("process %d: %w", pid, err)
		}
		e = &exe{att: att, pids: map[int]bool{}, path: exePath}
		if real, err := os.Readlink(exePath); err == nil {
			e.path = real
		}
		t.mu.Lock()
		t.exes[key] = e
		t.mu.Unlock()
		t.log.Info("attached", "exe", e.path, "pid", pid, "go", bin.GoVersion, "sites", len(plan.Sites), "probes", plan.Probes())
	}
	if err := t.col.Trace(pid, e.att); err != nil {
		t.releaseIfUnused(key)
		return e.att.Plan, err
	}
	t.mu.Lock()
	e.pids[pid] = true
	t.procs[pid] = key
	t.mu.Unlock()
	return e.att.Plan, nil
}

// ProcessMeta is what the agent knows of a traced process beyond its PID: it goes into every
// span of the process.
type ProcessMeta struct {
	Pod       string // namespace/name
	Container string
}

// SetProcessMeta sets the metadata of process pid's spans.
func (t *Tracer) SetProcessMeta(pid int, m ProcessMeta) {
	t.mu.Lock()
	t.meta[pid] = m
	t.mu.Unlock()
}

// UntracePID stops tracing pid; the executable's probes are detached with its last process.
func (t *Tracer) UntracePID(pid int) {
	t.mu.Lock()
	key, ok := t.procs[pid]
	if ok {
		delete(t.procs, pid)
		delete(t.exes[key].pids, pid)
	}
	delete(t.meta, pid)
	t.mu.Unlock()
	if !ok {
		return
	}
	_ = t.col.Untrace(pid)
	t.releaseIfUnused(key)
}

func (t *Tracer) releaseIfUnused(key exeKey) {
	t.mu.Lock()
	e := t.exes[key]
	if e == nil || len(e.pids) > 0 {
		t.mu.Unlock()
		return
	}
	delete(t.exes, key)
	t.mu.Unlock()
	if err := e.att.Close(); err != nil {
		t.log.Warn("detach", "exe", e.path, "err", err)
	}
	e.att.Plan.Binary.Close()
	t.log.Info("detached", "exe", e.path)
}

// WatchExecs reports the PID of every process that calls execve on the host, until ctx ends
// (collector.WatchExecs).
func (t *Tracer) WatchExecs(ctx context.Context) (<-chan int, error) { return t.col.WatchExecs(ctx) }

// PIDs returns the traced processes.
func (t *Tracer) PIDs() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int, 0, len(t.procs))
	for pid := range t.procs {
		out = append(out, pid)
	}
	return out
}

// Run reads events until ctx ends, then closes the spans still open (as abandoned, since
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
	}, func() { house(true) })
	t.asm.Flush()
	t.statsMu.Lock()
	t.astats = t.asm.Stats()
	t.statsMu.Unlock()
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
	for _, pid := range t.PIDs() {
		if t.dying[pid] {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) || isZombie(pid) {
			t.dying[pid] = true
		}
	}
	t.asm.Expire(exporter.Monotonic())
	t.open.Store(int64(t.asm.Open()))
	t.statsMu.Lock()
	t.astats = t.asm.Stats()
	t.statsMu.Unlock()
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
		}
	}
	return false
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
		sites += len(e.att.Plan.Sites)
	}
	t.mu.Unlock()
	t.statsMu.Lock()
	as := t.astats
	t.statsMu.Unlock()
	return Stats{Kernel: k, Reader: t.col.ReadStats(), Assembler: as, Processes: procs, Sites: sites, Open: int(t.open.Load())}
}

// KernelGoroutines returns how many goroutines of process pid the kernel holds span state for
// (open reconciles, and goroutines they started); none once pid is no longer traced.
func (t *Tracer) KernelGoroutines(pid int) int { return t.col.GoroutinesOf(pid) }

// Close detaches every executable and frees the eBPF objects.
func (t *Tracer) Close() error {
	for _, pid := range t.PIDs() {
		t.UntracePID(pid)
	}
	return t.col.Close()
}
