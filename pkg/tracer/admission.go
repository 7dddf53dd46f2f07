package tracer

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/reconscope/reconscope/pkg/span"
)

// maxHeld bounds the spans held per process while Options.Admit decides on it.
const maxHeld = 4096

// orphanWait is how long spans of a process unknown to the tracer are held for its exec
// notification before they are written without metadata.
const orphanWait = 2 * time.Second

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
func (t *Tracer) SetProcessMeta(pid int, m ProcessMeta) { t.adm.setMeta(pid, m) }

// admission is the tracer's part that knows what a process's spans carry (ProcessMeta), and
// holds the spans of processes admitted at exec while Options.Admit decides on them (and those
// of processes not known yet, read before their exec notification). Its state is its own,
// under its own lock; it knows of the process table only what its callers tell it. Its lock is
// never held while Tracer.mu is taken (addProcess takes it inside Tracer.mu, nothing the other
// way round).
type admission struct {
	mu      sync.Mutex
	meta    map[int]ProcessMeta
	waiting map[int]bool        // admitted at exec, awaiting Admit's verdict (false: judged)
	held    map[int][]span.Span // spans of processes awaiting Admit's verdict
	orphans map[int]time.Time   // held spans of processes not known yet, since when
	release []int               // processes whose held spans may go now
	dropped uint64              // Stats.HeldDropped
}

func newAdmission() admission {
	return admission{meta: map[int]ProcessMeta{}, waiting: map[int]bool{}, held: map[int][]span.Span{}, orphans: map[int]time.Time{}}
}

// setMeta sets the metadata of process pid's spans.
func (a *admission) setMeta(pid int, m ProcessMeta) {
	a.mu.Lock()
	a.meta[pid] = m
	a.mu.Unlock()
}

// await makes pid's spans wait for Admit's verdict, unless a verdict was given already on the
// same process (known: traced before, found by discovery first).
func (a *admission) await(pid int, known bool) {
	a.mu.Lock()
	if judged := known && a.judged(pid); !judged {
		a.waiting[pid] = true
	}
	a.mu.Unlock()
}

// judged says whether Admit gave pid its verdict. Callers hold a.mu.
func (a *admission) judged(pid int) bool {
	w, ok := a.waiting[pid]
	return ok && !w
}

// accept ends pid's wait with Admit's yes: its spans carry meta, and those held go at the next
// flush. A process forgotten meanwhile stays forgotten.
func (a *admission) accept(pid int, meta ProcessMeta) {
	a.mu.Lock()
	if _, ok := a.waiting[pid]; ok {
		a.waiting[pid] = false
		a.meta[pid] = meta
		a.release = append(a.release, pid)
	}
	a.mu.Unlock()
}

// unwait drops pid's held spans and its wait: its tracing failed.
func (a *admission) unwait(pid int) {
	a.mu.Lock()
	delete(a.waiting, pid)
	delete(a.held, pid)
	a.mu.Unlock()
}

// forget drops everything known of pid: it is no longer traced.
func (a *admission) forget(pid int) {
	a.mu.Lock()
	delete(a.meta, pid)
	delete(a.waiting, pid)
	delete(a.held, pid)
	delete(a.orphans, pid)
	a.mu.Unlock()
}

// hold holds s if its process awaits Admit's verdict (known: in the process table), or is not
// known yet while admissions are judged (judging); otherwise it returns the metadata of s's
// process.
func (a *admission) hold(s span.Span, known, judging bool) (meta ProcessMeta, ok, held bool) {
	pid := int(s.PID)
	a.mu.Lock()
	defer a.mu.Unlock()
	if (known && a.waiting[pid]) || (!known && judging) {
		if len(a.held[pid]) < maxHeld {
			if len(a.held[pid]) == 0 && !known {
				a.orphans[pid] = time.Now()
			}
			a.held[pid] = append(a.held[pid], s)
		} else {
			a.dropped++
		}
		return ProcessMeta{}, false, true
	}
	meta, ok = a.meta[pid]
	return meta, ok, false
}

// pending says whether held spans may be due: some process's verdict came, or (orphans) spans
// of processes not known yet wait.
func (a *admission) pending(orphans bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.release) > 0 || (orphans && len(a.orphans) > 0)
}

// orphanPIDs returns the processes whose spans were held before they were known.
func (a *admission) orphanPIDs() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Collect(maps.Keys(a.orphans))
}

// releasedSpan is a held span let go, with the metadata of its process.
type releasedSpan struct {
	span    span.Span
	meta    ProcessMeta
	hasMeta bool
}

// take returns the held spans that may go now: those of processes Admit accepted, and those of
// processes not known yet once known (unless they await a verdict) or after orphanWait
// (known: the orphans now in the process table).
func (a *admission) take(known map[int]bool) []releasedSpan {
	a.mu.Lock()
	defer a.mu.Unlock()
	for pid, since := range a.orphans {
		if known[pid] || time.Since(since) > orphanWait {
			delete(a.orphans, pid)
			if !known[pid] || !a.waiting[pid] {
				a.release = append(a.release, pid)
			}
		}
	}
	var out []releasedSpan
	for _, pid := range a.release {
		meta, ok := a.meta[pid]
		for _, s := range a.held[pid] {
			out = append(out, releasedSpan{span: s, meta: meta, hasMeta: ok})
		}
		delete(a.held, pid)
	}
	a.release = a.release[:0]
	return out
}

// heldDropped is Stats.HeldDropped.
func (a *admission) heldDropped() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.dropped
}

// flushHeld writes the held spans of the processes Admit accepted. Run's goroutine only (the
// writer is not shared between goroutines).
func (t *Tracer) flushHeld() {
	if !t.adm.pending(true) {
		return
	}
	// Spans of processes never admitted here (untraced before their events were read) go
	// out as they are after a while, or once their process is known.
	known := map[int]bool{}
	orphans := t.adm.orphanPIDs()
	t.mu.Lock()
	for _, pid := range orphans {
		known[pid] = t.procs[pid] != nil
	}
	t.mu.Unlock()
	out := t.adm.take(known)
	for i := range out {
		r := &out[i]
		path, _ := t.exePath(int(r.span.PID))
		t.decorate(&r.span, path, r.meta, r.hasMeta)
		if t.selects(&r.span, r.meta) {
			t.write(&r.span)
		}
	}
}
