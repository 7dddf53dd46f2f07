package span

import "testing"

// TestProbeHits: a span counts the hit of every record that joined it, by kind: its entry and
// return, a handler's nested entry and return, its calls (on its goroutine or one that
// inherited it), its queue's marks; not the hits of other goroutines' spans or of records
// outside any span.
func TestProbeHits(t *testing.T) {
	stepped := func(e Event) Event { e.SingleStepped = true; return e }
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	evs := queueItem(7, 100, 900, 0xa0, "web-1",
		Event{Kind: SpanStart, Time: 200, Nested: true, SpanStartTime: 100, Controller: "rs-handler", Namespace: "ns", Name: "web-1"},
		Event{Kind: CallStart, Time: 300, SpanStartTime: 100, Call: CallInfo{Kind: CallAPI, Verb: "POST"}},
		stepped(Event{Kind: CallEnd, Time: 400, SpanStartTime: 100}),
		stepped(Event{Kind: SpanEnd, Time: 500, SpanStartTime: 100, Result: ResultSuccess}),
		Event{Kind: QueueRequeue, Time: 600, RateLimited: true})
	// A call on another goroutine that inherited the span (the kernel gives the span's start),
	// and one outside any span.
	inherited := []Event{
		{Kind: CallStart, PID: 1, Goid: 9, Time: 310, SpanStartTime: 100, Call: CallInfo{Kind: CallCacheGet}},
		{Kind: CallEnd, PID: 1, Goid: 9, Time: 320, SpanStartTime: 100},
		{Kind: CallStart, PID: 1, Goid: 11, Time: 330, Call: CallInfo{Kind: CallCacheGet}},
	}
	evs = append(evs[:3], append(inherited, evs[3:]...)...)
	// Web-1: Get, the handler's entry, its call's entry, the inherited call's two, the retry
	// mark and Done are emulated; the call's and the handler's returns single-stepped.
	// A second item on another goroutine: its own two hits only.
	evs = append(evs, queueItem(8, 950, 990, 0xa0, "web-2")...)
	for _, e := range evs {
		a.Add(e)
	}
	if len(got) != 2 {
		t.Fatalf("%d spans, want 2", len(got))
	}
	for i, want := range []ProbeHits{{Emulated: 7, SingleStepped: 2}, {Emulated: 2}} {
		if got[i].ProbeHits != want {
			t.Errorf("span %s: probe hits %+v, want %+v", got[i].Name, got[i].ProbeHits, want)
		}
	}
	// A return whose entry was lost still counts its own hit.
	got = nil
	a.Add(Event{Kind: SpanEnd, PID: 2, Goid: 3, Time: 50, SpanStartTime: 10, Result: ResultSuccess})
	if len(got) != 1 || got[0].ProbeHits != (ProbeHits{Emulated: 1}) {
		t.Errorf("a return without its entry: %+v", got)
	}
}
