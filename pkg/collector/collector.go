// Package collector is reconscope's kernel edge: it loads the eBPF objects, attaches an
// executable's probe plan as uprobes (one attach per executable serves all its processes; a
// PID filter in the kernel selects the traced ones), reads the ring buffer, decodes events and
// counts every drop. It never uses uretprobes: returns are probed at each RET instruction.
package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
)

// Options configures a Collector.
type Options struct {
	// RingBufferSize is the ring buffer's size in bytes: a power of two, multiple of the page
	// size. Zero means 4 MiB.
	RingBufferSize int
	// WakeupBytes makes the kernel wake the reader each time this many bytes were submitted
	// since it last did; in between the reader polls every PollInterval. Zero means a quarter
	// of the ring buffer.
	WakeupBytes int
	// ForceSingleUprobes attaches one perf-event uprobe per site even where the kernel has
	// uprobe_multi links.
	ForceSingleUprobes bool
	// Logger receives attach and detach messages. Nil means slog.Default().
	Logger *slog.Logger
	// ProcRoot is where the host's proc file system is mounted. Empty means /proc.
	ProcRoot string
	// SiteTable is how many probe sites the attached executables may have in all (the
	// kernel's site table). Zero means 4096.
	SiteTable int
	// PerControllerDetail makes span entries read their controller instance's detail
	// (SetCallDetail) for the gated sites of AttachCalls; without it gated sites never record.
	PerControllerDetail bool
}

// ErrSiteTableFull means the site table has no room for an executable's sites: detach some.
var ErrSiteTableFull = errors.New("site table full")

// ErrPermission means the kernel refused to load or attach eBPF programs. Its message names
// the capabilities the process lacks when it can tell (from /proc/self/status).
var ErrPermission = errors.New("permission denied: reconscope needs root, or CAP_BPF and CAP_PERFMON, and CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH to read other users' processes and binaries")

// Collector owns the loaded eBPF objects and the ring-buffer reader.
type Collector struct {
	log       *slog.Logger
	proc      proc.FS
	coll      *ebpf.Collection
	execSpec  *ebpf.CollectionSpec // on_exec and identify, loaded on first use
	execProgs execPrograms
	prog      *ebpf.Program
	multi     bool
	sites     *ebpf.Map
	pids      *pidFilter
	exes      *ebpf.Map
	errs      *ebpf.Map
	gors      *ebpf.Map
	counts    *ebpf.Map
	excluded  *ebpf.Map
	detail    *ebpf.Map // call_detail: per controller instance, whether gated call sites record
	reader    *ringbuf.Reader

	events, malformed, adoptFailed atomic.Uint64

	mu       sync.RWMutex
	table    []*probes.Site // index = attach cookie
	owner    []*Attachment  // index = attach cookie
	attached map[*Attachment]struct{}
	procs    map[uint32]*process
}

// New loads the eBPF objects. It needs CAP_BPF and CAP_PERFMON (or root).
func New(opts Options) (*Collector, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RingBufferSize == 0 {
		opts.RingBufferSize = 4 << 20
	}
	if opts.RingBufferSize < os.Getpagesize() || opts.RingBufferSize&(opts.RingBufferSize-1) != 0 {
		return nil, fmt.Errorf("ring buffer size %d: must be a power of two of at least %d bytes", opts.RingBufferSize, os.Getpagesize())
	}
	if opts.WakeupBytes == 0 {
		opts.WakeupBytes = opts.RingBufferSize / 4
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", permission(err, memlockNeed()))
	}
	feats := ProbeFeatures()
	if err := feats.Floor(); err != nil {
		return nil, err
	}
	spec, err := rbpf.LoadTrace()
	if err != nil {
		return nil, fmt.Errorf("load eBPF spec: %w", err)
	}
	spec.Maps[rbpf.TraceMapEvents].MaxEntries = uint32(opts.RingBufferSize)
	if opts.SiteTable > 0 {
		spec.Maps[rbpf.TraceMapSites].MaxEntries = uint32(opts.SiteTable)
	}
	if err := spec.Variables["wakeup_bytes"].Set(uint64(opts.WakeupBytes)); err != nil {
		return nil, fmt.Errorf("set wakeup threshold: %w", err)
	}
	if opts.PerControllerDetail {
		if err := spec.Variables["per_controller_detail"].Set(uint32(1)); err != nil {
			return nil, fmt.Errorf("set per-controller detail: %w", err)
		}
	}
	multi := !opts.ForceSingleUprobes && feats.Get("uprobe_multi").Err == nil
	fallbacks(feats, spec, opts)
	// on_exec and identify need the kernel's BTF: they are loaded apart (execPrograms).
	execSpec := spec.Copy()
	delete(spec.Programs, rbpf.TraceProgOnExec)
	delete(spec.Programs, rbpf.TraceProgIdentify)
	progName := rbpf.TraceProgProbeSite
	if multi {
		progName = rbpf.TraceProgProbeSiteMulti
		delete(spec.Programs, rbpf.TraceProgProbeSite)
	} else {
		delete(spec.Programs, rbpf.TraceProgProbeSiteMulti)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, verifierError(opts.Logger, ve)
		}
		return nil, fmt.Errorf("load eBPF programs: %w", permission(err, unix.CAP_BPF, unix.CAP_PERFMON))
	}
	c := &Collector{
		log:      opts.Logger,
		proc:     proc.New(opts.ProcRoot),
		coll:     coll,
		execSpec: execSpec,
		prog:     coll.Programs[progName],
		multi:    multi,
		sites:    coll.Maps[rbpf.TraceMapSites],
		exes:     coll.Maps[rbpf.TraceMapTracedExes],
		errs:     coll.Maps[rbpf.TraceMapErrLayouts],
		gors:     coll.Maps[rbpf.TraceMapGoroutines],
		counts:   coll.Maps[rbpf.TraceMapCounters],
		excluded: coll.Maps[rbpf.TraceMapExcluded],
		detail:   coll.Maps[rbpf.TraceMapCallDetail],
		table:    make([]*probes.Site, 0, 64),
		attached: map[*Attachment]struct{}{},
		procs:    map[uint32]*process{},
	}
	c.pids, err = mapPIDFilter(coll.Maps[rbpf.TraceMapTracedPids])
	if err != nil {
		coll.Close()
		return nil, err
	}
	c.reader, err = ringbuf.NewReader(coll.Maps[rbpf.TraceMapEvents])
	if err != nil {
		c.pids.close()
		coll.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	return c, nil
}

