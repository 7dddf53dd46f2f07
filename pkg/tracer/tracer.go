// Package tracer joins the pipeline's stages for one agent: it attaches the probe plan of
// each target executable once (keyed by the device and inode its code is mapped from, so every
// process of one binary shares it, in any container), traces the target processes (a new
// process of an attached executable from its exec, with Options.AdmitExecs), assembles spans
// from the collector's events, and hands them to the exporters. It notices when a traced
// process exits and closes its spans. With admission at exec, an executable stays attached for
// Options.Grace after its last process is gone, so that a restarted process of it is traced
// from its exec.
package tracer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/detail"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// Writer receives each finished span: the exporters, or a test's sink. Write runs on the
// tracer's event loop, so it must not block for long.
type Writer interface {
	Write(s *span.Span) error
}

// Options configures a Tracer.
type Options struct {
	Collector collector.Options
	Assembler span.Options
	Catalog   []*probes.Probe // nil: probes.Catalog()
	Writer    Writer
	Logger    *slog.Logger
	// Clock turns kernel times into wall-clock times; zero: measured now.
	Clock ktime.Clock
	// Housekeeping is how often exited processes and expired spans are looked for.
	// Zero means 500ms.
	Housekeeping time.Duration
	// ProcRoot is where the host's proc file system is mounted. Empty means /proc.
	ProcRoot string
	// AdmitExecs makes the kernel trace a new process of an attached executable from its
	// first instruction, while WatchExecs runs (instead of waiting for someone to call
	// TracePID): its first reconciles are not lost.
	AdmitExecs bool
	// Admit, when set, decides on each process admitted at exec: whether to keep tracing it,
	// and with what metadata. Its spans are held until Admit returns, and dropped if it says
	// no. Nil keeps every admitted process, with no metadata.
	Admit func(pid int) (ProcessMeta, bool)
	// Inspections bounds how many executables are inspected and attached at once. Zero means
	// GOMAXPROCS, at least 2.
	Inspections int
	// Controllers chooses the controllers whose spans are written, in processes whose
	// ProcessMeta names no choice of its own; nil: every controller. The spans of the others
	// are dropped, and the kernel is told to skip their controller instance from then on
	// (collector.Collector.Exclude): see Stats.Excluded and collector.Counters.Excluded.
	Controllers ControllerFilter
	// Grace, with AdmitExecs, is how long an executable stays attached, its new processes
	// admitted at exec, after its last traced process is gone: a restarted or crash-looping
	// process of it is then traced from its exec rather than from the next discovery scan.
	// Meanwhile the executable is idle: it keeps its links and probe sites; when the site
	// table is full, the one idle longest is detached early to make room. Close detaches
	// everything at once. Zero means DefaultGrace; negative (and no AdmitExecs) detaches an
	// executable with its last process.
	Grace time.Duration
	// Detail, when set and mixed (detail.Policy.Mixed), chooses each controller's detail:
	// Catalog is then a detail reconcile catalog, and the call probes of CallsCatalog (the
	// catalog at detail calls: probes.NewCallsPlan) are planned for each executable and
	// attached gated (collector.Collector.AttachCalls) while
	// a controller of one of its processes is at detail calls, detached when none is. The
	// kernel is told each controller instance's detail (collector.Collector.SetCallDetail),
	// and the spans of controllers at detail reconcile are written without calls
	// (span.Span.DropCalls). A span keeps the detail its reconcile began with.
	Detail       *detail.Policy
	CallsCatalog []*probes.Probe
}

// callsDrain bounds how long detaching an executable's calls probes waits for the spans in
// flight that began while they recorded.
const callsDrain = 30 * time.Second

// ControllerFilter chooses controllers by name (discovery.Controllers).
type ControllerFilter interface {
	Selects(controller string) bool
}

// DefaultGrace is Options.Grace's default: a kubelet restarts a container at once, then after
// CrashLoopBackOff's back-offs of 10, 20 and 40 seconds; a pod replaced by its controller
// usually runs again within a minute.
const DefaultGrace = time.Minute

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
	// ones, Kernel.Excluded), every one of a work queue of unknown name and worker (span.UnnamedQueue), and those the kernel could
	// not be told of.
	Excluded uint64
}

