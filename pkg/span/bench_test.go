package span_test

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reconscope/reconscope/pkg/span"
)

// benchEvents is the decoded form of a stream of reconciles by 16 interleaved workers of one
// process; withCalls adds a cache read and an API PATCH with its status inside each.
func benchEvents(reconciles int, withCalls bool) []span.Event {
	const workers = 16
	per := make([][]span.Event, workers)
	for i := range reconciles {
		w := i % workers
		ev := func(k span.EventKind) span.Event {
			return span.Event{Kind: k, PID: 4242, Goid: int64(100 + w), G: uint64(0xc000100000 + w*0x1000)}
		}
		ns, name := "team-a-production", fmt.Sprintf("webapp-7d9f8c6b5-%05d", i%4096)
		start := ev(span.SpanStart)
		start.Controller, start.Namespace, start.Name = "webapp", ns, name
		start.ReconcileID = fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i, i)
		seq := []span.Event{start}
		if withCalls {
			get := ev(span.CallStart)
			get.Call = span.CallInfo{Kind: span.CallCacheGet, Verb: "GET", Resource: "configmaps", Namespace: ns, Name: name}
			getEnd := ev(span.CallEnd)
			getEnd.Call.UID = fmt.Sprintf("5b0e3c1a-9f7d-4c2b-a8e6-%012x", i)
			patch := ev(span.CallStart)
			patch.Call = span.CallInfo{Kind: span.CallAPI, Verb: "PATCH", Resource: "webapps", Namespace: ns, Name: name, Subresource: "status"}
			status := ev(span.CallStatus)
			status.Call.Status = 200
			seq = append(seq, get, getEnd, patch, status, ev(span.CallEnd))
		}
		end := ev(span.SpanEnd)
		end.Result = span.ResultSuccess
		if i%8 == 3 {
			end.Result, end.ErrorType, end.Error = span.ResultError, "*errors.StatusError", "the object has been modified"
		}
		per[w] = append(per[w], append(seq, end)...)
	}
	var out []span.Event
	t := uint64(1_000_000_000)
	for more := true; more; {
		more = false
		for w := range per {
			if len(per[w]) > 0 {
				more = true
				e := per[w][0]
				per[w] = per[w][1:]
				t += 1500
				e.Time = t
				out = append(out, e)
			}
		}
	}
	return out
}

// BenchmarkAssemblerAdd is the span assembly alone, per event (the collector's
// BenchmarkDecodeAssemble adds the decoding of the ring-buffer records).
func BenchmarkAssemblerAdd(b *testing.B) {
	for _, bc := range []struct {
		name      string
		withCalls bool
	}{{"reconcile-only", false}, {"with-calls", true}} {
		b.Run(bc.name, func(b *testing.B) {
			events := benchEvents(4096, bc.withCalls)
			spans := 0
			a := span.NewAssembler(span.Options{}, func(span.Span) { spans++ })
			b.ReportAllocs()
			n := 0
			cpu0 := processCPU(b)
			for b.Loop() {
				a.Add(events[n%len(events)])
				n++
			}
			if ns := float64(processCPU(b) - cpu0); n > 0 && ns > 0 {
				b.ReportMetric(ns/float64(n), "cpu-ns/event")
				b.ReportMetric(float64(n)/(ns/1e9), "events/cpu-s")
			}
			if n >= len(events) && spans == 0 {
				b.Fatal("no span assembled")
			}
		})
	}
}

// processCPU is the process's CPU time: unlike ns/op it does not count the time other
// programs held the CPU, so it is the per-core figure on a shared machine.
func processCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}