// UprobeMulti reports whether sites are attached through uprobe_multi links.
func (c *Collector) UprobeMulti() bool { return c.multi }

// Counters are the kernel side's counters.
type Counters struct {
	LostRingBuffer uint64 // events dropped because the ring buffer was full
	LostState      uint64 // span entries whose goroutine state could not be stored
	CallsOutside   uint64 // call probe hits outside any span (filtered, not lost)
	Hits           uint64 // probe hits in traced processes
	Inherited      uint64 // goroutines started inside a span, whose calls join that span
	Admitted       uint64 // processes added to the PID filter at exec (an attached executable)
	LostExec       uint64 // exec notifications dropped (exec ring buffer full)
	Excluded       uint64 // spans of an excluded controller whose entry exited early (Exclude): no record
	Handed         uint64 // work-queue items whose worker took the next item before their Done (handed to another goroutine)
	Gated          uint64 // hits of gated call sites (AttachCalls) inside spans at reconcile detail: no record
}

// Counters reads the kernel's counters.
func (c *Collector) Counters() (Counters, error) {
	var out Counters
	fields := map[rbpf.TraceCounter]*uint64{
		rbpf.TraceCounterCOUNTER_LOST_RINGBUF: &out.LostRingBuffer,
		rbpf.TraceCounterCOUNTER_LOST_STATE:   &out.LostState,
		rbpf.TraceCounterCOUNTER_CALL_OUTSIDE: &out.CallsOutside,
		rbpf.TraceCounterCOUNTER_HITS:         &out.Hits,
		rbpf.TraceCounterCOUNTER_INHERITED:    &out.Inherited,
		rbpf.TraceCounterCOUNTER_ADMITTED:     &out.Admitted,
		rbpf.TraceCounterCOUNTER_LOST_EXEC:    &out.LostExec,
		rbpf.TraceCounterCOUNTER_EXCLUDED:     &out.Excluded,
		rbpf.TraceCounterCOUNTER_HANDED:       &out.Handed,
		rbpf.TraceCounterCOUNTER_GATED:        &out.Gated,
	}
	for i, f := range fields {
		if err := c.counts.Lookup(uint32(i), f); err != nil {
			return out, fmt.Errorf("read counter %d: %w", i, err)
		}
	}
	return out, nil
}

// GoroutinesOf returns how many goroutines of process pid the kernel holds span state for:
// reconciles open on them, or inherited from the reconcile that started them (not the states
// the kernel keeps, with no span, for a goroutine's next span).
func (c *Collector) GoroutinesOf(pid int) (int, error) {
	keys, err := c.goroutineKeys(pid, true)
	return len(keys), err
}

// goroutineKeys lists the kernel's goroutine-state keys of process pid (with live, only those
// with a span open or inherited). An aborted walk (the map changing under it too much) is an
// error, not a short list.
func (c *Collector) goroutineKeys(pid int, live bool) ([]rbpf.TraceG_key, error) {
	return goroutineKeys(c.gors.Iterate(), pid, live)
}

