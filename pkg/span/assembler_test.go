package span

import (
	"testing"
	"time"
)

func start(pid uint32, goid int64, t uint64, name string) Event {
	return Event{Kind: SpanStart, PID: pid, Goid: goid, Time: t, Controller: "c", Namespace: "ns", Name: name}
}

func end(pid uint32, goid int64, t uint64, r Result) Event {
	return Event{Kind: SpanEnd, PID: pid, Goid: goid, Time: t, SpanStartTime: 0, Result: r}
}

func TestAssembler(t *testing.T) {
	type want struct {
		name       string
		result     Result
		dur        time.Duration
		incomplete bool
		calls      int
	}
	tests := []struct {
		name   string
		events []Event
		final  func(a *Assembler)
		want   []want
		stats  Stats
	}{
		{
			name:   "entry then return",
			events: []Event{start(1, 10, 100, "a"), end(1, 10, 350, ResultSuccess)},
			want:   []want{{"a", ResultSuccess, 250, false, 0}},
			stats:  Stats{Spans: 1},
		},
		{
			name: "interleaved goroutines pair by goroutine, not order",
			events: []Event{
				start(1, 10, 100, "a"), start(1, 11, 110, "b"),
				end(1, 10, 200, ResultError), end(1, 11, 400, ResultRequeue),
			},
			want:  []want{{"a", ResultError, 100, false, 0}, {"b", ResultRequeue, 290, false, 0}},
			stats: Stats{Spans: 2},
		},
		{
			name: "same goid in two processes are different goroutines",
			events: []Event{
				start(1, 10, 100, "a"), start(2, 10, 120, "b"),
				end(2, 10, 150, ResultSuccess), end(1, 10, 300, ResultSuccess),
			},
			want:  []want{{"b", ResultSuccess, 30, false, 0}, {"a", ResultSuccess, 200, false, 0}},
			stats: Stats{Spans: 2},
		},
		{
			name: "goroutine reused: a second entry without return abandons the first",
			events: []Event{
				start(1, 10, 100, "a"), start(1, 10, 500, "b"), end(1, 10, 600, ResultSuccess),
			},
			want:  []want{{"a", ResultAbandoned, 0, true, 0}, {"b", ResultSuccess, 100, false, 0}},
			stats: Stats{Spans: 2, Abandoned: 1},
		},
		{
			name: "nested entry (recursion) waits for the outer return",
			events: []Event{
				start(1, 10, 100, "a"),
				{Kind: SpanStart, PID: 1, Goid: 10, Time: 150, Nested: true},
				end(1, 10, 200, ResultSuccess), end(1, 10, 300, ResultError),
			},
			want:  []want{{"a", ResultError, 200, false, 0}},
			stats: Stats{Spans: 1},
		},
		{
			name: "return before its entry (another CPU) is paired",
			events: []Event{
				end(1, 10, 300, ResultSuccess), start(1, 10, 100, "a"),
			},
			want:  []want{{"a", ResultSuccess, 200, false, 0}},
			stats: Stats{Spans: 1, ReorderedPaired: 1},
		},
		{
			name:   "return whose entry was lost but whose start the kernel kept",
			events: []Event{{Kind: SpanEnd, PID: 1, Goid: 10, Time: 900, SpanStartTime: 400, Result: ResultSuccess}},
			want:   []want{{"", ResultSuccess, 500, true, 0}},
			stats:  Stats{Spans: 1},
		},
		{
			name: "a return whose entry was lost is not paired with an older open span",
			events: []Event{
				start(1, 10, 100, "a"), // its return is lost
				{Kind: SpanEnd, PID: 1, Goid: 10, Time: 900, SpanStartTime: 400, Result: ResultError}, // entry at 400 lost
			},
			want:  []want{{"a", ResultAbandoned, 0, true, 0}, {"", ResultError, 500, true, 0}},
			stats: Stats{Spans: 2, Abandoned: 1},
		},
		{
			name:   "orphan return expires after the reorder window",
			events: []Event{end(1, 10, 300, ResultSuccess)},
			final:  func(a *Assembler) { a.Expire(300 + uint64(2*time.Second)) },
			stats:  Stats{OrphanReturns: 1},
		},
		{
			name:   "process exit abandons its open spans only",
			events: []Event{start(1, 10, 100, "a"), start(2, 10, 100, "b")},
			final:  func(a *Assembler) { a.ProcessExited(1) },
			want:   []want{{"a", ResultAbandoned, 0, true, 0}},
			stats:  Stats{Spans: 1, Abandoned: 1},
		},
		{
			name:   "span open too long is abandoned",
			events: []Event{start(1, 10, 100, "a")},
			final:  func(a *Assembler) { a.Expire(100 + uint64(11*time.Minute)) },
			want:   []want{{"a", ResultAbandoned, 0, true, 0}},
			stats:  Stats{Spans: 1, Abandoned: 1},
		},
		{
			name: "calls nest under the span on the same goroutine",
			events: []Event{
				start(1, 10, 100, "a"),
				{Kind: CallStart, PID: 1, Goid: 10, Time: 110, Call: CallInfo{Kind: CallAPI, Verb: "GET", Resource: "configmaps"}},
				{Kind: CallEnd, PID: 1, Goid: 10, Time: 130, Call: CallInfo{Status: 200}},
				{Kind: CallStart, PID: 1, Goid: 11, Time: 140}, // other goroutine: not ours
				end(1, 10, 200, ResultSuccess),
			},
			want:  []want{{"a", ResultSuccess, 100, false, 1}},
			stats: Stats{Spans: 1, OrphanCalls: 1},
		},
		{
			name: "calls of goroutines the reconcile started join its span",
			events: []Event{
				start(1, 10, 100, "a"),
				{Kind: CallStart, PID: 1, Goid: 21, Time: 110, SpanStartTime: 100, Call: CallInfo{Kind: CallAPI, Verb: "POST"}},
				{Kind: CallStart, PID: 1, Goid: 22, Time: 111, SpanStartTime: 100, Call: CallInfo{Kind: CallAPI, Verb: "POST"}},
				{Kind: CallStatus, PID: 1, Goid: 22, Time: 120, SpanStartTime: 100, Call: CallInfo{Status: 201}},
				{Kind: CallEnd, PID: 1, Goid: 21, Time: 130, SpanStartTime: 100},
				{Kind: CallEnd, PID: 1, Goid: 22, Time: 131, SpanStartTime: 100},
				{Kind: CallStart, PID: 1, Goid: 23, Time: 140, SpanStartTime: 99}, // another span's child
				end(1, 10, 200, ResultSuccess),
			},
			want:  []want{{"a", ResultSuccess, 100, false, 2}},
			stats: Stats{Spans: 1, OrphanCalls: 1},
		},
		{
			name: "goroutines without goid are told apart by g pointer",
			events: []Event{
				{Kind: SpanStart, PID: 1, Goid: -1, G: 0xa, Time: 100, Name: "a"},
				{Kind: SpanStart, PID: 1, Goid: -1, G: 0xb, Time: 110, Name: "b"},
				{Kind: SpanEnd, PID: 1, Goid: -1, G: 0xa, Time: 200, Result: ResultSuccess},
				{Kind: SpanEnd, PID: 1, Goid: -1, G: 0xb, Time: 300, Result: ResultSuccess},
			},
			want:  []want{{"a", ResultSuccess, 100, false, 0}, {"b", ResultSuccess, 190, false, 0}},
			stats: Stats{Spans: 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []Span
			a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
			for _, e := range tc.events {
				a.Add(e)
			}
			if tc.final != nil {
				tc.final(a)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d spans, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Name != w.name || g.Result != w.result || g.Duration != w.dur || g.Incomplete != w.incomplete || len(g.Calls) != w.calls {
					t.Errorf("span %d = {name %q result %s dur %d incomplete %v calls %d}, want %+v", i, g.Name, g.Result, g.Duration, g.Incomplete, len(g.Calls), w)
				}
			}
			if a.Stats() != tc.stats {
				t.Errorf("stats = %+v, want %+v", a.Stats(), tc.stats)
			}
		})
	}
}

