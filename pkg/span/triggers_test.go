package span

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestTriggers: each reconcile lists the adds it served, each with why it happened: the watch
// event its goroutine was delivering (of the object itself, or of another one mapped to it),
// a resync, the worker's own requeue (inside the item's bracket, or right after
// controller-runtime's Reconcile returned), a requeue a client-go queue made later on its own
// goroutine, or something else. Events are named with their writers when a traced write made
// their version; trigger_controller is the writer of the most recent event.
func TestTriggers(t *testing.T) {
	const (
		podUID = "11111111-1111-1111-1111-111111111111"
		cmUID  = "22222222-2222-2222-2222-222222222222"
	)
	pod := ObjectRef{Kind: "Pod", Namespace: "ns", Name: "web-1", UID: podUID, ResourceVersion: "7"}
	cm := ObjectRef{Kind: "ConfigMap", Namespace: "ns", Name: "web", UID: cmUID, ResourceVersion: "5"}
	watch := func(goid int64, tm uint64, w string, o ObjectRef) Event {
		return Event{Kind: WatchEvent, PID: 1, Goid: goid, Time: tm, Watch: w, Object: o}
	}
	add := func(goid int64, tm uint64, name string) Event {
		return Event{Kind: QueueAdd, PID: 1, Goid: goid, Time: tm, Namespace: "ns", Name: name}
	}
	reconcile := func(goid int64, start, end uint64, name string, r Result, between ...Event) []Event {
		evs := []Event{{Kind: SpanStart, PID: 1, Goid: goid, Time: start, Controller: "owner", Namespace: "ns", Name: name}}
		for _, e := range between {
			e.PID, e.Goid = 1, goid
			evs = append(evs, e)
		}
		return append(evs, Event{Kind: SpanEnd, PID: 1, Goid: goid, Time: end, Result: r})
	}
	// createPod is a reconcile of "maker" that creates web-1 (version 7), its write returning at 150.
	createPod := reconcile(30, 100, 200, "maker", ResultSuccess,
		Event{Kind: CallStart, Time: 140, Call: CallInfo{Kind: CallAPI, Verb: "POST", Resource: "pods", Namespace: "ns"}},
		Event{Kind: CallEnd, Time: 150, Call: CallInfo{Status: 201}},
		Event{Kind: CallObject, Time: 151, Call: CallInfo{Namespace: "ns", Name: "web-1", UID: podUID, ResourceVersion: "7"}})
	for i := range createPod {
		if createPod[i].Kind == SpanStart {
			createPod[i].Controller = "maker"
		}
	}
	type want struct {
		triggers []Trigger
		dropped  int
		ctl      string
		lag      time.Duration
	}
	tests := []struct {
		name   string
		events [][]Event
		want   want // of the last span
	}{{
		name: "an event of the object, then a mapped event of an owned pod a traced controller created",
		events: [][]Event{createPod,
			{watch(50, 300, WatchUpdate, cm), add(50, 301, "web")},
			{watch(51, 400, WatchAdd, pod), add(51, 401, "web")},
			reconcile(20, 1000, 1100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{
			{Kind: TriggerEvent, Event: WatchUpdate, Object: cm, Writer: WriterUntraced, Time: 301},
			{Kind: TriggerMapped, Event: WatchAdd, Object: pod, Writer: "maker", Time: 401, writeEnd: 150, writerPID: 1}},
			ctl: "maker", lag: 1000 - 150},
	}, {
		name: "the most recent event names the trigger controller, untraced: unknown",
		events: [][]Event{createPod,
			{watch(51, 400, WatchAdd, pod), add(51, 401, "web")},
			{watch(50, 500, WatchUpdate, cm), add(50, 501, "web")},
			reconcile(20, 1000, 1100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{
			{Kind: TriggerMapped, Event: WatchAdd, Object: pod, Writer: "maker", Time: 401, writeEnd: 150, writerPID: 1},
			{Kind: TriggerEvent, Event: WatchUpdate, Object: cm, Writer: WriterUntraced, Time: 501}},
			ctl: TriggerUnknown},
	}, {
		name: "a resync",
		events: [][]Event{{watch(50, 300, WatchResync, cm), add(50, 301, "web")},
			reconcile(20, 1000, 1100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{{Kind: TriggerResync, Event: WatchResync, Object: cm, Writer: WriterUntraced, Time: 301}}, ctl: TriggerUnknown},
	}, {
		name: "controller-runtime's retry after an error, on the worker right after Reconcile returned",
		events: [][]Event{reconcile(20, 100, 200, "web", ResultError),
			{{Kind: QueueAdd, PID: 1, Goid: 20, Time: 201, Namespace: "ns", Name: "web", RateLimited: true}},
			reconcile(20, 1000, 1100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{{Kind: TriggerRetry, Time: 201}}},
	}, {
		name: "controller-runtime's RequeueAfter",
		events: [][]Event{reconcile(20, 100, 200, "web", ResultRequeueAfter),
			{{Kind: QueueAdd, PID: 1, Goid: 20, Time: 201, Namespace: "ns", Name: "web", RequeueAfter: 500}},
			reconcile(20, 1000, 1100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{{Kind: TriggerRequeueAfter, Time: 201}}},
	}, {
		name: "controller-runtime's Requeue",
		events: [][]Event{reconcile(20, 100, 200, "web", ResultRequeue),
			{{Kind: QueueAdd, PID: 1, Goid: 20, Time: 201, Namespace: "ns", Name: "web", RateLimited: true}},
			reconcile(20, 1000, 1100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{{Kind: TriggerRequeue, Time: 201}}},
	}, {
		name: "a client-go worker's AddRateLimited, added later by the delaying queue's goroutine",
		events: [][]Event{queueItem(7, 100, 200, 0xa0, "web", Event{Kind: QueueRequeue, Time: 150, RateLimited: true}),
			{add(60, 300, "web")},
			queueItem(7, 1000, 1100, 0xa0, "web")},
		want: want{triggers: []Trigger{{Kind: TriggerRetry, Time: 300}}},
	}, {
		name: "an add inside the worker's own bracket",
		events: [][]Event{reconcile(20, 100, 200, "web", ResultSuccess, add(0, 150, "web")),
			reconcile(20, 1000, 1100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{{Kind: TriggerRequeue, Time: 150}}},
	}, {
		name: "a worker adding an object it reconciled earlier, while it reconciles another, is not its requeue",
		events: [][]Event{reconcile(20, 100, 200, "web", ResultError),
			{{Kind: SpanStart, PID: 1, Goid: 20, Time: 300, Controller: "owner", Namespace: "ns", Name: "other"},
				{Kind: QueueAdd, PID: 1, Goid: 20, Time: 350, Namespace: "ns", Name: "web", Worker: "main.reconcileOther"},
				{Kind: SpanEnd, PID: 1, Goid: 20, Time: 400, Result: ResultSuccess}},
			reconcile(21, 1000, 1100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{{Kind: TriggerOther, Function: "main.reconcileOther", Time: 350}}},
	}, {
		name:   "an add from a goroutine doing nothing reconscope saw names the function that added",
		events: [][]Event{{{Kind: QueueAdd, PID: 1, Goid: 60, Time: 300, Namespace: "ns", Name: "web", Worker: "main.resyncAll"}}, reconcile(20, 1000, 1100, "web", ResultSuccess)},
		want:   want{triggers: []Trigger{{Kind: TriggerOther, Function: "main.resyncAll", Time: 300}}},
	}, {
		name: "adds during a reconcile are the next one's",
		events: [][]Event{{watch(50, 300, WatchUpdate, cm), add(50, 301, "web")},
			{{Kind: SpanStart, PID: 1, Goid: 20, Time: 1000, Controller: "owner", Namespace: "ns", Name: "web"},
				watch(51, 1050, WatchAdd, pod), add(51, 1051, "web"),
				{Kind: SpanEnd, PID: 1, Goid: 20, Time: 1100, Result: ResultSuccess}},
			reconcile(20, 2000, 2100, "web", ResultSuccess)},
		want: want{triggers: []Trigger{{Kind: TriggerMapped, Event: WatchAdd, Object: pod, Writer: WriterUntraced, Time: 1051}}, ctl: TriggerUnknown},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := assemble(tc.events)
			if len(got) == 0 {
				t.Fatal("no span")
			}
			s := got[len(got)-1]
			if !reflect.DeepEqual(s.Triggers, tc.want.triggers) || s.TriggersDropped != tc.want.dropped {
				t.Errorf("triggers\n got %+v (+%d)\nwant %+v (+%d)", s.Triggers, s.TriggersDropped, tc.want.triggers, tc.want.dropped)
			}
			if s.TriggerController != tc.want.ctl || s.TriggerLag != tc.want.lag || s.TriggerLagKnown != (tc.want.lag != 0) {
				t.Errorf("trigger controller %q lag %v (known %v), want %q lag %v", s.TriggerController, s.TriggerLag, s.TriggerLagKnown, tc.want.ctl, tc.want.lag)
			}
		})
	}
}

// TestTriggersBounded: a reconcile lists its first MaxTriggers adds and counts the rest; the
// most recent event names the trigger controller even when it is not listed.
func TestTriggersBounded(t *testing.T) {
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	const n = MaxTriggers + 3
	for i := range n {
		o := ObjectRef{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: fmt.Sprintf("%08d-1111-1111-1111-111111111111", i), ResourceVersion: "1"}
		a.Add(Event{Kind: WatchEvent, PID: 1, Goid: 50, Time: uint64(10 * i), Watch: WatchAdd, Object: o})
		a.Add(Event{Kind: QueueAdd, PID: 1, Goid: 50, Time: uint64(10*i + 1), Namespace: "ns", Name: "web"})
	}
	// the last pod's version was written by a traced controller
	a.versions.made[version{fmt.Sprintf("%08d-1111-1111-1111-111111111111", n-1), "1"}] = written{controller: "maker", end: 5}
	a.Add(Event{Kind: SpanStart, PID: 1, Goid: 20, Time: 1000, Controller: "owner", Namespace: "ns", Name: "web"})
	a.Add(Event{Kind: SpanEnd, PID: 1, Goid: 20, Time: 1100, Result: ResultSuccess})
	if len(got) != 1 {
		t.Fatalf("%d spans", len(got))
	}
	s := got[0]
	if len(s.Triggers) != MaxTriggers || s.TriggersDropped != n-MaxTriggers {
		t.Errorf("%d triggers, %d dropped; want %d, %d", len(s.Triggers), s.TriggersDropped, MaxTriggers, n-MaxTriggers)
	}
	if s.Triggers[0].Object.Name != "p0" || s.Triggers[MaxTriggers-1].Object.Name != fmt.Sprintf("p%d", MaxTriggers-1) {
		t.Errorf("not the first adds in order: %+v", s.Triggers)
	}
	if s.TriggerController != "maker" {
		t.Errorf("trigger controller %q, want the most recent event's writer maker", s.TriggerController)
	}
}

// TestConflictWriter: a write answered 409 names the writer of the newer version it
// conflicted with: the newest traced write of the object that made a version after the one the
// reconcile read; untraced when none was seen; nothing when the version read is unknown.
func TestConflictWriter(t *testing.T) {
	r := objectRig{name: "rs", uid: "33333333-3333-3333-3333-333333333333", readResource: "replicaset", writeResource: "replicasets", subresource: "status"}
	tests := []struct {
		name   string
		events [][]Event
		want   string
	}{
		{"another traced controller wrote a newer version in between", [][]Event{
			r.reconcile(20, "foo", 100, 200, ResultError, r.read(110, "213"), r.write(150, 200, "216")),
			r.reconcile(21, "replicaset", 90, 400, ResultError, r.read(95, "213"), r.write(300, 409, ""))}, "foo"},
		{"no traced write of a newer version", [][]Event{
			r.reconcile(21, "replicaset", 90, 400, ResultError, r.read(95, "213"), r.write(300, 409, ""))}, WriterUntraced},
		{"the only traced write is older than the version read", [][]Event{
			r.reconcile(20, "foo", 10, 50, ResultError, r.read(11, "200"), r.write(20, 200, "205")),
			r.reconcile(21, "replicaset", 90, 400, ResultError, r.read(95, "213"), r.write(300, 409, ""))}, WriterUntraced},
		{"the version read is not known", [][]Event{
			r.reconcile(21, "replicaset", 90, 400, ResultError, r.write(300, 409, ""))}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := assemble(tc.events)
			s := got[len(got)-1]
			c := s.Calls[len(s.Calls)-1]
			if c.Status != 409 || c.ConflictWriter != tc.want {
				t.Errorf("conflicting write %+v: conflict writer %q, want %q", c.CallInfo, c.ConflictWriter, tc.want)
			}
			for _, c := range s.Calls[:len(s.Calls)-1] {
				if c.ConflictWriter != "" {
					t.Errorf("call %+v names a conflict writer", c.CallInfo)
				}
			}
		})
	}
}
