package span

// episode counts what happened within a sliding window (times, oldest first): reaching a
// threshold starts an episode (a controller fight, a hot loop), which ends when nothing is
// left in the window.
type episode struct {
	times  []uint64
	active bool // an episode was reported and has not ended
}

// slide forgets what happened more than window before t; an episode with nothing left has
// ended.
func (e *episode) slide(t, window uint64) {
	i := 0
	for i < len(e.times) && e.times[i]+window < t {
		i++
	}
	e.times = e.times[i:]
	if len(e.times) == 0 {
		e.active = false
	}
}

// reach reports whether what happened in the window reaches threshold now for the first time:
// the episode's start. Later calls of the same episode return false.
func (e *episode) reach(threshold int) bool {
	if !e.active && len(e.times) >= threshold {
		e.active = true
		return true
	}
	return false
}

// reset ends the episode: what happened so far no longer counts.
func (e *episode) reset() {
	e.times = e.times[:0]
	e.active = false
}

// boundedStates holds a state per key, at most max keys: the key made longest ago is
// forgotten first.
type boundedStates[K comparable, S any] struct {
	m     map[K]*S
	order []K
}

// get returns k's state, made when there is none.
func (b *boundedStates[K, S]) get(k K, max int) *S {
	if st := b.m[k]; st != nil {
		return st
	}
	if b.m == nil {
		b.m = map[K]*S{}
	}
	if len(b.order) >= max {
		delete(b.m, b.order[0])
		b.order = b.order[1:]
	}
	st := new(S)
	b.m[k] = st
	b.order = append(b.order, k)
	return st
}

// expire forgets the states that are done.
func (b *boundedStates[K, S]) expire(done func(*S) bool) {
	kept := b.order[:0]
	for _, k := range b.order {
		if st := b.m[k]; st != nil && done(st) {
			delete(b.m, k)
			continue
		}
		kept = append(kept, k)
	}
	b.order = kept
}