func TestBoundedOpenSpans(t *testing.T) {
	var got []Span
	a := NewAssembler(Options{MaxOpen: 3}, func(s Span) { got = append(got, s) })
	for i := range 5 {
		a.Add(start(1, int64(i), uint64(100+i), "x"))
	}
	if a.Open() != 3 {
		t.Fatalf("open = %d, want 3", a.Open())
	}
	if len(got) != 2 || got[0].Goid != 0 || got[1].Goid != 1 || got[0].Result != ResultAbandoned {
		t.Fatalf("evicted %+v, want goroutines 0 and 1 abandoned", got)
	}
	if a.Stats().Evicted != 2 {
		t.Fatalf("evicted = %d", a.Stats().Evicted)
	}
}

func TestPhasesAndNoop(t *testing.T) {
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	ev := []Event{
		start(1, 1, 0, "a"),
		{Kind: CallStart, PID: 1, Goid: 1, Time: 100, Call: CallInfo{Kind: CallCacheGet, Verb: "GET", Namespace: "ns", Name: "a"}},
		{Kind: CallEnd, PID: 1, Goid: 1, Time: 300, Call: CallInfo{UID: "uid-1"}},
		{Kind: CallStart, PID: 1, Goid: 1, Time: 400, Call: CallInfo{Kind: CallAPI, Verb: "PUT"}},
		{Kind: CallStart, PID: 1, Goid: 1, Time: 410, Call: CallInfo{Kind: CallAPI, Verb: "GET"}}, // nested inside the PUT
		{Kind: CallEnd, PID: 1, Goid: 1, Time: 420},
		{Kind: CallEnd, PID: 1, Goid: 1, Time: 900, Call: CallInfo{Status: 200}},
		end(1, 1, 1000, ResultSuccess),
		start(1, 1, 2000, "b"), end(1, 1, 2100, ResultSuccess),
	}
	for _, e := range ev {
		a.Add(e)
	}
	s := got[0]
	if s.Phases.Fetch != 200 || s.Phases.Apply != 500 || s.Phases.Diff != 300 {
		t.Errorf("phases = %+v, want fetch 200 apply 500 diff 300", s.Phases)
	}
	if s.Phases.Fetch+s.Phases.Apply+s.Phases.Diff != s.Duration {
		t.Errorf("phases do not add up to %v", s.Duration)
	}
	if s.UID != "uid-1" || s.Noop {
		t.Errorf("uid %q noop %v, want uid-1 and a writing reconcile", s.UID, s.Noop)
	}
	if !got[1].Noop {
		t.Errorf("reconcile without writes should be a no-op")
	}
}

