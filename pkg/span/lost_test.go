package span

import "testing"

// TestLostEventsNeverJoinReconciles: when the ring buffer is full the kernel drops events; a
// reconcile whose return was lost followed, on the same goroutine, by one whose entry was lost
// must not become one span with the first's object and the second's result. The kernel flags
// the second return (it saw no entry on the goroutine): the first span is abandoned, the
// return counted as an orphan.
func TestLostEventsNeverJoinReconciles(t *testing.T) {
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	a.Add(start(1, 10, 100, "a"))
	// a's return and b's entry lost
	a.Add(Event{Kind: SpanEnd, PID: 1, Goid: 10, Time: 400, Result: ResultRequeue, NoEntry: true})
	a.Add(start(1, 10, 500, "c"))
	a.Add(end(1, 10, 600, ResultError))
	if len(got) != 2 {
		t.Fatalf("got %d spans, want 2: %+v", len(got), got)
	}
	if s := got[0]; s.Name != "a" || s.Result != ResultAbandoned || !s.Incomplete {
		t.Errorf("first span %+v: want a, abandoned, incomplete", s)
	}
	if s := got[1]; s.Name != "c" || s.Result != ResultError || s.Incomplete || s.Duration != 100 {
		t.Errorf("second span %+v: want c, error, complete, 100ns", s)
	}
	if st := a.Stats(); st.Abandoned != 1 || st.OrphanReturns != 1 || st.Spans != 2 || a.Open() != 0 {
		t.Errorf("stats %+v, open %d", st, a.Open())
	}
}
