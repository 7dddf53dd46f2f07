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
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/detail"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/span"
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
	// GOMAXPROCS: more at once would not end sooner, each holding its heap (~25-35 MiB for
	// kube-controller-manager) meanwhile; the agent's peak memory is theirs.
	Inspections int
	// Inspected, when set, is called after each executable is inspected and attached, once
	// the inspection's heap is given back to the system: cmd/agent takes the pages of its own
	// executable out of its address space there (agent.ReleaseExecutablePages), the code and
	// tables only inspecting touched among them.
	Inspected func()
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

// Tracer traces processes. Add targets with TracePID (or AttachExe), then Run.
//
// Its jobs are parts, each in its own file with the state it owns: the executable cache
// (exes.go: attach, grace, eviction) and the process table (process.go), one state under mu;
// admission at exec and the spans' metadata (admission.go: type admission, its own lock); the
// writing of spans (write.go: selection of controllers, fight and hot-loop lines); the run
// loop and housekeeping (run.go: dying); statistics (stats.go: figures); per-controller
// detail (detail.go: gates, controllers).
type Tracer struct {
	opts    Options
	log     *slog.Logger
	col     *collector.Collector
	clock   ktime.Clock
	proc    proc.FS
	inspect chan struct{} // semaphore: inspections at once

	// The executable cache (exes.go) and the process table (process.go): one state, since a
	// process belongs to an executable (process.exe, exe.pids), changed together under mu.
	mu      sync.Mutex
	exes    map[proc.KernelFileID]*exe // every process of one file, in any container, shares one
	procs   map[int]*process
	closing bool // Close runs: executables are detached with their last process

	adm   admission    // spans' metadata, and spans held for Options.Admit (admission.go); its own lock
	sel   selection    // the spans of unselected controllers (write.go)
	dying map[int]bool // Run's goroutine only: exited processes, closed at the next idle poll (run.go)

	// gates: the controller instances whose detail the kernel was told (Options.Detail);
	// Run's goroutine only.
	gates map[gateKey]gate
	mixed bool // Options.Detail is set and mixed
	ahead bool // what the kernel was told of controller instances it does not know (CallsAhead)
	// controllers are the controllers whose spans were written with a per-controller detail
	// (HasController; controllersMu).
	controllersMu sync.Mutex
	controllers   map[string]bool

	asm     *span.Assembler // Run's goroutine only
	figures figures         // the assembler's, for Stats (stats.go)
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
		opts.Inspections = runtime.GOMAXPROCS(0)
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
		adm:     newAdmission(),
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
