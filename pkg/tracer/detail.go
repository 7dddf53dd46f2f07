package tracer

import (
	"time"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
)

// applyDetail gives span s its controller's detail (Options.Detail): it tells the kernel the
// detail of s's controller instance when that changed, drops the calls of a span at detail
// reconcile, and lets the policy see the reconcile (a slow one may switch its controller).
// Run's goroutine only.
func (t *Tracer) applyDetail(s *span.Span) {
	pol := t.opts.Detail
	now := time.Now()
	lvl := pol.Detail(s.Controller, now)
	if lvl != probes.DetailCalls {
		s.DropCalls()
	}
	pol.Observe(s.Controller, s.Duration, now)
	if s.Key == 0 || s.Controller == span.UnnamedQueue {
		return
	}
	k := gateKey{pid: s.PID, key: s.Key}
	if g, ok := t.gates[k]; ok && g.controller == s.Controller {
		if next := pol.Detail(s.Controller, now); next != g.detail {
			t.refreshDetail() // a switch: the gates and the probes now
		}
		return
	}
	t.gates[k] = gate{controller: s.Controller, detail: pol.Detail(s.Controller, now)}
	t.setGate(k, t.gates[k].detail)
	if t.gates[k].detail == probes.DetailCalls {
		t.refreshDetail() // its executable's calls probes, if not attached yet
	}
}

// setGate tells the kernel instance k's detail.
func (t *Tracer) setGate(k gateKey, d probes.Detail) {
	if err := t.col.SetCallDetail(k.pid, k.key, d == probes.DetailCalls); err != nil {
		t.log.Warn("set a controller's detail in the kernel", "pid", k.pid, "err", err)
	}
}

// refreshDetail ends the switches whose time is over, tells the kernel the detail of every
// known controller instance that changed, and attaches the calls probes of the executables
// with a controller at detail calls, detaching those of the others once the spans in flight
// that began while they recorded have ended (at most callsDrain later). Run's goroutine only.
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
			g.detail = d
			t.gates[k] = g
			t.setGate(k, d)
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
	mono := ktime.Monotonic()
	for _, e := range exes {
		t.mu.Lock()
		want := ahead || need[e]
		calls := e.calls
		var pids []int
		for pid := range e.pids {
			pids = append(pids, pid)
		}
		if want {
			e.callsOff = 0
		} else if calls != nil && e.callsOff == 0 {
			e.callsOff = mono
		}
		off := e.callsOff
		t.mu.Unlock()
		switch {
		case want && calls == nil:
			path := e.path
			if len(pids) > 0 {
				path = t.proc.ExeLink(pids[0])
			}
			a, err := t.col.AttachCalls(path, e.callsPlan)
			if err != nil {
				t.log.Warn("attach the calls probes: spans come at detail reconcile", "exe", e.path, "err", err)
				continue
			}
			t.mu.Lock()
			if t.exes[e.key] != e || e.calls != nil {
				t.mu.Unlock()
				_ = a.Close() // detached meanwhile
				continue
			}
			e.calls = a
			t.mu.Unlock()
			t.log.Info("attached the calls probes", "exe", e.path, "sites", len(e.callsPlan.Sites))
		case !want && calls != nil:
			inFlight := false
			for _, pid := range pids {
				inFlight = inFlight || t.asm.OpenSince(uint32(pid), off)
			}
			if inFlight && time.Duration(mono-off) < callsDrain {
				continue // the spans that began while they recorded end first
			}
			t.detachCalls(e, calls)
		}
	}
}

// detachCalls closes e's calls probes a.
func (t *Tracer) detachCalls(e *exe, a *collector.Attachment) {
	t.mu.Lock()
	if e.calls != a {
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
