package span

// objectRig makes the events of reconciles (process 1) of one object, ns/name, that read it
// from a cache and write it.
type objectRig struct {
	name, uid string
	// readResource is the cache read's resource, writeResource and subresource the write's.
	readResource, writeResource, subresource string
}

func rigCall(kind EventKind, tm uint64, c CallInfo) Event {
	return Event{Kind: kind, Time: tm, Call: c}
}

// reconcile is a reconcile of the object by ctl on goroutine goid, from start to end, ending
// with result, with the events of between on its goroutine.
func (r objectRig) reconcile(goid int64, ctl string, start, end uint64, result Result, between ...[]Event) []Event {
	evs := []Event{{Kind: SpanStart, PID: 1, Goid: goid, Time: start, Controller: ctl, Namespace: "ns", Name: r.name}}
	for _, b := range between {
		for _, e := range b {
			e.PID, e.Goid = 1, goid
			evs = append(evs, e)
		}
	}
	return append(evs, Event{Kind: SpanEnd, PID: 1, Goid: goid, Time: end, Result: result})
}

// read is a cache read of the object at tm that found version rv.
func (r objectRig) read(tm uint64, rv string) []Event {
	return []Event{rigCall(CallStart, tm, CallInfo{Kind: CallCacheGet, Verb: "GET", Resource: r.readResource, Namespace: "ns", Name: r.name}),
		rigCall(CallEnd, tm+1, CallInfo{UID: r.uid, ResourceVersion: rv, Outcome: OutcomeHit})}
}

// write is a PUT of the object at tm answered status, that returned version rv ("": no
// object returned), the call ending at tm+10.
func (r objectRig) write(tm uint64, status int, rv string) []Event {
	evs := []Event{rigCall(CallStart, tm, CallInfo{Kind: CallAPI, Verb: "PUT", Resource: r.writeResource, Subresource: r.subresource, Namespace: "ns", Name: r.name}),
		rigCall(CallStatus, tm+5, CallInfo{Status: status}),
		rigCall(CallEnd, tm+10, CallInfo{})}
	if rv != "" {
		evs = append(evs, rigCall(CallObject, tm+11, CallInfo{Namespace: "ns", Name: r.name, UID: r.uid, ResourceVersion: rv}))
	}
	return evs
}

// assemble feeds events, in order, to an assembler with default options and returns the
// spans it made.
func assemble(events [][]Event) []Span {
	var got []Span
	a := NewAssembler(Options{}, func(s Span) { got = append(got, s) })
	for _, evs := range events {
		for _, e := range evs {
			a.Add(e)
		}
	}
	return got
}