func TestQueueWait(t *testing.T) {
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	add := func(tm uint64, name string, after time.Duration) {
		a.Add(Event{Kind: QueueAdd, PID: 1, Time: tm, Namespace: "ns", Name: name, RequeueAfter: after})
	}
	add(100, "a", 0)
	add(150, "a", 0) // a second add of a queued key does not move it
	add(120, "b", 500)
	a.Add(start(1, 1, 400, "a"))
	a.Add(end(1, 1, 450, ResultSuccess))
	a.Add(start(1, 1, 460, "b")) // b is not ready before 620: its add is not this reconcile's
	a.Add(end(1, 1, 470, ResultSuccess))
	a.Add(start(1, 1, 700, "b"))
	a.Add(end(1, 1, 710, ResultSuccess))
	a.Add(start(1, 1, 800, "a")) // no add since the last reconcile of a
	a.Add(end(1, 1, 810, ResultSuccess))
	want := []time.Duration{300, 0, 80, 0}
	for i, w := range want {
		if got[i].QueueWait != w {
			t.Errorf("span %d (%s at %d): queue wait %d, want %d", i, got[i].Name, got[i].Start, got[i].QueueWait, w)
		}
	}
}

// TestCallObject: the object an API call returned is given to that call (a create learns its
// name), the reconciled object's UID comes from any call naming it and its resourceVersion
// from the first read; an object event after another call began is not misattributed.
func TestCallObject(t *testing.T) {
	const uid, other = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
	call := func(kind EventKind, ti uint64, c CallInfo) Event {
		return Event{Kind: kind, PID: 1, Goid: 10, Time: ti, Call: c}
	}
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	for _, e := range []Event{
		start(1, 10, 100, "a"),
		call(CallStart, 110, CallInfo{Kind: CallCacheGet, Verb: "GET"}),
		call(CallEnd, 120, CallInfo{Namespace: "ns", Name: "a", UID: uid, ResourceVersion: "5"}),
		call(CallStart, 130, CallInfo{Kind: CallAPI, Verb: "POST", Resource: "configmaps", Namespace: "ns"}),
		call(CallEnd, 140, CallInfo{Status: 201}),
		call(CallObject, 141, CallInfo{Namespace: "ns", Name: "made", UID: other, ResourceVersion: "6"}),
		call(CallStart, 150, CallInfo{Kind: CallAPI, Verb: "PUT", Resource: "configmaps", Namespace: "ns", Name: "a"}),
		call(CallEnd, 160, CallInfo{Status: 200}),
		call(CallObject, 161, CallInfo{Namespace: "ns", Name: "a", UID: uid, ResourceVersion: "7"}),
		call(CallStart, 170, CallInfo{Kind: CallAPI, Verb: "DELETE", Resource: "configmaps", Namespace: "ns", Name: "b"}),
		call(CallEnd, 180, CallInfo{Status: 200}),
		call(CallStart, 190, CallInfo{Kind: CallAPI, Verb: "GET", Resource: "secrets", Namespace: "ns", Name: "s"}),
		// an object event of the DELETE arriving after the GET began must not land anywhere
		call(CallObject, 191, CallInfo{Namespace: "ns", Name: "b", UID: other, ResourceVersion: "8"}),
		call(CallEnd, 200, CallInfo{Status: 404}),
		end(1, 10, 300, ResultSuccess),
	} {
		a.Add(e)
	}
	if len(got) != 1 {
		t.Fatalf("%d spans", len(got))
	}
	s := got[0]
	if s.UID != uid || s.ResourceVersion != "5" {
		t.Errorf("span uid %q rv %q, want %q and the read's 5", s.UID, s.ResourceVersion, uid)
	}
	want := []struct{ name, uid, rv string }{{"a", uid, "5"}, {"made", other, "6"}, {"a", uid, "7"}, {"b", "", ""}, {"s", "", ""}}
	if len(s.Calls) != len(want) {
		t.Fatalf("%d calls: %+v", len(s.Calls), s.Calls)
	}
	for i, w := range want {
		c := s.Calls[i]
		if c.Name != w.name || c.UID != w.uid || c.ResourceVersion != w.rv {
			t.Errorf("call %d: %s %s uid %q rv %q, want %+v", i, c.Verb, c.Name, c.UID, c.ResourceVersion, w)
		}
	}
}

