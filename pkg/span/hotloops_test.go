package span

import (
	"strconv"
	"testing"
	"time"
)

// loopRig drives an assembler with reconciles of one object, each served by the add of a watch
// event of a version, and each making one write.
type loopRig struct {
	a   *Assembler
	got []Span
	t   uint64
}

const loopUID = "55555555-5555-5555-5555-555555555555"

func newLoopRig(opts Options) *loopRig {
	r := &loopRig{t: 1000}
	r.a = NewAssembler(opts, func(s Span) { r.got = append(r.got, s) })
	return r
}

// reconcile runs one reconcile of ns/obj by controller ctl in process pid, triggered by the
// watch event of version event (none when ""), that PATCHes target (its returned version
// wrote, no write when "") after reading read of it (no read when "").
func (r *loopRig) reconcile(pid uint32, ctl, event, target, read, wrote string) *Span {
	r.t += uint64(time.Second)
	t := r.t
	if event != "" {
		r.a.Add(Event{Kind: WatchEvent, PID: pid, Goid: 50, Time: t, Watch: WatchUpdate,
			Object: ObjectRef{Kind: "ConfigMap", Namespace: "ns", Name: "obj", UID: loopUID, ResourceVersion: event}})
		r.a.Add(Event{Kind: QueueAdd, PID: pid, Goid: 50, Time: t + 1, Namespace: "ns", Name: "obj"})
	}
	ev := func(kind EventKind, dt uint64, c CallInfo) Event {
		return Event{Kind: kind, PID: pid, Goid: 1, Time: t + dt, Call: c}
	}
	evs := []Event{{Kind: SpanStart, PID: pid, Goid: 1, Time: t + 10, Controller: ctl, Namespace: "ns", Name: "obj"}}
	if read != "" {
		evs = append(evs, ev(CallStart, 11, CallInfo{Kind: CallCacheGet, Verb: "GET", Resource: "configmaps", Namespace: "ns", Name: target}),
			ev(CallEnd, 12, CallInfo{UID: loopUID, ResourceVersion: read, Outcome: OutcomeHit}))
	}
	if wrote != "" {
		evs = append(evs, ev(CallStart, 20, CallInfo{Kind: CallAPI, Verb: "PATCH", Resource: "configmaps", Namespace: "ns", Name: target}),
			ev(CallEnd, 30, CallInfo{Status: 200}),
			ev(CallObject, 31, CallInfo{Namespace: "ns", Name: target, UID: loopUID, ResourceVersion: wrote}))
	}
	for _, e := range append(evs, Event{Kind: SpanEnd, PID: pid, Goid: 1, Time: t + 40, Result: ResultSuccess}) {
		r.a.Add(e)
	}
	return &r.got[len(r.got)-1]
}

// TestHotLoopSelfTriggered: a controller whose every write of its object triggers its next
// reconcile of it: the DefaultHotLoopChain-th reconcile in a row triggered by its own write starts the episode
// (reported once, Start), later ones carry it; nothing before.
func TestHotLoopSelfTriggered(t *testing.T) {
	r := newLoopRig(Options{})
	prev := ""
	for i := range DefaultHotLoopChain + 4 {
		rv := strconv.Itoa(100 + i)
		s := r.reconcile(1, "looper", prev, "obj", "", rv)
		prev = rv
		switch {
		case i < DefaultHotLoopChain:
			if len(s.HotLoops) != 0 {
				t.Errorf("reconcile %d: %+v before %d self-triggered reconciles", i+1, s.HotLoops, DefaultHotLoopChain)
			}
		default:
			if len(s.HotLoops) != 1 {
				t.Fatalf("reconcile %d: %d hot loops, want 1", i+1, len(s.HotLoops))
			}
			h := s.HotLoops[0]
			if h.Kind != HotLoopSelfTriggered || h.Start != (i == DefaultHotLoopChain) || h.Count != i ||
				h.Namespace != "ns" || h.Name != "obj" || h.At != s.Start {
				t.Errorf("reconcile %d: %+v", i+1, h)
			}
		}
	}
}

