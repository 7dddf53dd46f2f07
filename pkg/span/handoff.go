package span

import (
	"maps"
	"time"
)

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
// worker's goroutine (in Assembler.open) and those handed off (not). Queues share item
// identities (the same key string, from one informer's object, in several queues of a
// process), so an identity names a list of spans; a Done tells them apart by its queue once a
// Done of that queue was seen on its Get's goroutine (queues: the queue of each processing set,
// the Get's key).
type handoffs struct {
	byItem map[itemKey][]*openSpan
	queues map[queueKey]uint64
	n      int
}

func newHandoffs() handoffs {
	return handoffs{byItem: make(map[itemKey][]*openSpan), queues: make(map[queueKey]uint64)}
}

// opened indexes o, a work-queue item's span just opened.
func (h *handoffs) opened(o *openSpan, e *Event) {
	if o.queue && e.Item != 0 {
		o.item = e.Item
		k := itemKey{e.PID, e.Item}
		h.byItem[k] = append(h.byItem[k], o)
		h.n++
	}
}

// closed forgets o (finished or abandoned).
func (h *handoffs) closed(o *openSpan) {
	if o.item == 0 {
		return
	}
	k := itemKey{o.span.PID, o.item}
	l := h.byItem[k]
	for i, x := range l {
		if x == o {
			h.n--
			if len(l) == 1 {
				delete(h.byItem, k)
			} else {
				h.byItem[k] = append(l[:i:i], l[i+1:]...)
			}
			return
		}
	}
}

// learn records that the processing set set (a Get's Key) is queue's (a Done's QueueID).
func (h *handoffs) learn(pid uint32, set, queue uint64) {
	if set != 0 && queue != 0 && len(h.queues) < 65536 {
		h.queues[queueKey{pid, set}] = queue
	}
}

// find returns the one open span other than cur of the item e names (a Done, a requeue), on
// any goroutine, whose queue is e's (where both are known); nil when there is none, or more
// than one that e cannot tell apart.
func (h *handoffs) find(e *Event, cur *openSpan) *openSpan {
	if e.Item == 0 {
		return nil
	}
	var found *openSpan
	for _, o := range h.byItem[itemKey{e.PID, e.Item}] {
		if o == cur {
			continue
		}
		if q, ok := h.queues[queueKey{e.PID, o.span.Key}]; ok && e.QueueID != 0 && q != e.QueueID {
			continue
		}
		if found != nil {
			return nil
		}
		found = o
	}
	return found
}

// handOff is start's answer to a work-queue Get on goroutine k while o, the previous item's
// span there, has no Done: the worker handed that item to another goroutine. o waits for its
// Done by its item; or, its item's identity unknown, it is dropped (counted in HandoffsLost:
// its Done, on another goroutine, cannot be told from another item's).
func (a *Assembler) handOff(k goroutineKey, o *openSpan) {
	if o.item == 0 || a.handoffs.n > a.opts.MaxOpen {
		a.stats.HandoffsLost++
		a.remove(k, o)
		return
	}
	delete(a.open, k) // still in byStart (its calls' span) and byItem
	o.handed = true
}

// requeued returns the span a requeue (e) on goroutine k is about: the item's span open there,
// or the one other span of its item (handed off).
func (a *Assembler) requeued(k goroutineKey, e *Event) *openSpan {
	cur := a.open[k]
	if cur != nil && cur.queue && (e.Item == 0 || cur.item == e.Item) {
		return cur
	}
	if o := a.handoffs.find(e, cur); o != nil {
		return o
	}
	return cur
}

// endHandedOff ends the span of the item a Done (e) names when that span is not the one open
// on e's goroutine (k): handed off, or still open on the worker's goroutine while another
// goroutine calls Done. It reports whether it did.
func (a *Assembler) endHandedOff(k goroutineKey, e Event) bool {
	cur := a.open[k]
	if cur != nil && cur.queue && cur.item != 0 && cur.item == e.Item {
		a.handoffs.learn(e.PID, cur.span.Key, e.QueueID)
		return false // its own item's Done
	}
	o := a.handoffs.find(&e, cur)
	if o == nil {
		if cur != nil && cur.queue && e.Item == 0 {
			a.handoffs.learn(e.PID, cur.span.Key, e.QueueID)
		}
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
	var old []*openSpan
	for _, l := range a.handoffs.byItem {
		for _, o := range l {
			if !o.handed || (pid != 0 && o.span.PID != pid) {
				continue
			}
			if now != 0 && (now <= o.span.Start || time.Duration(now-o.span.Start) <= a.opts.AbandonAfter) {
				continue
			}
			old = append(old, o)
		}
	}
	for _, o := range old {
		a.stats.HandoffsLost++
		a.abandon(o.key, o)
	}
	if pid != 0 {
		maps.DeleteFunc(a.handoffs.queues, func(k queueKey, _ uint64) bool { return k.pid == pid })
	}
}
