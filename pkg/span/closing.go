package span

// The assembler's spans that end without their return: abandoned (a lost return, a process
// gone, the agent stopping, too many open), and the returns that never met their entry.

import (
	"sort"
	"time"
)

func (a *Assembler) remove(k goroutineKey, o *openSpan) {
	if a.open[k] == o { // a handed-off span's goroutine has another span open now
		delete(a.open, k)
	}
	if a.byStart[spanKey{pid: o.span.PID, start: o.at}] == o {
		delete(a.byStart, spanKey{pid: o.span.PID, start: o.at})
	}
	a.handoffs.closed(o)
}

func (a *Assembler) abandon(k goroutineKey, o *openSpan) {
	a.remove(k, o)
	s := o.span
	s.Result = ResultAbandoned
	s.Incomplete = true
	finalize(&s)
	a.versions.readVersionWriter(&s)
	o.triggers.served(&s, a.versions.writer)
	a.stats.Abandoned++
	a.stats.Spans++
	a.emit(s)
}

func (a *Assembler) evictOldest() {
	var oldestK goroutineKey
	var oldest *openSpan
	for k, o := range a.open {
		if oldest == nil || o.span.Start < oldest.span.Start {
			oldestK, oldest = k, o
		}
	}
	if oldest != nil {
		a.stats.Evicted++
		a.abandon(oldestK, oldest)
	}
}

// Expire closes, as abandoned, every span open for longer than AbandonAfter at monotonic
// time now, and gives up on returns that waited longer than ReorderWindow for their entry.
func (a *Assembler) Expire(now uint64) {
	for _, k := range a.sortedKeys(func(o *openSpan) bool {
		return now > o.span.Start && time.Duration(now-o.span.Start) > a.opts.AbandonAfter
	}) {
		a.abandon(k, a.open[k])
	}
	a.expireHandedOff(now, 0)
	a.releaseHeld(now, false)
	a.queues.expire(now, a.opts.AbandonAfter)
	a.expireFights(now)
	a.expireLoops(now)
	a.triggers.expire(now)
	for k, p := range a.pending {
		if now > p.Time && time.Duration(now-p.Time) > a.opts.ReorderWindow {
			delete(a.pending, k)
			a.stats.OrphanReturns++
		}
	}
}

// ProcessExited closes every span still open in process pid as abandoned: its returns will
// never come.
func (a *Assembler) ProcessExited(pid uint32) {
	for _, k := range a.sortedKeys(func(o *openSpan) bool { return o.span.PID == pid }) {
		a.abandon(k, a.open[k])
	}
	a.expireHandedOff(0, pid)
	for k := range a.pending {
		if k.pid == pid {
			delete(a.pending, k)
			a.stats.OrphanReturns++
		}
	}
	a.queues.processExited(pid)
	a.names.processExited(pid)
	a.triggers.processExited(pid)
}

// Flush closes every open span as abandoned (the agent is stopping).
func (a *Assembler) Flush() {
	for _, k := range a.sortedKeys(func(*openSpan) bool { return true }) {
		a.abandon(k, a.open[k])
	}
	a.expireHandedOff(0, 0)
	a.releaseHeld(0, true)
	a.stats.OrphanReturns += uint64(len(a.pending))
	clear(a.pending)
}

// sortedKeys returns the keys of open spans that match, oldest first, so output is stable.
func (a *Assembler) sortedKeys(match func(*openSpan) bool) []goroutineKey {
	var ks []goroutineKey
	for k, o := range a.open {
		if match(o) {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return a.open[ks[i]].span.Start < a.open[ks[j]].span.Start })
	return ks
}

// OpenSince reports whether a span of process pid is open that began (kernel time) before t:
// a reconcile in flight since then.
func (a *Assembler) OpenSince(pid uint32, t uint64) bool {
	for _, o := range a.open {
		if o.span.PID == pid && o.at < t {
			return true
		}
	}
	return false
}