// exe is one executable: inspected and attached once (ready closed), or failed (err).
type exe struct {
	key    proc.KernelFileID // as the kernel identifies the file (collector.Collector.FileID)
	ready  chan struct{}
	err    error
	plan   *probes.Plan
	att    *collector.Attachment
	path   string // the executable's path as the process sees it
	pids   map[int]bool
	users  int  // callers between finding this exe and adding their process
	pinned bool // attached by AttachExe: stays attached without processes
	// idle is when its last process went (zero while it has one): it is detached
	// Options.Grace later unless a process of it is traced again meanwhile.
	idle time.Time
	// callsPlan is the plan of Options.CallsCatalog's call probes (nil: none applies, or no mixed detail);
	// calls is its gated attachment while a controller of the executable is at detail calls
	// (t.mu); callsOff is the kernel time since which none is (0 while one is).
	callsPlan *probes.Plan
	calls     *collector.Attachment
	callsOff  uint64
	// traced is when a process of it was last traced: for callsAhead after it, its calls
	// probes stay attached for controllers not known yet (t.mu).
	traced time.Time
}

// callsAhead is how long, after a process of an executable is traced, its calls probes stay
// attached for controllers not known yet when a rule may put them at detail calls
// (detail.Policy.CallsAhead): their first reconciles have their calls. After it, only the
// executables with a controller known at detail calls keep them.
const callsAhead = time.Minute

// gateKey is a controller instance: a process and its span entries' key (span.Span.Key).
type gateKey struct {
	pid uint32
	key uint64
}

// gate is a controller instance's detail, and whether the kernel was told it.
type gate struct {
	controller string
	detail     probes.Detail
	told       bool
}

// process is one traced process.
type process struct {
	exe    *exe
	ready  chan struct{} // closed once the collector traces it (or failed: err)
	err    error
	held   bool // admitted at exec: its spans wait for Options.Admit's verdict
	judged bool // Options.Admit gave its verdict
}

// maxHeld bounds the spans held per process while Options.Admit decides on it.
const maxHeld = 4096

// orphanWait is how long spans of a process unknown to the tracer are held for its exec
// notification before they are written without metadata.
const orphanWait = 2 * time.Second

// Tracer traces processes. Add targets with TracePID (or AttachExe), then Run.
type Tracer struct {
	opts    Options
	log     *slog.Logger
	col     *collector.Collector
	clock   ktime.Clock
	proc    proc.FS
	inspect chan struct{} // semaphore: inspections at once

	mu          sync.Mutex
	exes        map[proc.KernelFileID]*exe // every process of one file, in any container, shares one
	procs       map[int]*process
	meta        map[int]ProcessMeta
	held        map[int][]span.Span // spans of admitted processes awaiting Admit's verdict
	orphans     map[int]time.Time   // held spans of processes not known yet, since when
	release     []int               // processes whose held spans may go now
	heldDropped uint64
	excluded    uint64       // Stats.Excluded (t.mu)
	excludeErr  bool         // the kernel refused a key once: said once
	dying       map[int]bool // Run's goroutine only: exited processes, closed at the next idle poll
	closing     bool         // Close runs: executables are detached with their last process

	// gates: the controller instances whose detail the kernel was told (Options.Detail);
	// Run's goroutine only.
	gates map[gateKey]gate
	mixed bool // Options.Detail is set and mixed
	ahead bool // what the kernel was told of controller instances it does not know (CallsAhead)
	// controllers are the controllers whose spans were written with a per-controller detail
	// (HasController; controllersMu).
	controllersMu sync.Mutex
	controllers   map[string]bool

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
		opts.Catalog = probes.Catalog()
	}
	if opts.Clock == (ktime.Clock{}) {
		opts.Clock = ktime.NewClock()
	}
	if opts.Housekeeping == 0 {
		opts.Housekeeping = 500 * time.Millisecond
	}
	if opts.Inspections <= 0 {
		opts.Inspections = max(2, runtime.GOMAXPROCS(0))
	}
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
	}
	if !opts.AdmitExecs {
		opts.Grace = -1 // nothing to keep an executable attached for
	}
	opts.Collector.Logger = opts.Logger
	mixed := opts.Detail != nil && opts.Detail.Mixed() && len(opts.CallsCatalog) > 0
	opts.Collector.PerControllerDetail = mixed
	opts.Collector.ProcRoot = opts.ProcRoot
	col, err := collector.New(opts.Collector)
	if err != nil {
		return nil, err
	}
	t := &Tracer{
		opts:    opts,
		log:     opts.Logger,
		col:     col,
		clock:   opts.Clock,
		proc:    proc.New(opts.ProcRoot),
		inspect: make(chan struct{}, opts.Inspections),
		exes:    map[proc.KernelFileID]*exe{},
		procs:   map[int]*process{},
		dying:   map[int]bool{},
		meta:    map[int]ProcessMeta{},
		held:    map[int][]span.Span{},
		orphans: map[int]time.Time{},
	}
	t.gates = map[gateKey]gate{}
	t.controllers = map[string]bool{}
	t.mixed = mixed
	if t.mixed {
		t.ahead = opts.Detail.CallsAhead()
		if err := col.SetCallDetailDefault(t.ahead); err != nil {
			col.Close()
			return nil, err
		}
	}
	t.asm = span.NewAssembler(opts.Assembler, t.emit)
	// Loading the programs parsed the kernel's BTF (several MiB of garbage now).
	debug.FreeOSMemory()
	return t, nil
}

