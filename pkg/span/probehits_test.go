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

// TestObjectRead: a deferred read (DetailReconcile) gives the span the UID and resourceVersion
// of the first read of the reconciled object, not of other objects or later reads; it is no call
// of the span, and its hit is the span's.
func TestObjectRead(t *testing.T) {
	const uid, other = "0c1680f0-7819-471a-ba2b-7406fbd29909", "9d2f4a61-1b7e-4c1a-8d55-3f0e2b6c7a10"
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	for _, e := range []Event{
		{Kind: SpanStart, PID: 1, Goid: 5, Time: 100, Controller: "c", Namespace: "ns", Name: "web"},
		{Kind: ObjectRead, PID: 1, Goid: 5, Time: 200, SpanStartTime: 100, Call: CallInfo{Namespace: "ns", Name: "db", UID: other, ResourceVersion: "7"}},
		{Kind: ObjectRead, PID: 1, Goid: 5, Time: 300, SpanStartTime: 100}, // a read that found nothing
		{Kind: ObjectRead, PID: 1, Goid: 5, Time: 400, SpanStartTime: 100, Call: CallInfo{Namespace: "ns", Name: "web", UID: uid, ResourceVersion: "41"}},
		{Kind: ObjectRead, PID: 1, Goid: 5, Time: 500, SpanStartTime: 100, Call: CallInfo{Namespace: "ns", Name: "web", UID: uid, ResourceVersion: "42"}},
		// another goroutine's read, in no span of this one
		{Kind: ObjectRead, PID: 1, Goid: 6, Time: 550, SpanStartTime: 90, Call: CallInfo{Namespace: "ns", Name: "web", UID: other, ResourceVersion: "1"}},
		{Kind: SpanEnd, PID: 1, Goid: 5, Time: 600, SpanStartTime: 100, Result: ResultSuccess},
	} {
		a.Add(e)
	}
	if len(got) != 1 {
		t.Fatalf("%d spans, want 1", len(got))
	}
	s := got[0]
	if s.UID != uid || s.ResourceVersion != "41" || len(s.Calls) != 0 || s.ProbeHits != (ProbeHits{Emulated: 6}) {
		t.Errorf("span: UID %q resourceVersion %q, %d calls, hits %+v; want %q 41, no call, 6 emulated hits", s.UID, s.ResourceVersion, len(s.Calls), s.ProbeHits, uid)
	}
	if s.ReadVersionWriter != TriggerUnknown {
		t.Errorf("read version's writer %q, want %q (no write of that version seen)", s.ReadVersionWriter, TriggerUnknown)
	}
}
