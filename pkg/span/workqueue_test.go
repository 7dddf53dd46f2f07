package span

import (
	"slices"
	"testing"
	"time"
)

// queueItem is a work-queue item's events on goroutine goid of process 1: Get hands it at
// start, Done for key ns/name of queue q at end; between are what the worker did.
func queueItem(goid int64, start, end uint64, q uint64, name string, between ...Event) []Event {
	evs := []Event{{Kind: SpanStart, PID: 1, Goid: goid, Time: start, Queue: true}}
	for _, e := range between {
		e.PID, e.Goid = 1, goid
		evs = append(evs, e)
	}
	return append(evs, Event{Kind: SpanEnd, PID: 1, Goid: goid, Time: end, SpanStartTime: start, Queue: true, QueueID: q, Namespace: "ns", Name: name, Result: ResultSuccess})
}

func TestWorkQueueSpans(t *testing.T) {
	named := func(goid int64, q uint64, name string) []Event {
		return []Event{{Kind: QueueNamed, PID: 1, Goid: goid, Controller: name}, {Kind: QueueMade, PID: 1, Goid: goid, QueueID: q}}
	}
	tests := []struct {
		name   string
		events [][]Event
		want   []Span // the fields compared: controller, object, result, delay, start, duration, calls
	}{
		{
			name:   "an item of a named queue is a span of the queue's name",
			events: [][]Event{named(1, 0xa0, "deployment"), queueItem(7, 100, 400, 0xa0, "web")},
			want:   []Span{{Controller: "deployment", Namespace: "ns", Name: "web", Result: ResultSuccess, Start: 100, Duration: 300}},
		},
		{
			name:   "a queue whose making was not seen, nor its worker, is unnamed",
			events: [][]Event{named(1, 0xa0, "deployment"), queueItem(7, 100, 400, 0xb0, "web")},
			want:   []Span{{Controller: UnnamedQueue, Namespace: "ns", Name: "web", Result: ResultSuccess, Start: 100, Duration: 300}},
		},
		{
			name: "an unnamed queue's item is a span of the worker that called Done, when known",
			events: [][]Event{{
				{Kind: SpanStart, PID: 1, Goid: 7, Time: 100, Queue: true},
				{Kind: SpanEnd, PID: 1, Goid: 7, Time: 400, SpanStartTime: 100, Queue: true, QueueID: 0xb0, Namespace: "ns", Name: "web", Worker: "main.processNextWorkItem", Result: ResultSuccess}}},
			want: []Span{{Controller: "main.processNextWorkItem", Namespace: "ns", Name: "web", Result: ResultSuccess, Start: 100, Duration: 300}},
		},
		{
			name: "a named queue's item keeps the queue's name, whatever its worker",
			events: [][]Event{named(1, 0xa0, "deployment"), {
				{Kind: SpanStart, PID: 1, Goid: 7, Time: 100, Queue: true},
				{Kind: SpanEnd, PID: 1, Goid: 7, Time: 400, SpanStartTime: 100, Queue: true, QueueID: 0xa0, Namespace: "ns", Name: "web", Worker: "deployment.DeploymentController.processNextWorkItem", Result: ResultSuccess}}},
			want: []Span{{Controller: "deployment", Namespace: "ns", Name: "web", Result: ResultSuccess, Start: 100, Duration: 300}},
		},
		{
			name: "AddRateLimited before Done is a retry; its own AddAfter is not a requeue",
			events: [][]Event{named(1, 0xa0, "job"), queueItem(7, 100, 400, 0xa0, "pi",
				Event{Kind: QueueRequeue, Time: 200, RateLimited: true}, Event{Kind: QueueRequeue, Time: 210, RequeueAfter: 5 * time.Millisecond})},
			want: []Span{{Controller: "job", Namespace: "ns", Name: "pi", Result: ResultError, Start: 100, Duration: 300}},
		},
		{
			name: "AddAfter before Done is a requeue after its delay",
			events: [][]Event{named(1, 0xa0, "cronjob"), queueItem(7, 100, 400, 0xa0, "hourly",
				Event{Kind: QueueRequeue, Time: 200, RequeueAfter: time.Hour})},
			want: []Span{{Controller: "cronjob", Namespace: "ns", Name: "hourly", Result: ResultRequeueAfter, RequeueAfter: time.Hour, Start: 100, Duration: 300}},
		},
		{
			name: "a handler inside the item is the same span: its fields, times and result win",
			events: [][]Event{named(1, 0xa0, "replicaset"), queueItem(7, 100, 900, 0xa0, "web-1",
				Event{Kind: SpanStart, Time: 200, Nested: true, SpanStartTime: 100, Controller: "rs-handler", Namespace: "ns", Name: "web-1", ReconcileID: "id"},
				Event{Kind: CallStart, Time: 300, SpanStartTime: 100, Call: CallInfo{Kind: CallAPI, Verb: "POST"}},
				Event{Kind: CallEnd, Time: 400, SpanStartTime: 100},
				Event{Kind: SpanEnd, Time: 500, SpanStartTime: 100, Result: ResultError, ErrorType: "*errors.StatusError"},
				Event{Kind: QueueRequeue, Time: 600, RateLimited: true})},
			want: []Span{{Controller: "replicaset", Namespace: "ns", Name: "web-1", ReconcileID: "id", Result: ResultError, ErrorType: "*errors.StatusError", Start: 200, Duration: 300, Calls: make([]Call, 1)}},
		},
		{
			name: "a handler that returned nil inside an item its worker requeued after a delay is a requeue after it, as without the handler",
			events: [][]Event{named(1, 0xa0, "deployment"), queueItem(7, 100, 900, 0xa0, "web",
				Event{Kind: SpanStart, Time: 200, Nested: true, SpanStartTime: 100, Controller: "dep-handler", Namespace: "ns", Name: "web"},
				Event{Kind: QueueRequeue, Time: 300, RequeueAfter: 10 * time.Minute},
				Event{Kind: SpanEnd, Time: 500, SpanStartTime: 100, Result: ResultSuccess})},
			want: []Span{{Controller: "deployment", Namespace: "ns", Name: "web", Result: ResultRequeueAfter, RequeueAfter: 10 * time.Minute, Start: 200, Duration: 300}},
		},
		{
			name: "a handler's error wins over the worker's requeue after a delay",
			events: [][]Event{named(1, 0xa0, "namespace"), queueItem(7, 100, 900, 0xa0, "gone",
				Event{Kind: SpanStart, Time: 200, Nested: true, SpanStartTime: 100, Controller: "ns-handler", Namespace: "ns", Name: "gone"},
				Event{Kind: SpanEnd, Time: 500, SpanStartTime: 100, Result: ResultError, ErrorType: "*deletion.ResourcesRemainingError"},
				Event{Kind: QueueRequeue, Time: 600, RequeueAfter: 8 * time.Second})},
			want: []Span{{Controller: "namespace", Namespace: "ns", Name: "gone", Result: ResultError, ErrorType: "*deletion.ResourcesRemainingError", Start: 200, Duration: 300}},
		},
		{
			name: "a handler inside an item of an unnamed queue names the span",
			events: [][]Event{queueItem(7, 100, 900, 0xa0, "web-1",
				Event{Kind: SpanStart, Time: 200, Nested: true, SpanStartTime: 100, Controller: "rs-handler", Namespace: "ns", Name: "web-1"},
				Event{Kind: SpanEnd, Time: 500, SpanStartTime: 100, Result: ResultSuccess})},
			want: []Span{{Controller: "rs-handler", Namespace: "ns", Name: "web-1", Result: ResultSuccess, Start: 200, Duration: 300}},
		},
		{
			name: "Done whose Get was not seen makes no span",
			events: [][]Event{named(1, 0xa0, "job"), {{Kind: SpanEnd, PID: 1, Goid: 7, Time: 400, Queue: true, QueueID: 0xa0, NoEntry: true, Name: "x"}},
				queueItem(7, 500, 600, 0xa0, "y")},
			want: []Span{{Controller: "job", Namespace: "ns", Name: "y", Result: ResultSuccess, Start: 500, Duration: 100}},
		},
		{
			name: "an item that is not a key is named by its type",
			events: [][]Event{named(1, 0xa0, "garbage_collector_graph_changes"), {
				{Kind: SpanStart, PID: 1, Goid: 7, Time: 100, Queue: true},
				{Kind: SpanEnd, PID: 1, Goid: 7, Time: 150, SpanStartTime: 100, Queue: true, QueueID: 0xa0, ItemType: "*garbagecollector.event", Result: ResultSuccess}}},
			want: []Span{{Controller: "garbage_collector_graph_changes", ItemType: "*garbagecollector.event", Result: ResultSuccess, Start: 100, Duration: 50}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Span
			a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
			for _, evs := range tt.events {
				for _, e := range evs {
					a.Add(e)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d spans, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Controller != w.Controller || g.Namespace != w.Namespace || g.Name != w.Name || g.ItemType != w.ItemType ||
					g.ReconcileID != w.ReconcileID || g.Result != w.Result || g.RequeueAfter != w.RequeueAfter || g.ErrorType != w.ErrorType ||
					g.Start != w.Start || g.Duration != w.Duration || len(g.Calls) != len(w.Calls) {
					t.Errorf("span %d:\n got %+v\nwant %+v", i, g, w)
				}
			}
			if a.Open() != 0 {
				t.Errorf("%d spans left open", a.Open())
			}
		})
	}
}

// TestQueueWaitPerQueue: two queues of one process with the same key (kube-controller-manager's
// serviceaccount and root_ca_cert_publisher controllers both queue a namespace's name), each
// added to at another time. Each item's queue wait is from its own queue's add, whichever queue
// serves first, with and without a handler inside the item (detail calls and reconcile).
func TestQueueWaitPerQueue(t *testing.T) {
	add := func(tm, q uint64) Event {
		return Event{Kind: QueueAdd, PID: 1, Goid: 3, Time: tm, QueueID: q, Name: "kube-public"}
	}
	handler := func(tm uint64, start uint64) []Event {
		return []Event{{Kind: SpanStart, Time: tm, Nested: true, SpanStartTime: start, Controller: "handler", Name: "kube-public"},
			{Kind: SpanEnd, Time: tm + 10, SpanStartTime: start, Result: ResultSuccess}}
	}
	item := func(goid int64, start, end, q uint64, between ...Event) []Event {
		evs := queueItem(goid, start, end, q, "kube-public", between...)
		evs[len(evs)-1].Namespace = ""
		return evs
	}
	for _, withHandler := range []bool{false, true} {
		var inA, inB []Event
		if withHandler {
			inA, inB = handler(360, 350), handler(510, 500)
		}
		var got []Span
		a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
		for _, e := range slices.Concat([]Event{add(100, 0xb0), add(300, 0xa0)}, item(7, 350, 400, 0xa0, inA...), item(8, 500, 600, 0xb0, inB...)) {
			a.Add(e)
		}
		if len(got) != 2 {
			t.Fatalf("handler %v: %d spans, want 2: %+v", withHandler, len(got), got)
		}
		wantA, wantB := time.Duration(50), time.Duration(400)
		if withHandler {
			wantA, wantB = 60, 410 // from the handler's entry, the span's start
		}
		if got[0].QueueWait != wantA || got[1].QueueWait != wantB {
			t.Errorf("handler %v: queue waits %v (queue a, added at 300, served at %d) and %v (queue b, added at 100, served at %d), want %v and %v",
				withHandler, got[0].QueueWait, got[0].Start, got[1].QueueWait, got[1].Start, wantA, wantB)
		}
	}
}

// TestQueueWaitAddsWhileItRuns: an add made while a work-queue item's reconcile runs (its own
// write's watch event puts its key back) is the next reconcile's, though the item's object and
// queue are known only at its Done: the first reconcile is served the add before its start,
// the second the one made during the first.
func TestQueueWaitAddsWhileItRuns(t *testing.T) {
	add := func(tm uint64) Event {
		return Event{Kind: QueueAdd, PID: 1, Goid: 3, Time: tm, QueueID: 0xa0, Namespace: "ns", Name: "web"}
	}
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	for _, e := range slices.Concat([]Event{add(100)}, queueItem(7, 200, 300, 0xa0, "web", add(250)), queueItem(7, 400, 500, 0xa0, "web")) {
		a.Add(e)
	}
	if len(got) != 2 {
		t.Fatalf("%d spans, want 2: %+v", len(got), got)
	}
	for i, want := range []struct {
		wait     time.Duration
		triggers int
	}{{100, 1}, {150, 1}} {
		if got[i].QueueWait != want.wait || len(got[i].Triggers) != want.triggers {
			t.Errorf("reconcile %d (start %d): queue wait %v, %d triggers; want %v, %d", i+1, got[i].Start, got[i].QueueWait, len(got[i].Triggers), want.wait, want.triggers)
		}
	}
}