// Clock is the clock that turns span times into wall-clock times.
func (t *Tracer) Clock() ktime.Clock { return t.clock }

func (t *Tracer) emit(s span.Span) {
	t.mu.Lock()
	if len(t.release) > 0 {
		t.mu.Unlock()
		t.flushHeld()
		t.mu.Lock()
	}
	p := t.procs[int(s.PID)]
	// Held: a process admitted at exec awaiting Admit's verdict, or one not known here yet
	// while admissions are judged (its events were read before its exec notification).
	if (p != nil && p.held) || (p == nil && t.opts.AdmitExecs && t.opts.Admit != nil) {
		if len(t.held[int(s.PID)]) < maxHeld {
			if len(t.held[int(s.PID)]) == 0 && p == nil {
				t.orphans[int(s.PID)] = time.Now()
			}
			t.held[int(s.PID)] = append(t.held[int(s.PID)], s)
		} else {
			t.heldDropped++
		}
		t.mu.Unlock()
		return
	}
	t.decorate(&s, p)
	keep := t.selects(&s)
	t.mu.Unlock()
	if keep {
		t.write(&s)
	}
}

// selects reports whether s's controller is selected in its process; when it is not, the
// span is counted and the kernel told to skip its controller instance from now on. Callers
// hold t.mu.
func (t *Tracer) selects(s *span.Span) bool {
	var f ControllerFilter = t.opts.Controllers
	if m, ok := t.meta[int(s.PID)]; ok && m.Controllers != nil {
		f = m.Controllers
	}
	if f == nil || f.Selects(s.Controller) {
		return true
	}
	t.excluded++
	// Spans named UnnamedQueue (a queue whose name and worker are both unknown) say nothing
	// of which controller the queue is: they are dropped here, item by item. A queue named by
	// its worker is that worker's controller, and is skipped in the kernel like a named one.
	if s.Key != 0 && s.Controller != span.UnnamedQueue {
		if err := t.col.Exclude(s.PID, s.Key); err != nil && !t.excludeErr {
			t.excludeErr = true
			t.log.Warn("exclude a controller in the kernel", "controller", s.Controller, "pid", s.PID, "err", err)
		}
	}
	return false
}

// decorate fills in what the tracer knows of the span's process. Callers hold t.mu.
func (t *Tracer) decorate(s *span.Span, p *process) {
	if p != nil && s.Exe == "" {
		s.Exe = p.exe.path
	}
	if m, ok := t.meta[int(s.PID)]; ok {
		s.Pod, s.Container, s.Workload = m.Pod, m.Container, m.Workload
	}
}

