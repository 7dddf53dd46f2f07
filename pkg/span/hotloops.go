package span

import "time"

// Default hot-loop detection: 10 links within 60 seconds. A controller that creates an object,
// or scales one up (each created Pod's event triggers its next reconcile), is triggered by its
// own writes a few times in a row and stops; a hot loop goes on.
const (
	DefaultHotLoopChain  = 10
	DefaultHotLoopWindow = time.Minute
)

// HotLoopKind says what makes a hot loop.
type HotLoopKind string

// Hot-loop kinds (the JSON contract's hot_loops[].kind, the kind label of
// reconscope_hot_loops_total).
const (
	// HotLoopSelfTriggered: reconciles of one object, each triggered by a watch event of a
	// version the same controller (in the same process) wrote, in a row.
	HotLoopSelfTriggered HotLoopKind = "self_triggered"
	// HotLoopNoopWrite: writes of one object (one subresource) by one controller that changed
	// nothing: the API server returned a version already made (the one the reconcile read,
	// or one a traced write made before).
	HotLoopNoopWrite HotLoopKind = "noop_write"
)

// HotLoop is a hot loop a reconcile took part in: a controller reconciling one object again
// and again because of its own writes, or writing it again and again without changing it.
type HotLoop struct {
	Kind HotLoopKind
	// Namespace, Name and UID name the object: the reconciled one (self_triggered; UID as
	// read, "" when no read was seen) or the one written (noop_write).
	Namespace, Name, UID string
	// Resource and Subresource are the no-op write's (noop_write); "" for self_triggered.
	Resource, Subresource string
	// Count is the links of the loop within the window at this reconcile: self-triggered
	// reconciles in a row, or no-op writes since the last write that changed the object.
	Count int
	// Start marks the reconcile that made Count reach the threshold: the episode's first
	// report. Later reconciles of the episode carry the loop with Start false.
	Start bool
	// Since is when (monotonic ns) the first link in the window happened; At is this link's:
	// the reconcile's start (self_triggered) or the write's return (noop_write).
	Since, At uint64
}

type loopKey struct {
	pid        uint32
	controller string
	kind       HotLoopKind
	// the reconciled object (self_triggered), or the written one (noop_write)
	namespace, name, uid, subresource string
}

// loopState follows one loop: its episode counts the links in the window.
type loopState struct {
	episode
	lastAt uint64
}

// hotLoop records at t a link of loop k (link true: a self-triggered reconcile, a no-op
// write) or what breaks it (a reconcile something else triggered, a write that changed the
// object), and returns the hot loop the link takes part in, if any.
func (a *Assembler) hotLoop(k loopKey, link bool, t uint64) *HotLoop {
	if a.opts.HotLoopChain < 0 {
		return nil
	}
	if !link {
		if st := a.loops.m[k]; st != nil {
			st.reset()
		}
		return nil
	}
	st := a.loops.get(k, a.opts.MaxVersions)
	st.slide(t, uint64(a.opts.HotLoopWindow))
	st.times = append(st.times, t)
	st.lastAt = t
	start := st.reach(a.opts.HotLoopChain)
	if !st.active {
		return nil
	}
	return &HotLoop{Kind: k.kind, Namespace: k.namespace, Name: k.name, UID: k.uid, Subresource: k.subresource,
		Count: len(st.times), Start: start, Since: st.times[0], At: t}
}

// selfTriggered follows the reconciles of s's object by its controller: s is a link of a
// self-triggered loop when the most recent watch event among its triggers (last, named with
// its writer) is of a version its own process's controller wrote.
func (a *Assembler) selfTriggered(s *Span, last Trigger, hasLast bool) {
	if s.Name == "" {
		return
	}
	self := hasLast && (last.Kind == TriggerEvent || last.Kind == TriggerMapped) &&
		last.writerPID == s.PID && last.Writer == s.Controller
	k := loopKey{pid: s.PID, controller: s.Controller, kind: HotLoopSelfTriggered, namespace: s.Namespace, name: s.Name}
	if h := a.hotLoop(k, self, s.Start); h != nil {
		h.UID = s.UID
		s.HotLoops = append(s.HotLoops, *h)
	}
}

// noopWrite follows the writes of c's object by o's controller: a write that returned a
// version already made (noop) is a link of a no-op loop, one that made a version breaks it.
func (a *Assembler) noopWrite(o *openSpan, c *Call, noop bool, t uint64) {
	k := loopKey{pid: o.span.PID, controller: o.span.Controller, kind: HotLoopNoopWrite,
		namespace: c.Namespace, name: c.Name, uid: c.UID, subresource: c.Subresource}
	h := a.hotLoop(k, noop, t)
	if h == nil {
		return
	}
	h.Resource = c.Resource
	for i := range o.span.HotLoops {
		if g := &o.span.HotLoops[i]; g.Kind == h.Kind && g.UID == h.UID && g.Subresource == h.Subresource {
			h.Start = h.Start || g.Start
			*g = *h
			return
		}
	}
	if len(o.span.HotLoops) < maxFights {
		o.span.HotLoops = append(o.span.HotLoops, *h)
	}
}

// expireLoops forgets loops without a link for longer than the window.
func (a *Assembler) expireLoops(now uint64) {
	window := uint64(a.opts.HotLoopWindow)
	a.loops.expire(func(st *loopState) bool { return st.lastAt+window < now })
}
