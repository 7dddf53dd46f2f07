package span

import (
	"slices"
	"time"
)

// Default fight detection: at least 4 alternations of writers within 60 seconds.
const (
	DefaultFightAlternations = 4
	DefaultFightWindow       = time.Minute
)

// Fight is a controller fight a reconcile's write took part in: two or more writers
// alternately changing the same object (the same subresource of it) on this node.
type Fight struct {
	Namespace, Name, UID  string
	Resource, Subresource string
	// Writers are the controllers that alternated in the episode so far, sorted; one name may
	// stand for several processes (Processes tells them apart).
	Writers []string
	// Processes are the writers' process IDs, one per writer (a controller in a process), in
	// the order they first alternated: not aligned with Writers.
	Processes []uint32
	// Alternations counts the writer changes within the window at this write.
	Alternations int
	// Start marks the write that made the alternations reach the threshold: the episode's
	// first report. Later writes of the episode carry the fight with Start false.
	Start bool
	// Since is when (monotonic ns) the first alternation in the window happened; At is when
	// this reconcile's write of the object returned.
	Since, At uint64
}

// Opponents returns the writers of f other than controller (each once). When every writer
// has the name controller (two processes of one controller), it is controller itself.
func (f *Fight) Opponents(controller string) []string {
	var out []string
	for _, w := range f.Writers {
		if w != controller {
			out = append(out, w)
		}
	}
	if len(out) == 0 && len(f.Writers) > 0 {
		out = append(out, controller)
	}
	return out
}

type fightKey struct {
	uid, subresource string
}

type writer struct {
	pid        uint32
	controller string
}

// fightState follows the writes of one object's subresource: its episode counts the
// alternations within the window.
type fightState struct {
	episode
	last    writer
	lastAt  uint64
	writers []writer // the writers of the current episode (or of the alternations in the window)
}

// fightWrite records that w wrote a new version of an object's subresource at t, and returns
// the fight the write takes part in, if any.
func (a *Assembler) fightWrite(c *Call, w writer, t uint64) *Fight {
	if a.opts.FightAlternations < 0 {
		return nil
	}
	st := a.fights.get(fightKey{uid: c.UID, subresource: c.Subresource}, a.opts.MaxVersions)
	// Forget alternations older than the window; an episode with none left has ended.
	st.slide(t, uint64(a.opts.FightWindow))
	if len(st.times) == 0 {
		st.writers = st.writers[:0]
	}
	if st.last != (writer{}) && st.last != w {
		st.times = append(st.times, t)
		for _, x := range []writer{st.last, w} {
			if !slices.Contains(st.writers, x) {
				st.writers = append(st.writers, x)
			}
		}
	}
	st.last, st.lastAt = w, t
	start := st.reach(a.opts.FightAlternations)
	if !st.active || !slices.Contains(st.writers, w) {
		return nil
	}
	f := &Fight{Namespace: c.Namespace, Name: c.Name, UID: c.UID, Resource: c.Resource, Subresource: c.Subresource,
		Alternations: len(st.times), Start: start, Since: st.times[0], At: t}
	for _, x := range st.writers {
		if !slices.Contains(f.Writers, x.controller) {
			f.Writers = append(f.Writers, x.controller)
		}
		f.Processes = append(f.Processes, x.pid)
	}
	slices.Sort(f.Writers)
	return f
}

// expireFights forgets objects not written for longer than the window.
func (a *Assembler) expireFights(now uint64) {
	window := uint64(a.opts.FightWindow)
	a.fights.expire(func(st *fightState) bool { return st.lastAt+window < now })
}

// maxFights bounds the fights one span reports.
const maxFights = 8

// addFight adds f to the span's fights, or replaces the one of the same object's subresource
// (the latest write's view, keeping the episode's Start mark).
func (o *openSpan) addFight(f Fight) {
	for i := range o.span.Fights {
		if g := &o.span.Fights[i]; g.UID == f.UID && g.Subresource == f.Subresource {
			f.Start = f.Start || g.Start
			*g = f
			return
		}
	}
	if len(o.span.Fights) < maxFights {
		o.span.Fights = append(o.span.Fights, f)
	}
}