func (t *Tracer) write(s *span.Span) {
	if t.mixed {
		t.applyDetail(s)
	}
	for i := range s.Fights {
		if f := &s.Fights[i]; f.Start {
			window := t.opts.Assembler.FightWindow
			if window <= 0 {
				window = span.DefaultFightWindow
			}
			// One line per fight episode: the write that made it reach the threshold.
			t.log.Warn("controller fight", "namespace", f.Namespace, "name", f.Name, "uid", f.UID,
				"resource", f.Resource, "subresource", f.Subresource, "writers", f.Writers, "pids", f.Processes,
				"alternations", f.Alternations, "window", window,
				"controller", s.Controller, "reconcile_id", s.ReconcileID, "pod", s.Pod)
		}
	}
	for i := range s.HotLoops {
		if h := &s.HotLoops[i]; h.Start {
			window := t.opts.Assembler.HotLoopWindow
			if window <= 0 {
				window = span.DefaultHotLoopWindow
			}
			// One line per hot-loop episode: the reconcile that made it reach the threshold.
			t.log.Warn("hot loop", "kind", string(h.Kind), "namespace", h.Namespace, "name", h.Name, "uid", h.UID,
				"resource", h.Resource, "subresource", h.Subresource, "count", h.Count, "window", window,
				"controller", s.Controller, "pid", s.PID, "reconcile_id", s.ReconcileID, "pod", s.Pod)
		}
	}
	if t.opts.Writer != nil {
		if err := t.opts.Writer.Write(s); err != nil {
			t.log.Warn("export span", "err", err)
		}
	}
}

// flushHeld writes the held spans of the processes Admit accepted. Run's goroutine only (the
// writer is not shared between goroutines).
func (t *Tracer) flushHeld() {
	t.mu.Lock()
	var out []span.Span
	// Spans of processes never admitted here (untraced before their events were read) go
	// out as they are after a while.
	for pid, since := range t.orphans {
		if p := t.procs[pid]; p != nil || time.Since(since) > orphanWait {
			delete(t.orphans, pid)
			if p == nil || !p.held {
				t.release = append(t.release, pid)
			}
		}
	}
	for _, pid := range t.release {
		spans := t.held[pid]
		delete(t.held, pid)
		for i := range spans {
			t.decorate(&spans[i], t.procs[pid])
			if t.selects(&spans[i]) {
				out = append(out, spans[i])
			}
		}
	}
	t.release = t.release[:0]
	t.mu.Unlock()
	for i := range out {
		t.write(&out[i])
	}
}

// AttachExe inspects the executable at path and attaches its plan before any process runs it;
// it stays attached until Close. With Options.AdmitExecs, every process that execs it later is
// traced from its first instruction; processes running it already are traced by TracePID.
func (t *Tracer) AttachExe(path string) (*probes.Plan, error) {
	id, err := t.col.FileID(path)
	if err != nil {
		return nil, err
	}
	e, err := t.acquire(id, path, func() (*symbols.Binary, error) { return symbols.Open(path) }, path)
	if err != nil {
		if e != nil {
			return e.plan, err
		}
		return nil, err
	}
	t.mu.Lock()
	e.pinned = true
	t.mu.Unlock()
	t.unref(e)
	return e.plan, nil
}

