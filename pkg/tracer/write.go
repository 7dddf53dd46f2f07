package tracer

import (
	"sync/atomic"

	"github.com/reconscope/reconscope/pkg/span"
)

// emit is the assembler's sink: it holds the span while its process awaits Options.Admit
// (admission), or fills in what is known of its process, and writes it if its controller is
// selected. Run's goroutine only.
func (t *Tracer) emit(s span.Span) {
	if t.adm.pending(false) {
		t.flushHeld()
	}
	path, known := t.exePath(int(s.PID))
	// Held: a process admitted at exec awaiting Admit's verdict, or one not known here yet
	// while admissions are judged (its events were read before its exec notification).
	meta, ok, held := t.adm.hold(s, known, t.opts.AdmitExecs && t.opts.Admit != nil)
	if held {
		return
	}
	t.decorate(&s, path, meta, ok)
	if t.selects(&s, meta) {
		t.write(&s)
	}
}

// selection counts the spans of unselected controllers and tells the kernel to skip them.
type selection struct {
	excluded   atomic.Uint64 // Stats.Excluded
	excludeErr bool          // the kernel refused a key once: said once (Run's goroutine)
}

// selects reports whether s's controller is selected in its process (meta); when it is not,
// the span is counted and the kernel told to skip its controller instance from now on. Run's
// goroutine only.
func (t *Tracer) selects(s *span.Span, meta ProcessMeta) bool {
	var f ControllerFilter = t.opts.Controllers
	if meta.Controllers != nil {
		f = meta.Controllers
	}
	if f == nil || f.Selects(s.Controller) {
		return true
	}
	t.sel.excluded.Add(1)
	// Spans named UnnamedQueue (a queue whose name and worker are both unknown) say nothing
	// of which controller the queue is: they are dropped here, item by item. A queue named by
	// its worker is that worker's controller, and is skipped in the kernel like a named one.
	if s.Key != 0 && s.Controller != span.UnnamedQueue {
		if err := t.col.Exclude(s.PID, s.Key); err != nil && !t.sel.excludeErr {
			t.sel.excludeErr = true
			t.log.Warn("exclude a controller in the kernel", "controller", s.Controller, "pid", s.PID, "err", err)
		}
	}
	return false
}

// decorate fills in what the tracer knows of the span's process: its executable's path
// (empty: not known) and its metadata (ok: set).
func (t *Tracer) decorate(s *span.Span, path string, m ProcessMeta, ok bool) {
	if path != "" && s.Exe == "" {
		s.Exe = path
	}
	if ok {
		s.Pod, s.Container, s.Workload = m.Pod, m.Container, m.Workload
	}
}

// write writes s: its detail applied (Options.Detail), a line logged for each fight or hot
// loop that starts with it, then to Options.Writer.
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
