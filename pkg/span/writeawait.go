package span

import "time"

// writeWait bounds how long a finished span waits for a traced write in flight to say who
// made the version one of its watch events delivered (event time). An API server sends a
// watch event while it answers the write; the watcher's reconcile can end before the
// writer's client has returned, and so before reconscope has seen the version the write
// made.
const writeWait = 250 * time.Millisecond

// heldSpan is a finished span waiting for writes in flight (awaitsWrite) before its
// triggers and read version are named with their writers, or behind such a span.
type heldSpan struct {
	s        Span
	triggers triggerSet
	until    uint64 // event time after which it is emitted as it is
}

// awaitsWrite reports whether a span with triggers t should wait before its writers are
// named: one of its watch events carries a version no traced write is known to have made,
// while a traced API write is in flight (begun, its object not yet read back).
func (a *Assembler) awaitsWrite(t *triggerSet) bool {
	unknown := false
	for i := range t.list {
		tr := &t.list[i]
		if tr.Kind != TriggerEvent && tr.Kind != TriggerMapped && tr.Kind != TriggerResync {
			continue
		}
		if tr.Object.UID == "" || tr.Object.ResourceVersion == "" {
			continue
		}
		if _, ok := a.versions.made[version{tr.Object.UID, tr.Object.ResourceVersion}]; !ok {
			unknown = true
			break
		}
	}
	return unknown && a.writeInFlight()
}

// writeInFlight reports whether a traced reconcile has an API write begun whose object has
// not been read back yet (its call open, or ended without its CallObject so far).
func (a *Assembler) writeInFlight() bool {
	for _, o := range a.open {
		for _, cs := range o.calls {
			for _, c := range cs {
				if c.info.Kind == CallAPI && (c.info.Verb == "" || c.info.IsWrite()) {
					return true
				}
			}
		}
		for _, i := range o.last {
			if i < len(o.span.Calls) {
				if c := &o.span.Calls[i]; c.Kind == CallAPI && c.IsWrite() && c.UID == "" && c.Status < 300 {
					return true
				}
			}
		}
	}
	return false
}

// nameAndEmit names the writers of s's triggers and read version, then emits it.
func (a *Assembler) nameAndEmit(s Span, t *triggerSet) {
	a.versions.readVersionWriter(&s)
	last, hasLast := t.served(&s, a.versions.writer)
	a.selfTriggered(&s, last, hasLast)
	a.emit(s)
}

// releaseHeld emits, in the order they finished, the held spans that no longer wait: no write
// is in flight any more, their versions are all known, or now (event time) is past their wait;
// all of them when all is set. It stops at the first that still waits: the spans behind it
// (held for their order only, or waiting too) leave after it.
func (a *Assembler) releaseHeld(now uint64, all bool) {
	if len(a.held) == 0 {
		return
	}
	inFlight := !all && a.writeInFlight()
	n := 0
	for ; n < len(a.held); n++ {
		h := &a.held[n]
		if !all && inFlight && now <= h.until && a.awaitsWrite(&h.triggers) {
			break
		}
		a.nameAndEmit(h.s, &h.triggers)
	}
	rest := copy(a.held, a.held[n:])
	clear(a.held[rest:])
	a.held = a.held[:rest]
}