// TracePID starts tracing process pid. It inspects the process's executable, attaches its
// plan unless another process of the same executable already did, and adds pid to the
// kernel's filter. It returns the plan. It is safe to call from many goroutines: an
// executable is inspected and attached once, however many of its processes are traced at
// once, and a caller never waits for the inspection of another executable.
func (t *Tracer) TracePID(pid int) (*probes.Plan, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("process %d: not a process ID", pid)
	}
	link := t.proc.ExeLink(pid)
	id, err := t.col.FileID(link)
	if errors.Is(err, os.ErrPermission) {
		// Opening another user's /proc/PID/exe needs the ptrace access check (CAP_SYS_PTRACE),
		// and a file that user alone may read needs CAP_DAC_READ_SEARCH: the same two that
		// symbols.OpenPID names, checked first here.
		return nil, fmt.Errorf("process %d: %w (another user's process: run as root, or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH)", pid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	path := link
	if exe, err := t.proc.Exe(pid); err == nil {
		path = exe
	}
	e, err := t.acquire(id, path, func() (*symbols.Binary, error) { return symbols.Open(link) }, link)
	if err != nil {
		if e != nil {
			return e.plan, fmt.Errorf("process %d: %w", pid, err)
		}
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	defer t.unref(e)
	if err := t.addProcess(pid, e, false); err != nil {
		return e.plan, err
	}
	return e.plan, nil
}

// permanent says whether an inspection failure is a property of the file (remembered, so the
// file is not inspected again) rather than of the moment.
func permanent(err error) bool { return probes.Untraceable(err) }

// acquire returns the attached executable key, inspecting and attaching it first unless done
// or under way; the caller then holds a reference (release it with unref). On failure the
// returned exe, when not nil, carries the plan that says what is missing.
//
// A caller that waited for another's inspection and got a failure of the moment (not of the
// file: the other process exited mid-inspection, say) tries again with its own open: the
// failure was the other process's, and this one would otherwise never be traced.
func (t *Tracer) acquire(key proc.KernelFileID, path string, open func() (*symbols.Binary, error), attachPath string) (*exe, error) {
	for {
		t.mu.Lock()
		e := t.exes[key]
		mine := e == nil
		if !mine {
			e.users++
			t.mu.Unlock()
			<-e.ready
		} else {
			e = &exe{key: key, ready: make(chan struct{}), path: path, pids: map[int]bool{}, users: 1}
			t.exes[key] = e
			t.mu.Unlock()
			t.attach(e, open, attachPath)
		}
		if e.err == nil {
			return e, nil
		}
		t.mu.Lock()
		e.users--
		t.mu.Unlock()
		if mine || permanent(e.err) {
			return e, e.err
		}
	}
}

// attach inspects and attaches e, at most Options.Inspections at once, then closes e.ready.
func (t *Tracer) attach(e *exe, open func() (*symbols.Binary, error), attachPath string) {
	t.inspect <- struct{}{}
	plan, att, callsPlan, err := t.inspectAndAttach(e.key, open, attachPath)
	<-t.inspect
	var calls *collector.Attachment
	if err == nil && callsPlan != nil && t.opts.Detail.CallsAhead() {
		// A controller to trace at detail calls may be in it: its first reconciles have their calls.
		if calls, err = t.col.AttachCalls(attachPath, e.key, callsPlan); err != nil {
			t.log.Warn("attach the calls probes: spans come at detail reconcile", "exe", e.path, "err", err)
			calls, err = nil, nil
		}
	}
	if err == nil {
		if err = t.sameFile(e, attachPath, att, calls); err != nil {
			plan.Binary.Close()
			att, calls = nil, nil
		}
	}
	t.mu.Lock()
	e.plan, e.att, e.err = plan, att, err
	e.callsPlan, e.calls = callsPlan, calls
	if err != nil && !permanent(err) && t.exes[e.key] == e {
		delete(t.exes, e.key) // tried again next time
	}
	close(e.ready)
	t.mu.Unlock()
	if err == nil {
		t.log.Info("attached", "exe", e.path, "go", plan.Binary.GoVersion, "sites", len(plan.Sites), "probes", plan.Probes())
		// One line per choice: a binary with many work-queue shapes has dozens, so they are
		// debug detail (inspect shows them too); "attached" says what was attached.
		if calls != nil {
			t.log.Info("attached the calls probes", "exe", e.path, "sites", len(callsPlan.Sites))
		}
		for _, c := range plan.Choices {
			t.log.Debug("sites chosen", "exe", e.path, "probe", c.ProbeID, "at", c.Sites, "why", c.Why)
		}
		if why := plan.QueueLayoutUnknown(); why != "" {
			t.log.Warn("queue layout unknown: the items of these work queues are not traced", "exe", e.path, "why", why)
		}
	}
}

// errFileChanged is attach's failure when the executable's path named another file by the end
// of its inspection: the process exec'd meanwhile (a container's runtime execs its entry point).
var errFileChanged = errors.New("the executable changed while it was inspected (the process exec'd): its new one is traced once found")

// sameFile checks that attachPath still names e's file once e is inspected and attached through
// it, and detaches att and calls if not. Identity, inspection and attachment each resolve the
// path; a file that is still the one identified before them all was the one each of them saw.
// Otherwise the probes of one file would be kept under another's identity, and attached a
// second time under their own when the process is found again: every hit twice.
func (t *Tracer) sameFile(e *exe, attachPath string, att, calls *collector.Attachment) error {
	id, err := t.col.FileID(attachPath)
	if err == nil && id == e.key {
		return nil
	}
	if calls != nil {
		_ = calls.Close()
	}
	_ = att.Close()
	if err != nil {
		return err
	}
	return errFileChanged
}

func (t *Tracer) inspectAndAttach(id proc.KernelFileID, open func() (*symbols.Binary, error), attachPath string) (*probes.Plan, *collector.Attachment, *probes.Plan, error) {
	bin, err := open()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("inspect: %w", err)
	}
	plan, err := probes.NewPlan(bin, t.opts.Catalog)
	if err != nil {
		bin.Close()
		return plan, nil, nil, fmt.Errorf("%s: %w", bin.Path, err)
	}
	var callsPlan *probes.Plan
	if t.mixed {
		// Planned now, while the binary's tables are at hand; attached when needed.
		if cp, err := probes.NewCallsPlan(bin, t.opts.CallsCatalog); err == nil {
			callsPlan = cp
		}
	}
	for _, o := range plan.Offsets {
		if o.Err != nil {
			t.log.Warn("field offset unknown: spans come without the fields that need it", "exe", bin.Path, "type", o.Type, "field", o.Path, "err", o.Err)
		}
	}
	att, err := t.col.Attach(attachPath, id, plan)
	for errors.Is(err, collector.ErrSiteTableFull) && t.detachIdlest() {
		att, err = t.col.Attach(attachPath, id, plan)
	}
	if err != nil {
		bin.Close()
		return plan, nil, nil, err
	}
	// Planned and attached: keep only what tracing needs (naming error types), not the
	// function and symbol tables (tens of MiB for kube-controller-manager), and give the
	// memory the inspection used back to the system now: the runtime's scavenger would
	// return it over minutes, while it counted in the agent's resident memory (and the next
	// inspection's peak came on top of it).
	bin.Release()
	debug.FreeOSMemory()
	if t.opts.AdmitExecs {
		if err := att.AdmitExecs(); err != nil {
			t.log.Warn("new processes of this executable are traced once found, not from their exec", "exe", bin.Path, "err", err)
		}
	}
	return plan, att, callsPlan, nil
}

// unref drops a reference taken by acquire, detaching the executable if nothing uses it.
func (t *Tracer) unref(e *exe) {
	t.mu.Lock()
	e.users--
	t.mu.Unlock()
	t.releaseIfUnused(e)
}

// addProcess traces pid, a process of the attached executable e (the caller holds a reference).
// held: admitted at exec, its spans wait for Options.Admit.
func (t *Tracer) addProcess(pid int, e *exe, held bool) error {
	t.mu.Lock()
	if p := t.procs[pid]; p != nil {
		t.mu.Unlock()
		<-p.ready
		if p.err != nil {
			return p.err
		}
		if p.exe == e {
			if held {
				t.mu.Lock()
				if !p.judged {
					p.held = true // found by discovery first: now Admit decides
				}
				t.mu.Unlock()
			}
			return nil
		}
		// The PID now runs another executable: the process exec'd.
		t.UntracePID(pid)
		return t.addProcess(pid, e, held)
	}
	p := &process{exe: e, ready: make(chan struct{}), held: held}
	t.procs[pid] = p
	e.pids[pid] = true
	e.idle = time.Time{}
	e.traced = time.Now()
	t.mu.Unlock()
	err := t.col.Trace(pid, e.att)
	t.mu.Lock()
	if err != nil {
		p.err = err
		if t.procs[pid] == p {
			delete(t.procs, pid)
			delete(e.pids, pid)
			delete(t.held, pid)
		}
	}
	close(p.ready)
	t.mu.Unlock()
	return err
}

// ProcessMeta is what the agent knows of a traced process beyond its PID: it goes into every
// span of the process.
type ProcessMeta struct {
	Pod       string // namespace/name
	Container string
	// Workload is the rest of the pod's identity (UID, owner, service); nil when unknown.
	Workload *span.Workload
	// Controllers chooses the process's controllers whose spans are written; nil:
	// Options.Controllers.
	Controllers ControllerFilter
}

// SetProcessMeta sets the metadata of process pid's spans.
func (t *Tracer) SetProcessMeta(pid int, m ProcessMeta) {
	t.mu.Lock()
	t.meta[pid] = m
	t.mu.Unlock()
}

// UntracePID stops tracing pid; the executable's probes are detached with its last process
// (Options.Grace later, with admission at exec). It
// also removes a process the kernel admitted at exec that was not traced here yet.
func (t *Tracer) UntracePID(pid int) {
	t.mu.Lock()
	p := t.procs[pid]
	if p != nil {
		delete(t.procs, pid)
		delete(p.exe.pids, pid)
	}
	delete(t.meta, pid)
	delete(t.held, pid)
	delete(t.orphans, pid)
	t.mu.Unlock()
	if p != nil {
		<-p.ready
	}
	t.col.Untrace(pid)
	if p != nil {
		t.releaseIfUnused(p.exe)
	}
}

// releaseIfUnused detaches e if nothing uses it and no grace keeps it attached; an executable
// that just lost its last process becomes idle instead, for Options.Grace.
func (t *Tracer) releaseIfUnused(e *exe) {
	t.mu.Lock()
	if !t.unused(e) {
		t.mu.Unlock()
		return
	}
	why := "no process of it left"
	if grace := t.opts.Grace; grace > 0 && !t.closing {
		if e.idle.IsZero() {
			e.idle = time.Now()
			t.mu.Unlock()
			t.log.Info("no process of it left: stays attached for a restart", "exe", e.path, "for", grace)
			return
		}
		idle := time.Since(e.idle)
		if idle < grace {
			t.mu.Unlock()
			return
		}
		why = fmt.Sprintf("no process of it for %s", idle.Round(time.Millisecond))
	} else if t.closing {
		why = "the tracer closes"
	}
	delete(t.exes, e.key)
	t.mu.Unlock()
	t.detach(e, why)
}

// unused says whether e is attached with no process, no caller and no pin: it may be detached.
// Callers hold t.mu.
func (t *Tracer) unused(e *exe) bool {
	return len(e.pids) == 0 && e.users == 0 && !e.pinned && e.att != nil && t.exes[e.key] == e
}

// detach detaches e, which the caller took out of t.exes.
func (t *Tracer) detach(e *exe, why string) {
	t.mu.Lock()
	calls := e.calls
	e.calls = nil
	t.mu.Unlock()
	if calls != nil {
		_ = calls.Close()
	}
	if err := e.att.Close(); err != nil {
		t.log.Warn("detach", "exe", e.path, "err", err)
	}
	e.plan.Binary.Close()
	t.log.Info("detached", "exe", e.path, "why", why)
}

// idleExes returns the executables kept attached without a process (Options.Grace), idle
// longest first. Callers hold t.mu.
func (t *Tracer) idleExes() []*exe {
	var out []*exe
	for _, e := range t.exes {
		if !e.idle.IsZero() && t.unused(e) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *exe) int { return a.idle.Compare(b.idle) })
	return out
}

