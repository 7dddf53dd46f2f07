package exporter

import (
	"bufio"
	"encoding/json"
	"io"
	"testing"
	"time"

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
