package span

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// fightRig drives an assembler with reconciles that each make one write.
type fightRig struct {
	a   *Assembler
	got []Span
	rv  int
	t   uint64
}

func newFightRig(opts Options) *fightRig {
	r := &fightRig{t: 1}
	r.a = NewAssembler(opts, func(s Span) { r.got = append(r.got, s) })
	return r
}

const fightUID = "33333333-3333-3333-3333-333333333333"

// write runs one reconcile of controller ctl (process pid) at t that writes the object's
// subresource sub (verb POST for a create).
func (r *fightRig) write(pid uint32, ctl, verb, sub string, at time.Duration) *Span {
	r.rv++
	t := uint64(at) + 1
	ev := func(kind EventKind, dt uint64, c CallInfo) Event {
		return Event{Kind: kind, PID: pid, Goid: 1, Time: t + dt, Call: c}
	}
	s := start(pid, 1, t, "x")
	s.Controller = ctl
	for _, e := range []Event{
		s,
		ev(CallStart, 1, CallInfo{Kind: CallAPI, Verb: verb, Resource: "configmaps", Subresource: sub, Namespace: "ns", Name: "x"}),
		ev(CallEnd, 2, CallInfo{Status: 200}),
		ev(CallObject, 3, CallInfo{Namespace: "ns", Name: "x", UID: fightUID, ResourceVersion: strconv.Itoa(r.rv)}),
		end(pid, 1, t+4, ResultSuccess),
	} {
		r.a.Add(e)
	}
	return &r.got[len(r.got)-1]
}

// TestFightDetected: two controllers alternately writing one object: the fourth alternation
// starts the episode (reported once, Start), later writes of either writer carry it.
func TestFightDetected(t *testing.T) {
	r := newFightRig(Options{})
	var spans []*Span
	for i := range 7 {
		ctl, pid := "alpha", uint32(1)
		if i%2 == 1 {
			ctl, pid = "beta", 2
		}
		spans = append(spans, r.write(pid, ctl, "PATCH", "", time.Duration(i)*time.Second))
	}
	for i, s := range spans {
		switch {
		case i < 4:
			if len(s.Fights) != 0 {
				t.Errorf("write %d: fight %+v before 4 alternations", i+1, s.Fights)
			}
		default:
			if len(s.Fights) != 1 {
				t.Fatalf("write %d: %d fights, want 1", i+1, len(s.Fights))
			}
			f := s.Fights[0]
			if f.Start != (i == 4) || f.Alternations != i || !slices.Equal(f.Writers, []string{"alpha", "beta"}) ||
				f.UID != fightUID || f.Resource != "configmaps" || f.Subresource != "" || f.Name != "x" {
				t.Errorf("write %d: %+v", i+1, f)
			}
			if opp := f.Opponents(s.Controller); len(opp) != 1 || opp[0] == s.Controller {
				t.Errorf("write %d by %s: opponents %v", i+1, s.Controller, opp)
			}
		}
	}
}

// TestNoFight: a create followed by status updates of one controller; a spec writer and a
// status writer taking turns (different subresources); alternations spread wider than the
// window; fewer alternations than the threshold: none is a fight.
func TestNoFight(t *testing.T) {
	r := newFightRig(Options{})
	r.write(1, "alpha", "POST", "", 0)
	for i := 1; i < 10; i++ {
		r.write(1, "alpha", "PATCH", "status", time.Duration(i)*time.Second)
	}
	r2 := newFightRig(Options{})
	for i := range 10 {
		if i%2 == 0 {
			r2.write(1, "deployment", "PUT", "", time.Duration(i)*time.Second)
		} else {
			r2.write(2, "replicaset", "PUT", "status", time.Duration(i)*time.Second)
		}
	}
	r3 := newFightRig(Options{FightWindow: 10 * time.Second})
	for i := range 10 {
		ctl := []string{"alpha", "beta"}[i%2]
		r3.write(uint32(i%2+1), ctl, "PATCH", "", time.Duration(i)*4*time.Second) // 3 alternations per 10s at most
	}
	r4 := newFightRig(Options{FightAlternations: 6})
	for i := range 6 {
		ctl := []string{"alpha", "beta"}[i%2]
		r4.write(uint32(i%2+1), ctl, "PATCH", "", time.Duration(i)*time.Second) // 5 alternations
	}
	for n, rig := range []*fightRig{r, r2, r3, r4} {
		for _, s := range rig.got {
			if len(s.Fights) != 0 {
				t.Errorf("case %d: %s reported a fight: %+v", n+1, s.Controller, s.Fights)
			}
		}
	}
}

// TestFightEpisodes: an episode ends when no alternation happened for a window; the next one
// is reported again.
func TestFightEpisodes(t *testing.T) {
	r := newFightRig(Options{FightWindow: 10 * time.Second})
	starts := 0
	at := time.Duration(0)
	for round := range 2 {
		for i := range 6 {
			ctl := []string{"alpha", "beta"}[i%2]
			s := r.write(uint32(i%2+1), ctl, "PATCH", "", at)
			at += time.Second
			for _, f := range s.Fights {
				if f.Start {
					starts++
				}
			}
		}
		if starts != round+1 {
			t.Fatalf("after round %d: %d episodes", round+1, starts)
		}
		at += 30 * time.Second
	}
}