// expireIdle detaches the idle executables whose grace is over.
func (t *Tracer) expireIdle() {
	t.mu.Lock()
	idle := t.idleExes()
	t.mu.Unlock()
	for _, e := range idle {
		t.releaseIfUnused(e)
	}
}

// detachIdlest detaches the executable idle longest, to make room in the site table; false
// when there is none.
func (t *Tracer) detachIdlest() bool {
	t.mu.Lock()
	idle := t.idleExes()
	if len(idle) == 0 {
		t.mu.Unlock()
		return false
	}
	e := idle[0]
	delete(t.exes, e.key)
	t.mu.Unlock()
	t.detach(e, fmt.Sprintf("site table full: idle for %s, room made for another executable", time.Since(e.idle).Round(time.Millisecond)))
	return true
}

// WatchExecs reports the PID of every process that calls execve on the host, until ctx ends
// (collector.WatchExecs), for discovery to look at. With Options.AdmitExecs, it also takes in
// each new process of an attached executable, which the kernel traces from its exec: the
// tracer traces it here too (its load address, its spans' executable) and asks Options.Admit.
func (t *Tracer) WatchExecs(ctx context.Context) (<-chan int, error) {
	execs, err := t.col.WatchExecs(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan int, 256)
	go func() {
		defer close(out)
		for ex := range execs {
			if ex.Admitted {
				t.admit(ex)
			} else {
				t.mu.Lock()
				p := t.procs[ex.PID]
				t.mu.Unlock()
				// A traced process exec'd a program that is not attached; not the process's own
				// exec of the executable it is traced for, read after TracePID found it.
				if p != nil && p.exe.key != ex.Exe {
					t.UntracePID(ex.PID)
				}
			}
			select {
			case out <- ex.PID:
			default:
			}
		}
	}()
	return out, nil
}