// TestTrigger: a reconcile that read a version a write seen here made names that write's
// controller and the lag from its return; a version nobody here wrote is "unknown"; a
// reconcile that began before the write returned gets no lag; a no-op write (it returned the
// version read) does not claim the version.
// TestReadVersionWriter: a reconcile names the writer of the version of its object it read,
// when that write was seen (whatever enqueued it: that is Triggers' and TriggerController's).
func TestReadVersionWriter(t *testing.T) {
	const dep, rs = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	ev := func(kind EventKind, goid int64, ti uint64, c CallInfo) Event {
		return Event{Kind: kind, PID: 1, Goid: goid, Time: ti, Call: c}
	}
	sp := func(goid int64, ti uint64, ctl, name string) Event {
		return Event{Kind: SpanStart, PID: 1, Goid: goid, Time: ti, Controller: ctl, Namespace: "ns", Name: name}
	}
	read := func(goid int64, ti uint64, name, uid, rv string) []Event {
		return []Event{ev(CallStart, goid, ti, CallInfo{Kind: CallCacheGet, Verb: "GET"}),
			ev(CallEnd, goid, ti+1, CallInfo{Namespace: "ns", Name: name, UID: uid, ResourceVersion: rv})}
	}
	write := func(goid int64, ti uint64, verb, name, uid, rv string) []Event {
		return []Event{ev(CallStart, goid, ti, CallInfo{Kind: CallAPI, Verb: verb, Namespace: "ns", Name: name}),
			ev(CallEnd, goid, ti+10, CallInfo{Status: 200}),
			ev(CallObject, goid, ti+11, CallInfo{Namespace: "ns", Name: name, UID: uid, ResourceVersion: rv})}
	}
	var evs []Event
	evs = append(evs, sp(10, 100, "deployment", "web"))
	evs = append(evs, read(10, 101, "web", dep, "5")...)           // written by nobody seen here
	evs = append(evs, write(10, 110, "PATCH", "web", dep, "5")...) // no-op: returned the version read
	evs = append(evs, write(10, 130, "POST", "web-1", rs, "6")...) // returns at 140
	evs = append(evs, sp(11, 135, "replicaset", "web-1"))          // began before that write returned
	evs = append(evs, read(11, 150, "web-1", rs, "6")...)
	evs = append(evs, Event{Kind: SpanEnd, PID: 1, Goid: 11, Time: 160, Result: ResultSuccess})
	evs = append(evs, Event{Kind: SpanEnd, PID: 1, Goid: 10, Time: 200, Result: ResultSuccess})
	evs = append(evs, sp(12, 1140, "replicaset", "web-1"))
	evs = append(evs, read(12, 1141, "web-1", rs, "6")...)
	evs = append(evs, Event{Kind: SpanEnd, PID: 1, Goid: 12, Time: 1150, Result: ResultSuccess})
	evs = append(evs, sp(13, 2000, "deployment", "web"))
	evs = append(evs, read(13, 2001, "web", dep, "5")...)
	evs = append(evs, Event{Kind: SpanEnd, PID: 1, Goid: 13, Time: 2010, Result: ResultSuccess})
	for _, e := range evs {
		a.Add(e)
	}
	want := []struct {
		ctl, writer string
	}{
		{"replicaset", "deployment"}, // read the POST's version (its write returned meanwhile)
		{"deployment", TriggerUnknown},
		{"replicaset", "deployment"},
		{"deployment", TriggerUnknown}, // the no-op patch did not claim version 5
	}
	if len(got) != len(want) {
		t.Fatalf("%d spans", len(got))
	}
	for i, w := range want {
		s := got[i]
		if s.Controller != w.ctl || s.ReadVersionWriter != w.writer || s.TriggerController != "" {
			t.Errorf("span %d: %s read version writer %q trigger %q, want %+v and no trigger (no add seen)", i, s.Controller, s.ReadVersionWriter, s.TriggerController, w)
		}
	}
	// A span that read nothing has no trigger at all.
	a.Add(sp(14, 3000, "deployment", "web"))
	a.Add(Event{Kind: SpanEnd, PID: 1, Goid: 14, Time: 3010, Result: ResultError})
	if s := got[len(got)-1]; s.ReadVersionWriter != "" {
		t.Errorf("span without a read: read version writer %q", s.ReadVersionWriter)
	}
}

