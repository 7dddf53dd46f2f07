package exporter

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
)

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
