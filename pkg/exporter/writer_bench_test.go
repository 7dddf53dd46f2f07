package exporter

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
)

// benchSpans are a reconcile as the default detail sees it (its object, one trigger) and one
// with the API calls --detail calls adds.
func benchSpans() map[string]*span.Span {
	base := span.Span{Controller: "replicaset", Namespace: "scale-1-0-traced", Name: "d0042-7d9f8c6b5", UID: "5f0c7a1e-3b0e-4d8e-9a51-8f3a0c6d2b17",
		ResourceVersion: "81234", ReconcileID: "", Start: 1_000_000_000, Duration: 1834 * time.Microsecond, Result: span.ResultSuccess,
		PID: 4242, Goid: 318, Exe: "/usr/local/bin/kube-controller-manager", Pod: "kube-system/kube-controller-manager-node-1", Container: "kube-controller-manager",
		QueueWait: 12 * time.Microsecond, ProbeHits: span.ProbeHits{Emulated: 4},
		Triggers: []span.Trigger{{Kind: span.TriggerMapped, Event: span.WatchUpdate, Object: span.ObjectRef{Kind: "Pod", Namespace: "scale-1-0-traced", Name: "d0042-7d9f8c6b5-x7k2p", UID: "u2", ResourceVersion: "81230"}, Writer: "replicaset", Time: 999_000_000}},
	}
	calls := base
	calls.Calls = []span.Call{
		{CallInfo: span.CallInfo{Kind: span.CallCacheGet, Verb: "GET", Resource: "replicasets", Namespace: "scale-1-0-traced", Name: "d0042-7d9f8c6b5", UID: "u", ResourceVersion: "81234", Outcome: "hit"}, Start: 1_000_010_000, Duration: 3 * time.Microsecond},
		{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "POST", Resource: "pods", Namespace: "scale-1-0-traced", Status: 201}, Start: 1_000_020_000, Duration: 900 * time.Microsecond},
		{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "PUT", Resource: "replicasets", Subresource: "status", Namespace: "scale-1-0-traced", Name: "d0042-7d9f8c6b5", Status: 200}, Start: 1_001_000_000, Duration: 700 * time.Microsecond},
	}
	return map[string]*span.Span{"reconcile": &base, "calls": &calls}
}

// BenchmarkJSONWriter is the JSON lines output of one span (trace --output json), buffered as
// the Queue writes them; encoding-json is the same line made by encoding/json's Encoder, as the
// writer did before AppendJSON, for comparison in the same run.
func BenchmarkJSONWriter(b *testing.B) {
	clock := ktime.ClockAt(time.Unix(1_700_000_000, 0))
	for _, name := range []string{"reconcile", "calls"} {
		s := benchSpans()[name]
		b.Run(name, func(b *testing.B) {
			w := NewJSONWriter(io.Discard, clock)
			b.ReportAllocs()
			for b.Loop() {
				if err := w.WriteBuffered(s); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			enc := json.NewEncoder(bufio.NewWriter(io.Discard))
			b.ReportAllocs()
			for b.Loop() {
				if err := enc.Encode(ToJSON(s, clock)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// countingWriter is a JSONWriter that counts the spans written.
type countingWriter struct {
	*JSONWriter
	n atomic.Int64
}

func (c *countingWriter) WriteBuffered(s *span.Span) error {
	c.n.Add(1)
	return c.JSONWriter.WriteBuffered(s)
}

// BenchmarkQueue is a Queue in front of a JSONWriter on /dev/null, fed as the tracer feeds it:
// bursts of 32 spans (one read of the ring buffer), each after a little work (decoding its
// events), a millisecond apart. cpu-ns/span is the process's CPU time (the producer's, the
// queue goroutine's, the runtime's waking and parking them) per span: "batched" waits
// BatchDelay for the rest of a burst; "flush-when-empty" flushes and waits on the channel
// whenever it is empty, as the queue did before; "one-processor" is the agent's (GOMAXPROCS=1,
// no wait: batchDelay), beside the same with the wait.
func BenchmarkQueue(b *testing.B) {
	const burst = 32
	s := benchSpans()["reconcile"]
	for _, bc := range []struct {
		name  string
		delay time.Duration
		procs int // GOMAXPROCS while it runs; 0 leaves it
	}{{"batched", BatchDelay, 0}, {"flush-when-empty", 0, 0},
		// The agent's: one processor, and the delay NewQueue gives it there (none).
		{"one-processor", batchDelay(1), 1}, {"one-processor-batched", BatchDelay, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.procs > 0 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(bc.procs))
			}
			null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer null.Close()
			w := &countingWriter{JSONWriter: NewJSONWriter(null, ktime.ClockAt(time.Unix(1_700_000_000, 0)))}
			q := newQueue(w, 0, slog.New(slog.DiscardHandler), bc.delay)
			var sink uint64
			spans := 0
			start := processCPU(b)
			for b.Loop() {
				for range burst {
					for i := range 2000 { // the events' decoding, about a microsecond
						sink += uint64(i) * sink
					}
					if err := q.Write(s); err != nil {
						b.Fatal(err)
					}
					spans++
				}
				time.Sleep(time.Millisecond)
			}
			if err := q.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
			cpu := processCPU(b) - start
			if got := w.n.Load(); got != int64(spans) || q.Dropped() != 0 {
				b.Fatalf("%d spans written, %d dropped, of %d", got, q.Dropped(), spans)
			}
			b.ReportMetric(float64(cpu)/float64(spans), "cpu-ns/span")
			_ = sink
		})
	}
}

func processCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}
