package tracer

import (
	"slices"
	"time"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
)

// applyDetail gives span s the detail its controller had when its reconcile began
// (Options.Detail): a span at detail reconcile loses the calls the kernel recorded (an
// instance it was not told of yet, or a switch's end while the reconcile ran). It notes a
// controller instance not known yet, and lets the policy see the reconcile (a slow one may
// switch its controller). Run's goroutine only.
func (t *Tracer) applyDetail(s *span.Span) {
	pol := t.opts.Detail
	now := time.Now()
	if pol.Detail(s.Controller, t.clock.Wall(s.Start)) != probes.DetailCalls {
		s.DropCalls()
	}
	before := pol.Detail(s.Controller, now)
	pol.Observe(s.Controller, s.Duration, now)
	switched := pol.Detail(s.Controller, now) != before
	if s.Key != 0 && s.Controller != span.UnnamedQueue {
		k := gateKey{pid: s.PID, key: s.Key}
		if g, ok := t.gates[k]; !ok || g.controller != s.Controller {
			t.controllersMu.Lock()
			t.controllers[s.Controller] = true
			t.controllersMu.Unlock()
			t.gates[k] = gate{controller: s.Controller, detail: before}
			switched = true
		}
	}
	if switched {
		t.refreshDetail() // the kernel is told now, not at the next housekeeping
	}
}

// HasController reports whether a span of the controller named name was written with a
// per-controller detail (Options.Detail): a controller a switch can act on. It is safe for
// concurrent use.
func (t *Tracer) HasController(name string) bool {
	t.controllersMu.Lock()
	defer t.controllersMu.Unlock()
	return t.controllers[name]
}

// setGate tells the kernel instance k's detail.
func (t *Tracer) setGate(k gateKey, d probes.Detail) {
	if err := t.col.SetCallDetail(k.pid, k.key, d == probes.DetailCalls); err != nil {
		t.log.Warn("set a controller's detail in the kernel", "pid", k.pid, "err", err)
	}
}

// refreshDetail ends the switches whose time is over and brings the kernel to the policy:
// first it attaches the calls probes of the executables with a controller at detail calls,
// then it tells the kernel the detail of every controller instance whose detail changed
// (so that a span begun at calls has its calls from its start), and last it detaches the
// calls probes of the executables with none, once the spans in flight that began while they
// recorded have ended (at most callsDrain later). Run's goroutine only.
func (t *Tracer) refreshDetail() {
	pol := t.opts.Detail
	now := time.Now()
	pol.Expire(now)
	need := map[*exe]bool{}
	t.mu.Lock()
	for k, g := range t.gates {
		p := t.procs[int(k.pid)]
		if p == nil {
			delete(t.gates, k) // its process is gone; the collector forgot its keys
			continue
		}
		if d := pol.Detail(g.controller, now); d != g.detail {
			g.detail, g.told = d, false
			t.gates[k] = g
		}
		if g.detail == probes.DetailCalls {
			need[p.exe] = true
		}
	}
	var exes []*exe
	for _, e := range t.exes {
		if e.callsPlan != nil && e.att != nil {
			exes = append(exes, e)
		}
	}
	t.mu.Unlock()
	ahead := pol.CallsAhead()
	if ahead != t.ahead { // the levels were reloaded (detail.Policy.SetLevels)
		if err := t.col.SetCallDetailDefault(ahead); err != nil {
			t.log.Warn("set the detail of controllers not known yet in the kernel", "err", err)
		} else {
			t.ahead = ahead
		}
	}
	var drop []*exe
	for _, e := range exes {
		t.mu.Lock()
		want := need[e] || (ahead && (e.traced.IsZero() || now.Sub(e.traced) < callsAhead))
		calls := e.calls
		pid := 0
		for p := range e.pids {
			pid = p
			break
		}
		t.mu.Unlock()
		switch {
		case want && calls == nil:
			t.attachCalls(e, pid)
		case !want && calls != nil:
			drop = append(drop, e)
		}
	}
	t.mu.Lock()
	for k, g := range t.gates {
		if !g.told {
			t.setGate(k, g.detail)
			g.told = true
			t.gates[k] = g
		}
	}
	t.mu.Unlock()
	mono := ktime.Monotonic()
	for _, e := range drop {
		t.mu.Lock()
		if e.callsOff == 0 {
			e.callsOff = mono
		}
		off, calls := e.callsOff, e.calls
		var pids []int
		for p := range e.pids {
			pids = append(pids, p)
		}
		t.mu.Unlock()
		inFlight := false
		for _, pid := range pids {
			inFlight = inFlight || t.asm.OpenSince(uint32(pid), off)
		}
		if inFlight && time.Duration(mono-off) < callsDrain {
			continue // the spans that began while they recorded end first
		}
		t.detachCalls(e, calls)
	}
	for _, e := range exes {
		if !slices.Contains(drop, e) {
			t.mu.Lock()
			e.callsOff = 0
			t.mu.Unlock()
		}
	}
}

// attachCalls attaches e's calls probes, through process pid's executable link (0: e's path).
func (t *Tracer) attachCalls(e *exe, pid int) {
	path := e.path
	if pid > 0 {
		path = t.proc.ExeLink(pid)
	}
	a, err := t.col.AttachCalls(path, e.key, e.callsPlan)
	if err == nil {
		if id, ierr := t.col.FileID(path); ierr != nil || id != e.key {
			_ = a.Close() // the process exec'd: the path names another file now
			err = errFileChanged
		}
	}
	if err != nil {
		t.log.Warn("attach the calls probes: spans come at detail reconcile", "exe", e.path, "err", err)
		return
	}
	t.mu.Lock()
	if t.exes[e.key] != e || e.calls != nil {
		t.mu.Unlock()
		_ = a.Close() // detached meanwhile
		return
	}
	e.calls = a
	t.mu.Unlock()
	t.log.Info("attached the calls probes", "exe", e.path, "sites", len(e.callsPlan.Sites))
}

// detachCalls closes e's calls probes a.
func (t *Tracer) detachCalls(e *exe, a *collector.Attachment) {
	t.mu.Lock()
	if e.calls != a || a == nil {
		t.mu.Unlock()
		return
	}
	e.calls = nil
	e.callsOff = 0
	t.mu.Unlock()
	if err := a.Close(); err != nil {
		t.log.Warn("detach the calls probes", "exe", e.path, "err", err)
	}
	t.log.Info("detached the calls probes", "exe", e.path, "why", "no controller of it at detail calls")
}