// mapWalk is what a walk needs of an *ebpf.MapIterator.
type mapWalk interface {
	Next(key, value any) bool
	Err() error
}

// goroutineKeys walks the goroutine-state entries it yields; see Collector.goroutineKeys.
func goroutineKeys(it mapWalk, pid int, live bool) ([]rbpf.TraceG_key, error) {
	var k rbpf.TraceG_key
	var v rbpf.TraceG_state
	var keys []rbpf.TraceG_key
	for it.Next(&k, &v) {
		if k.Pid == uint32(pid) && (!live || v.Start != 0) {
			keys = append(keys, k)
		}
	}
	if err := it.Err(); err != nil {
		return keys, fmt.Errorf("walk goroutine state: %w", err)
	}
	return keys, nil
}

// Close detaches everything and frees the eBPF objects.
func (c *Collector) Close() error {
	c.mu.Lock()
	atts := make([]*Attachment, 0, len(c.attached))
	for a := range c.attached {
		atts = append(atts, a)
	}
	c.mu.Unlock()
	var errs []error
	for _, a := range atts {
		errs = append(errs, a.Close())
	}
	errs = append(errs, c.reader.Close())
	errs = append(errs, c.pids.close())
	if c.execProgs.coll != nil {
		c.execProgs.coll.Close()
	}
	c.coll.Close()
	return errors.Join(errs...)
}

// allocSites reserves n consecutive cookies. Callers hold c.mu.
func (c *Collector) allocSites(n int) (int, error) {
	max := int(c.sites.MaxEntries())
	// first fit among freed slots
	start := 0
	for start+n <= len(c.table) {
		ok := true
		for i := start; i < start+n; i++ {
			if c.table[i] != nil {
				ok = false
				start = i + 1
				break
			}
		}
		if ok {
			return start, nil
		}
	}
	start = len(c.table)
	if start+n > max {
		return 0, fmt.Errorf("%w (%d of %d used): detach some executables", ErrSiteTableFull, len(c.table), max)
	}
	c.table = append(c.table, make([]*probes.Site, n)...)
	c.owner = append(c.owner, make([]*Attachment, n)...)
	return start, nil
}

// Attachment is one executable's attached plan.
type Attachment struct {
	c     *Collector
	Path  string
	Plan  *probes.Plan
	first int // first attach cookie; also the executable's key in the kernel's error layouts
	links []link.Link
	once  sync.Once

	id   proc.KernelFileID // the file as the kernel identifies it (Collector.FileID)
	base uint64            // page-aligned address of the first PT_LOAD segment, for PIE load biases

	mu      sync.Mutex
	errKeys []rbpf.TraceErrKey
	ids     []rbpf.TraceExeId // in the kernel's traced_exes: new processes are admitted at exec
	names   map[uint64]string // static itab address (as in the file) -> short concrete type name
}

// Attach attaches plan's sites to the executable at path (for a process, /proc/PID/exe works
// and survives the file being replaced on disk), whose identity as the kernel sees it is id
// (FileID, computed once by the caller, which keys its executables by it). Processes are
// traced only once Trace names them.
func (c *Collector) Attach(path string, id proc.KernelFileID, plan *probes.Plan) (*Attachment, error) {
	return c.attach(path, id, plan, false)
}

// AttachCalls attaches plan's sites gated: its call sites (and goroutine probes) record only
// inside spans of controller instances SetCallDetail gave call detail, and return at once in
// the others (Counters.Gated). plan holds the probes only detail calls adds to an executable
// whose own plan (Attach) is at detail reconcile (probes.NewCallsPlan); it is attached and
// closed (Attachment.Close) at run time while the executable's processes are traced, without
// touching the spans in flight: a span keeps the detail it began with.
func (c *Collector) AttachCalls(path string, id proc.KernelFileID, plan *probes.Plan) (*Attachment, error) {
	return c.attach(path, id, plan, true)
}