// TestQueueWaitAbsorbedDelay: a plain add of an object that a delayed add already put in the
// queue makes it ready now (the priority queue keeps the earliest ready time), whichever came
// first; the reconcile it triggers serves both, and no delay is left for a later reconcile.
func TestQueueWaitAbsorbedDelay(t *testing.T) {
	const ms = uint64(time.Millisecond)
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	add := func(tm uint64, after time.Duration) {
		a.Add(Event{Kind: QueueAdd, PID: 1, Time: tm, Namespace: "ns", Name: "a", RequeueAfter: after})
	}
	add(0, 2*time.Second) // RequeueAfter: 2s
	add(500*ms, 0)        // a watch event: ready now
	a.Add(start(1, 1, 502*ms, "a"))
	a.Add(end(1, 1, 510*ms, ResultSuccess))
	add(3000*ms, 0) // the next change, long after the delay would have ended
	add(3000*ms, time.Second)
	a.Add(start(1, 1, 3003*ms, "a"))
	a.Add(end(1, 1, 3010*ms, ResultSuccess))
	want := []waits{{2 * time.Millisecond, 500 * time.Millisecond}, {3 * time.Millisecond, 0}}
	checkWaits(t, got, want)
}

// waits is the queue wait and backoff a span should have.
type waits struct{ wait, backoff time.Duration }

// checkWaits fails t unless got holds a span for each of want, in order, with its waits.
func checkWaits(t *testing.T, got []Span, want []waits) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d spans, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].QueueWait != w.wait || got[i].Backoff != w.backoff {
			t.Errorf("span %d: queue wait %v backoff %v, want %v and %v", i, got[i].QueueWait, got[i].Backoff, w.wait, w.backoff)
		}
	}
}

// TestQueueWaitRateLimited: a rate-limited add is ready when its rate limiter's delay ends:
// the delay is backoff, not queue wait, as an After delay is; a rate-limited add whose delay
// was not seen counts wholly as backoff.
func TestQueueWaitRateLimited(t *testing.T) {
	const ms = uint64(time.Millisecond)
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	a.Add(Event{Kind: QueueAdd, PID: 1, Goid: 1, Time: 100 * ms, Namespace: "ns", Name: "a", RateLimited: true})
	a.Add(Event{Kind: QueueLimitStart, PID: 1, Goid: 7, Time: 101 * ms, Namespace: "ns", Name: "a"})
	a.Add(Event{Kind: QueueLimitEnd, PID: 1, Goid: 7, Time: 101 * ms, RequeueAfter: 40 * time.Millisecond})
	a.Add(start(1, 2, 142*ms, "a"))
	a.Add(end(1, 2, 150*ms, ResultError))
	// After delay, same rule.
	a.Add(Event{Kind: QueueAdd, PID: 1, Goid: 1, Time: 200 * ms, Namespace: "ns", Name: "a", RequeueAfter: 30 * time.Millisecond})
	a.Add(start(1, 2, 231*ms, "a"))
	a.Add(end(1, 2, 240*ms, ResultSuccess))
	// The rate limiter's answer not seen.
	a.Add(Event{Kind: QueueAdd, PID: 1, Goid: 1, Time: 300 * ms, Namespace: "ns", Name: "a", RateLimited: true})
	a.Add(start(1, 2, 320*ms, "a"))
	a.Add(end(1, 2, 330*ms, ResultSuccess))
	want := []waits{
		{time.Millisecond, 41 * time.Millisecond},
		{time.Millisecond, 30 * time.Millisecond},
		{0, 20 * time.Millisecond},
	}
	checkWaits(t, got, want)
}