// TestNoHotLoop: what is no hot loop: a controller triggered once or twice by its own write
// (a create, then its status); a chain broken by a write of someone else; the same controller
// name in two processes taking turns; a run of no-op writes shorter than the chain, or broken
// by a write that changed the object; detection turned off.
func TestNoHotLoop(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		run  func(r *loopRig)
	}{
		{"settles after its own write", Options{}, func(r *loopRig) {
			for i := range 10 {
				created, status := strconv.Itoa(200+2*i), strconv.Itoa(201+2*i)
				r.reconcile(1, "calm", "", "obj", "", created) // someone else's change (no event seen)
				r.reconcile(1, "calm", created, "obj", "", status)
				r.reconcile(1, "calm", status, "obj", "", "")
			}
		}},
		{"a chain broken by another writer's event", Options{}, func(r *loopRig) {
			prev := "untraced"
			for i := range 12 {
				rv := strconv.Itoa(100 + i)
				if i%4 == 3 {
					prev = "untraced" // not a version any traced write made
				}
				r.reconcile(1, "looper", prev, "obj", "", rv)
				prev = rv
			}
		}},
		{"two processes of one controller", Options{}, func(r *loopRig) {
			prev := ""
			for i := range 10 {
				rv := strconv.Itoa(100 + i)
				r.reconcile(uint32(1+i%2), "looper", prev, "obj", "", rv)
				prev = rv
			}
		}},
		{"no-op writes broken by writes that change the object", Options{}, func(r *loopRig) {
			for i := range 12 {
				rv := "500"
				if i%4 == 0 {
					rv = strconv.Itoa(600 + i)
				}
				r.reconcile(1, "claimer", "", "target", "", rv)
			}
		}},
		{"off", Options{HotLoopChain: -1}, func(r *loopRig) {
			prev := ""
			for i := range 10 {
				rv := strconv.Itoa(100 + i)
				r.reconcile(1, "looper", prev, "obj", "", rv)
				prev = rv
				r.reconcile(1, "claimer", "", "target", "", "700")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newLoopRig(tc.opts)
			tc.run(r)
			for i, s := range r.got {
				if len(s.HotLoops) != 0 {
					t.Errorf("reconcile %d of %s: %+v", i+1, s.Controller, s.HotLoops)
				}
			}
		})
	}
}

// TestHotLoopNoopWrite: a controller patching an object again and again without changing it
// (the API server returns a version already made: the one a traced write made before, or the
// one the reconcile read): the DefaultHotLoopChain-th no-op write starts the episode on the write's reconcile.
func TestHotLoopNoopWrite(t *testing.T) {
	r := newLoopRig(Options{})
	r.reconcile(1, "claimer", "", "target", "", "900") // the one write that changes it
	for i := range DefaultHotLoopChain + 3 {
		read := ""
		if i == 2 {
			read = "900" // a no-op known from the version read
		}
		s := r.reconcile(1, "claimer", "", "target", read, "900")
		if i+1 < DefaultHotLoopChain {
			if len(s.HotLoops) != 0 {
				t.Errorf("no-op write %d: %+v", i+1, s.HotLoops)
			}
			continue
		}
		if len(s.HotLoops) != 1 {
			t.Fatalf("no-op write %d: %d hot loops, want 1", i+1, len(s.HotLoops))
		}
		h := s.HotLoops[0]
		if h.Kind != HotLoopNoopWrite || h.Start != (i+1 == DefaultHotLoopChain) || h.Count != i+1 || h.UID != loopUID ||
			h.Name != "target" || h.Resource != "configmaps" || h.Subresource != "" {
			t.Errorf("no-op write %d: %+v", i+1, h)
		}
	}
	// A no-op write makes no version: its span has no write of a new version to link.
	if w, ok := r.a.versions.made[version{loopUID, "900"}]; !ok || w.controller != "claimer" {
		t.Errorf("version 900 remembered as %+v, %v", w, ok)
	}
}
