package tracer

// The executable cache: each executable inspected and attached once, however many of its
// processes are traced, kept attached for Options.Grace after its last process, and detached
// early, idle longest first, when the site table is full. Its state (t.exes, and each exe's
// fields) is under t.mu with the process table (process.go), which points into it.

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/symbols"
)

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
	defer collectHarder()()
	bin, err := open()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("inspect: %w", err)
	}
	if t.mixed {
		// Both plans' offsets while the DWARF is in memory, then not again (the calls plan,
		// made after, would read it again beside the function table).
		probes.ResolveOffsets(bin, t.opts.Catalog, probes.DetailCalls.Catalog(t.opts.CallsCatalog))
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
	if t.opts.Inspected != nil {
		t.opts.Inspected()
	}
	if t.opts.AdmitExecs {
		if err := att.AdmitExecs(); err != nil {
			t.log.Warn("new processes of this executable are traced once found, not from their exec", "exe", bin.Path, "err", err)
		}
	}
	return plan, att, callsPlan, nil
}

// inspectGOGC is the garbage collector's percent while an inspection runs (GOGC's meaning): an
// inspection allocates tens of MiB in half a second, most of it garbage soon, and at the
// runtime's default (100) the heap could grow by the agent's whole live heap before a
// collection; these are the peaks of the agent's resident memory (issue 28, item 4). The
// inspection takes no longer (docs/daemonset.md). Between inspections the agent keeps the
// environment's GOGC: collecting as often then cost it a quarter more CPU per reconcile.
const inspectGOGC = 25

// gcHarder counts the inspections running, whose first lowers the GC percent to inspectGOGC
// and whose last sets back the percent found then.
var gcHarder struct {
	sync.Mutex
	running int
	prev    int
}

// collectHarder lowers the GC percent for an inspection (inspectGOGC, unless it is lower or
// off) and returns the function that ends it. Inspections may overlap (Options.Inspections).
func collectHarder() (done func()) {
	gcHarder.Lock()
	if gcHarder.running == 0 {
		gcHarder.prev = debug.SetGCPercent(inspectGOGC)
		if gcHarder.prev < inspectGOGC {
			debug.SetGCPercent(gcHarder.prev) // lower already, or off (negative): left as it was
		}
	}
	gcHarder.running++
	gcHarder.Unlock()
	return func() {
		gcHarder.Lock()
		gcHarder.running--
		if gcHarder.running == 0 {
			debug.SetGCPercent(gcHarder.prev)
		}
		gcHarder.Unlock()
	}
}

// unref drops a reference taken by acquire, detaching the executable if nothing uses it.
func (t *Tracer) unref(e *exe) {
	t.mu.Lock()
	e.users--
	t.mu.Unlock()
	t.releaseIfUnused(e)
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