// TestQueueWaitNestedLimiters: a MaxOf limiter asks the exponential one: the outermost answer
// is the delay.
func TestQueueWaitNestedLimiters(t *testing.T) {
	const ms = uint64(time.Millisecond)
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	a.Add(Event{Kind: QueueAdd, PID: 1, Goid: 1, Time: 100 * ms, Namespace: "ns", Name: "a", RateLimited: true})
	a.Add(Event{Kind: QueueLimitStart, PID: 1, Goid: 7, Time: 101 * ms, Namespace: "ns", Name: "a"})
	a.Add(Event{Kind: QueueLimitStart, PID: 1, Goid: 7, Time: 101 * ms, Namespace: "ns", Name: "a"})
	a.Add(Event{Kind: QueueLimitEnd, PID: 1, Goid: 7, Time: 101 * ms, RequeueAfter: 5 * time.Millisecond})
	a.Add(Event{Kind: QueueLimitEnd, PID: 1, Goid: 7, Time: 101 * ms, RequeueAfter: 50 * time.Millisecond})
	a.Add(start(1, 2, 152*ms, "a"))
	a.Add(end(1, 2, 160*ms, ResultSuccess))
	if got[0].Backoff != 51*time.Millisecond || got[0].QueueWait != time.Millisecond {
		t.Errorf("backoff %v queue wait %v, want 51ms and 1ms", got[0].Backoff, got[0].QueueWait)
	}
}

// TestPhasesInterleaved: read, work, write, read again, write again, work: each call's time
// goes to its phase, every stretch between calls (before the first, after the last) to diff,
// and a read overlapping a write (on a goroutine the reconcile started) counts as apply.
func TestPhasesInterleaved(t *testing.T) {
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	const spanStart = 1
	call := func(goid int64, t0, t1 uint64, verb string) []Event {
		kind := CallAPI
		if verb == "GET" {
			kind = CallCacheGet
		}
		// The kernel reports the span's start on every call event: a goroutine the reconcile
		// started joins its span by it.
		return []Event{
			{Kind: CallStart, PID: 1, Goid: goid, Time: t0, SpanStartTime: spanStart, Call: CallInfo{Kind: kind, Verb: verb}},
			{Kind: CallEnd, PID: 1, Goid: goid, Time: t1, SpanStartTime: spanStart},
		}
	}
	ev := []Event{start(1, 1, spanStart, "a")}
	ev = append(ev, call(1, 11, 31, "GET")...)     // fetch 20
	ev = append(ev, call(1, 51, 81, "PATCH")...)   // apply 30
	ev = append(ev, call(1, 101, 111, "GET")...)   // fetch 10
	ev = append(ev, call(1, 121, 171, "PUT")...)   // apply 50, while...
	ev = append(ev, call(2, 150, 180, "GET")...)   // ... a read on another goroutine: 150-171 apply, 171-180 fetch
	ev = append(ev, end(1, 1, 201, ResultSuccess)) // diff: the rest
	for _, e := range ev {
		a.Add(e)
	}
	s := got[0]
	want := Phases{Fetch: 20 + 10 + 9, Apply: 30 + 50, Diff: 200 - 39 - 80}
	if s.Phases != want {
		t.Errorf("phases %+v, want %+v (calls %+v)", s.Phases, want, s.Calls)
	}
	if s.Phases.Fetch+s.Phases.Diff+s.Phases.Apply != s.Duration {
		t.Errorf("phases %+v do not add up to %v", s.Phases, s.Duration)
	}
}
