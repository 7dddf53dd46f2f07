package span

import "time"

// Hand-offs: a worker that takes an item with Get and hands it to another goroutine, which
// processes it and calls Done. The kernel sees the worker's next Get while the previous item's
// span is still open on its goroutine, and opens the new item's span as the goroutine's own
// (COUNTER_HANDED); here the previous span waits, by its item, for a Done on any goroutine of
// the process. Items are known by identity only where probes.Probe.ItemKnown (string keys,
// pointers): a span of another shape whose worker moved on is abandoned, counted in
// Stats.HandoffsLost. Calls made on the goroutine the item went to are not the span's (unless
// that goroutine was started inside the item's bracket: goroutine inheritance).

type itemKey struct {
	pid  uint32
	item uint64
}

// handoffs indexes the open work-queue item spans whose item is known: those still on their
// worker's goroutine (in Assembler.open) and those handed off (not).
type handoffs struct {
	byItem map[itemKey]*openSpan
}

func newHandoffs() handoffs { return handoffs{byItem: make(map[itemKey]*openSpan)} }

// opened indexes o, a work-queue item's span just opened.
func (h *handoffs) opened(o *openSpan, e *Event) {
	if o.queue && e.Item != 0 {
		o.item = e.Item
		h.byItem[itemKey{e.PID, e.Item}] = o
	}
}

// closed forgets o (finished or abandoned).
func (h *handoffs) closed(o *openSpan) {
	if o.item != 0 && h.byItem[itemKey{o.span.PID, o.item}] == o {
		delete(h.byItem, itemKey{o.span.PID, o.item})
	}
}

// find returns the open span of the item e names (a Done, a requeue), on any goroutine.
func (h *handoffs) find(e *Event) *openSpan {
	if e.Item == 0 {
		return nil
	}
	return h.byItem[itemKey{e.PID, e.Item}]
}

// handOff is start's answer to a work-queue Get on goroutine k while o, the previous item's
// span there, has no Done: the worker handed that item to another goroutine. o waits for its
// Done by its item; or, its item's identity unknown, it is dropped (counted in HandoffsLost:
// its Done, on another goroutine, cannot be told from another item's).
func (a *Assembler) handOff(k goroutineKey, o *openSpan) {
	if o.item == 0 || a.handoffs.byItem[itemKey{o.span.PID, o.item}] != o || len(a.handoffs.byItem) > a.opts.MaxOpen {
		a.stats.HandoffsLost++
		a.remove(k, o)
		return
	}
	delete(a.open, k) // still in byStart (its calls' span) and byItem
	o.handed = true
}

// endHandedOff ends the span of the item a Done (e) names when that span is not the one open
// on e's goroutine (k): handed off, or still open on the worker's goroutine while another
// goroutine calls Done. It reports whether it did.
func (a *Assembler) endHandedOff(k goroutineKey, e Event) bool {
	o := a.handoffs.find(&e)
	if o == nil || a.open[k] == o {
		return false
	}
	a.stats.Handoffs++
	o.span.ProbeHits.add(&e)
	a.remove(o.key, o)
	if o.handler && o.depth > 1 {
		e.Incomplete = true // its handler's return was not seen
	}
	a.finish(o, a.queueEnd(o, e))
	return true
}

// expireHandedOff abandons the handed-off spans open longer than AbandonAfter at now (all of
// process pid's when pid is not 0; all of them when now is 0).
func (a *Assembler) expireHandedOff(now uint64, pid uint32) {
	for _, o := range a.handoffs.byItem {
		if !o.handed || (pid != 0 && o.span.PID != pid) {
			continue
		}
		if now != 0 && (now <= o.span.Start || time.Duration(now-o.span.Start) <= a.opts.AbandonAfter) {
			continue
		}
		a.stats.HandoffsLost++
		a.abandon(o.key, o)
	}
}