// admit takes in a process the kernel admitted at exec.
func (t *Tracer) admit(ex collector.Exec) {
	t.mu.Lock()
	e := t.exes[ex.Exe]
	if e != nil {
		e.users++
	}
	t.mu.Unlock()
	if e == nil {
		t.col.Untrace(ex.PID) // detached meanwhile
		return
	}
	<-e.ready
	if e.err != nil {
		t.unref(e)
		t.col.Untrace(ex.PID)
		return
	}
	err := t.addProcess(ex.PID, e, t.opts.Admit != nil)
	t.unref(e)
	if err != nil {
		t.log.Debug("process admitted at exec is gone", "pid", ex.PID, "err", err)
		t.UntracePID(ex.PID)
		return
	}
	t.log.Debug("traced from exec", "pid", ex.PID, "exe", e.path)
	if t.opts.Admit == nil {
		return
	}
	go func() {
		meta, ok := t.opts.Admit(ex.PID)
		if !ok {
			t.UntracePID(ex.PID) // its held spans go with it: the filter excludes the process
			return
		}
		t.mu.Lock()
		if p := t.procs[ex.PID]; p != nil {
			p.held, p.judged = false, true
			t.meta[ex.PID] = meta
			t.release = append(t.release, ex.PID)
		}
		t.mu.Unlock()
	}()
}

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
	}, func() {
		t.flushHeld()
		house(true)
	})
	t.asm.Flush()
	t.flushHeld()
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
		if t.proc.Exited(pid) {
			t.dying[pid] = true
		}
	}
	t.expireIdle()
	if t.mixed {
		t.refreshDetail()
	}
	t.asm.Expire(ktime.Monotonic())
	t.open.Store(int64(t.asm.Open()))
	t.statsMu.Lock()
	t.astats = t.asm.Stats()
	t.statsMu.Unlock()
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
	dropped, excluded := t.heldDropped, t.excluded
	t.mu.Unlock()
	t.statsMu.Lock()
	as := t.astats
	t.statsMu.Unlock()
	return Stats{Kernel: k, Reader: t.col.ReadStats(), Assembler: as, Processes: procs, Sites: sites, Idle: idle, Open: int(t.open.Load()), HeldDropped: dropped, Excluded: excluded}
}

// KernelGoroutines returns how many goroutines of process pid the kernel holds span state for
// (open reconciles, and goroutines they started); none once pid is no longer traced.
func (t *Tracer) KernelGoroutines(pid int) (int, error) { return t.col.GoroutinesOf(pid) }

// Close detaches every executable, idle ones too, and frees the eBPF objects.
func (t *Tracer) Close() error {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
	for _, pid := range t.PIDs() {
		t.UntracePID(pid)
	}
	t.mu.Lock()
	var left []*exe
	for _, e := range t.exes {
		e.pinned = false
		left = append(left, e)
	}
	t.mu.Unlock()
	for _, e := range left {
		t.releaseIfUnused(e)
	}
	return t.col.Close()
}