func (c *Collector) attach(path string, id proc.KernelFileID, plan *probes.Plan, gated bool) (*Attachment, error) {
	if len(plan.Sites) == 0 {
		return nil, probes.ErrNothingToTrace
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("open executable: %w", err)
	}
	// The program headers the plan's binary read when it was opened: not read again here.
	base, err := plan.Binary.FirstSegment()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	first, err := c.allocSites(len(plan.Sites))
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	a := &Attachment{c: c, Path: path, Plan: plan, first: first, id: id, base: base}
	for i := range plan.Sites {
		c.table[first+i] = &plan.Sites[i]
		c.owner[first+i] = a
	}
	c.attached[a] = struct{}{}
	c.mu.Unlock()

	for i := range plan.Sites {
		cfg := siteConfig(plan, &plan.Sites[i])
		if gated {
			cfg.Flags |= uint8(rbpf.TraceSiteFlagSITE_F_GATED)
		}
		cfg.Exe = uint32(first)
		cfg.Vaddr = plan.Sites[i].Addr
		if err := c.sites.Put(uint32(first+i), &cfg); err != nil {
			a.Close()
			return nil, fmt.Errorf("write site config: %w", err)
		}
	}
	if err := a.writeErrorLayouts(); err != nil {
		a.Close()
		return nil, err
	}
	if c.multi {
		addrs := make([]uint64, len(plan.Sites))
		cookies := make([]uint64, len(plan.Sites))
		for i, s := range plan.Sites {
			addrs[i] = s.FileOffset
			cookies[i] = uint64(first + i)
		}
		l, err := ex.UprobeMulti(nil, c.prog, &link.UprobeMultiOptions{Addresses: addrs, Cookies: cookies})
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("attach uprobe_multi to %s: %w", path, permission(err, unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH))
		}
		a.links = append(a.links, l)
	} else {
		for i, s := range plan.Sites {
			l, err := ex.Uprobe("", c.prog, &link.UprobeOptions{Address: s.FileOffset, Cookie: uint64(first + i)})
			if err != nil {
				a.Close()
				return nil, fmt.Errorf("attach uprobe to %s at %s (%s): %w", path, s.Where(), s.Kind, permission(err, unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH))
			}
			a.links = append(a.links, l)
		}
	}
	c.log.Debug("attached", "exe", path, "sites", len(plan.Sites), "uprobe_multi", c.multi)
	return a, nil
}

// writeErrorLayouts tells the kernel where the message of each known error type is, for every
// static itab of that type in the executable (the `error` interface's: an error value's itab is
// one). The keys are per executable: a process is covered from its first instruction, whatever
// its load address. The error itabs' names are kept after the plan's tables are released
// (symbols.Binary.ErrorItabs): attaching the calls probes later reads no table of the file again.
func (a *Attachment) writeErrorLayouts() error {
	bin := a.Plan.Binary
	itabs, err := bin.ErrorItabs()
	if err != nil {
		a.c.log.Warn("error types will be resolved from process memory only", "exe", a.Path, "err", err)
	}
	a.names = make(map[uint64]string, len(itabs))
	for addr, name := range itabs {
		a.names[addr] = ShortTypeName(name)
	}
	for _, f := range probes.ErrorMessageFields {
		off, err := bin.FieldOffset(f.Type, f.Path)
		if err != nil {
			continue // the message of that type stays unread; its type is still named
		}
		typeName := "*" + ShortTypeName(f.Type) // as %T prints it
		for addr, name := range a.names {
			if name != typeName {
				continue
			}
			k := rbpf.TraceErrKey{Exe: uint32(a.first), Itab: addr}
			if err := a.c.errs.Put(&k, &rbpf.TraceErrLayout{MsgOff: uint32(off.Value)}); err != nil {
				return fmt.Errorf("write error layout: %w", err)
			}
			a.mu.Lock()
			a.errKeys = append(a.errKeys, k)
			a.mu.Unlock()
		}
	}
	return nil
}

// ID returns the executable's identity as the kernel sees it (Collector.FileID): every process
// whose code is mapped from this file, in any container, runs this attachment's probes.
func (a *Attachment) ID() proc.KernelFileID { return a.id }

// AdmitExecs makes the kernel trace every process that execs this executable from its first
// instruction, while WatchExecs runs; its notifications report each process admitted.
func (a *Attachment) AdmitExecs() error {
	id := rbpf.TraceExeId{Dev: a.id.Dev, Ino: a.id.Ino}
	if err := a.c.exes.Put(&id, uint32(a.first)); err != nil {
		return fmt.Errorf("admit new processes of %s: %w", a.Path, err)
	}
	a.mu.Lock()
	a.ids = append(a.ids, id)
	a.mu.Unlock()
	return nil
}

// Close detaches the executable's probes and frees its site slots.
func (a *Attachment) Close() error {
	var errs []error
	a.once.Do(func() {
		c := a.c
		a.mu.Lock()
		for _, id := range a.ids {
			_ = c.exes.Delete(&id)
		}
		a.ids = nil
		a.mu.Unlock()
		for _, l := range a.links {
			errs = append(errs, l.Close())
		}
		c.mu.Lock()
		for i := range a.Plan.Sites {
			if a.first+i < len(c.table) {
				c.table[a.first+i] = nil
				c.owner[a.first+i] = nil
			}
		}
		delete(c.attached, a)
		c.mu.Unlock()
		a.mu.Lock()
		for _, k := range a.errKeys {
			_ = c.errs.Delete(&k)
		}
		a.errKeys = nil
		a.mu.Unlock()
		// The site table is an array: its slots cannot be deleted, and a stale config is
		// harmless once no link uses its cookie.
	})
	return errors.Join(errs...)
}
