package exporter

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
)

// TestJSONLineSchema: every JSON line the writer prints starts with the schema it follows.
func TestJSONLineSchema(t *testing.T) {
	var b strings.Builder
	w := NewJSONWriter(&b, ktime.Clock{})
	for _, s := range []span.Span{{Controller: "a", Result: span.ResultSuccess}, {Controller: "b", Result: span.ResultError, Error: "boom"}} {
		if err := w.Write(&s); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), b.String())
	}
	for _, line := range lines {
		var j struct {
			Schema string `json:"schema"`
		}
		if err := json.Unmarshal([]byte(line), &j); err != nil || j.Schema != "reconscope.dev/span/v1" ||
			!strings.HasPrefix(line, `{"schema":"reconscope.dev/span/v1",`) {
			t.Errorf("line %s: schema %q (%v), want it first, reconscope.dev/span/v1", line, j.Schema, err)
		}
	}
}

// TestJSONPhaseNames: the phases object has the new names (fetch, diff, apply) and, for one
// release, the old ones with the same values; they add up to the duration.
func TestJSONPhaseNames(t *testing.T) {
	s := span.Span{Controller: "c", Duration: 600, Result: span.ResultSuccess,
		Phases: span.Phases{Fetch: 100, Diff: 200, Apply: 300}}
	b, err := json.Marshal(ToJSON(&s, ktime.Clock{}))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		DurationNS int64            `json:"duration_ns"`
		Phases     map[string]int64 `json:"phases"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"fetch_ns": 100, "diff_ns": 200, "apply_ns": 300, "read_ns": 100, "compute_ns": 200, "write_ns": 300}
	for k, v := range want {
		if got.Phases[k] != v {
			t.Errorf("phases.%s = %d, want %d (%s)", k, got.Phases[k], v, b)
		}
	}
	if len(got.Phases) != len(want) {
		t.Errorf("phases %v: unexpected keys", got.Phases)
	}
	if sum := got.Phases["fetch_ns"] + got.Phases["diff_ns"] + got.Phases["apply_ns"]; time.Duration(sum) != s.Duration {
		t.Errorf("phases add up to %d, duration %d", sum, got.DurationNS)
	}
}

// TestJSONTriggers: triggers carry the kind, the event and its object, and the writer; a
// requeue only its kind and time; read_version_writer and trigger_controller stand apart.
func TestJSONTriggers(t *testing.T) {
	s := span.Span{Controller: "owner", Result: span.ResultSuccess, TriggerController: "replicaset", ReadVersionWriter: "owner",
		Triggers: []span.Trigger{
			{Kind: span.TriggerMapped, Event: span.WatchAdd, Object: span.ObjectRef{Kind: "Pod", Namespace: "ns", Name: "web-1", UID: "u", ResourceVersion: "812"}, Writer: "replicaset"},
			{Kind: span.TriggerRetry},
		}, TriggersDropped: 3}
	b, err := json.Marshal(ToJSON(&s, ktime.Clock{}))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Triggers          []map[string]any `json:"triggers"`
		TriggersDropped   int              `json:"triggers_dropped"`
		TriggerController string           `json:"trigger_controller"`
		ReadVersionWriter string           `json:"read_version_writer"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Triggers) != 2 || got.TriggersDropped != 3 || got.TriggerController != "replicaset" || got.ReadVersionWriter != "owner" {
		t.Fatalf("%s", b)
	}
	want := map[string]any{"kind": "mapped", "event": "add", "object_kind": "Pod", "namespace": "ns", "name": "web-1", "uid": "u", "resource_version": "812", "writer": "replicaset"}
	for k, v := range want {
		if got.Triggers[0][k] != v {
			t.Errorf("triggers[0].%s = %v, want %v (%s)", k, got.Triggers[0][k], v, b)
		}
	}
	if len(got.Triggers[1]) != 2 || got.Triggers[1]["kind"] != "retry" || got.Triggers[1]["time"] == nil {
		t.Errorf("triggers[1] = %v, want kind and time only", got.Triggers[1])
	}
}

// TestJSONHotLoopsAndStaleReads: hot_loops and stale_reads carry what the span found, and are
// absent when there is none.
func TestJSONHotLoopsAndStaleReads(t *testing.T) {
	s := span.Span{Controller: "c", Result: span.ResultSuccess,
		HotLoops: []span.HotLoop{{Kind: span.HotLoopNoopWrite, Namespace: "ns", Name: "t", UID: "u", Resource: "configmaps", Count: 6}},
		StaleReads: []span.StaleRead{{Namespace: "ns", Name: "o", UID: "v", Resource: "configmaps", ResourceVersion: "213",
			NewerVersion: "216", NewerWriter: "w", Age: 42}}}
	b, err := json.Marshal(ToJSON(&s, ktime.Clock{}))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		HotLoops   []map[string]any `json:"hot_loops"`
		StaleReads []map[string]any `json:"stale_reads"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.HotLoops) != 1 || len(got.StaleReads) != 1 {
		t.Fatalf("%s", b)
	}
	for k, v := range map[string]any{"kind": "noop_write", "namespace": "ns", "name": "t", "uid": "u", "resource": "configmaps", "count": 6.0, "start": false} {
		if got.HotLoops[0][k] != v {
			t.Errorf("hot_loops[0].%s = %v, want %v (%s)", k, got.HotLoops[0][k], v, b)
		}
	}
	for k, v := range map[string]any{"namespace": "ns", "name": "o", "uid": "v", "resource": "configmaps", "resource_version": "213",
		"newer_resource_version": "216", "newer_writer": "w", "age_ns": 42.0} {
		if got.StaleReads[0][k] != v {
			t.Errorf("stale_reads[0].%s = %v, want %v (%s)", k, got.StaleReads[0][k], v, b)
		}
	}
	b, _ = json.Marshal(ToJSON(&span.Span{Controller: "c"}, ktime.Clock{}))
	if strings.Contains(string(b), "hot_loops") || strings.Contains(string(b), "stale_reads") {
		t.Errorf("a span without any: %s", b)
	}
}

// TestJSONProbeHits: a reconcile's hits by trap kind, under the names docs/json.md gives, and
// back again as the plugin reads them.
func TestJSONProbeHits(t *testing.T) {
	s := span.Span{Controller: "c", Result: span.ResultSuccess, ProbeHits: span.ProbeHits{Emulated: 5, SingleStepped: 2}}
	b, err := json.Marshal(ToJSON(&s, ktime.Clock{}))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ProbeHits map[string]uint32 `json:"probe_hits"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.ProbeHits["emulated"] != 5 || got.ProbeHits["single_stepped"] != 2 || len(got.ProbeHits) != 2 {
		t.Errorf("probe_hits %v, want emulated 5, single_stepped 2 (%s)", got.ProbeHits, b)
	}
	var j JSONSpan
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	if back := FromJSON(j); back.ProbeHits != s.ProbeHits {
		t.Errorf("read back: %+v, want %+v", back.ProbeHits, s.ProbeHits)
	}
}
