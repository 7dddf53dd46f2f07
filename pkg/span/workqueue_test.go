package span

import (
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
