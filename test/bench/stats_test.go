package main

import (
	"math"
	"testing"
)

func TestSamples(t *testing.T) {
	tests := []struct {
		in            samples
		med, min, max float64
		spread        string
	}{
		{samples{3, 1, 2}, 2, 1, 3, "2 ns (1 ns–3 ns)"},
		{samples{4, 1, 3, 2}, 2.5, 1, 4, "2 ns (1 ns–4 ns)"},
		{samples{1500}, 1500, 1500, 1500, "1.50 µs"},
	}
	for _, tt := range tests {
		if got := tt.in.median(); got != tt.med {
			t.Errorf("%v median = %v, want %v", tt.in, got, tt.med)
		}
		if tt.in.min() != tt.min || tt.in.max() != tt.max {
			t.Errorf("%v min, max = %v, %v", tt.in, tt.in.min(), tt.in.max())
		}
		if got := tt.in.spread(ns); got != tt.spread {
			t.Errorf("%v spread = %q, want %q", tt.in, got, tt.spread)
		}
	}
	if !math.IsNaN(samples{}.median()) || (samples{}).spread(ns) != "n/a" {
		t.Error("empty samples should have no median")
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkDecodeAssemble/with-calls-2   	 1000000	       759.6 ns/op	       513.0 cpu-ns/event	   1949267 events/cpu-s	     266 B/op	       3 allocs/op
BenchmarkDecodeAssemble/with-calls-2   	 1000000	       981.1 ns/op	       578.8 cpu-ns/event	   1727712 events/cpu-s	     266 B/op	       3 allocs/op
PASS
`
	res, order := parseBench(out)
	if len(order) != 1 || order[0] != "DecodeAssemble/with-calls" {
		t.Fatalf("order = %v", order)
	}
	r := res["DecodeAssemble/with-calls"]
	if got := r.values["events/cpu-s"].median(); got != (1949267+1727712)/2.0 {
		t.Errorf("events/cpu-s median = %v", got)
	}
	if got := r.values["B/op"].median(); got != 266 {
		t.Errorf("B/op median = %v", got)
	}
	c, err := parseCheck("DecodeAssemble/with-calls:events/cpu-s>=1e6")
	if err != nil || c.bench != "DecodeAssemble/with-calls" || c.unit != "events/cpu-s" || c.op != ">=" || c.limit != 1e6 {
		t.Fatalf("parseCheck = %+v, %v", c, err)
	}
}

// TestNsAtMost: the verdict says the budget as BENCHMARKS.md shows it, and meets it up to the
// limit itself.
func TestNsAtMost(t *testing.T) {
	for _, tt := range []struct {
		v, limit float64
		goal     string
		met      bool
	}{
		{250, 300, "≤ 300 ns", true},
		{300, 300, "≤ 300 ns", true},
		{301, 300, "≤ 300 ns", false},
		{75, 60, "≤ 60 ns", false},
	} {
		got := nsAtMost("f", tt.v, tt.limit)
		want := Verdict{Figure: "f", Goal: tt.goal, Measured: ns(tt.v), Value: tt.v, Unit: "ns", Met: tt.met}
		if got != want {
			t.Errorf("nsAtMost(%v, %v) = %+v, want %+v", tt.v, tt.limit, got, want)
		}
	}
}

func TestSecondRun(t *testing.T) {
	// Attached once, a hit costs the first run; attached twice, each run is the mean of a
	// first and a second run: the second is 2 × twice − once, round by round.
	runs := map[string]samples{"b": {800, 1000, 900}, "b2": {450, 520}}
	perHit := func(k string) samples { return runs[k] }
	got := secondRun(perHit, "b", "b2")
	if len(got) != 2 || got[0] != 100 || got[1] != 40 {
		t.Errorf("secondRun = %v, want [100 40] (rounds paired, the shorter list's length)", got)
	}
	if w := secondRunOf(perHit, "b"); w != "70 ns" {
		t.Errorf("secondRunOf = %q, want the median, 70 ns", w)
	}
	if w := secondRunOf(perHit, "c"); w != "" {
		t.Errorf("secondRunOf without twice-attached runs = %q, want empty", w)
	}
}
