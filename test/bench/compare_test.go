package main

import (
	"math"
	"os"
	"testing"
)

// TestParseBenchmarksMD reads the Budgets table of a BENCHMARKS.md written before
// BENCHMARKS.json existed, as bench compare does for the first comparison.
func TestParseBenchmarksMD(t *testing.T) {
	md := `| date | 2026-11-29 17:49 UTC |
| commit | cdb22ba-dirty |
| load average (1, 5, 15 min) | 0.99 1.24 2.03 at the start, 1.04 1.11 1.84 at the end |

## Budgets

| figure | goal | measured (median) | met |
| --- | --- | --- | --- |
| traced reconcile / bare probe hits, reconcile probe (added CPU, same sites, empty program) | ≤ 1.10× | 1.266× | **no** |
| BPF program time per hit (kernel stats), reconcile probe | ≤ 300 ns | 731 ns | **no** |
| decode + assemble per core, reconciles with calls (8 events each) | ≥ 1.00 M/s | 1.75 M/s (events/cpu-s) | yes |
| lost events at 20 k reconciles/s, default 4 MiB ring buffer (4 events per reconcile) | 0 lost at 20 k/s | 0 lost (max 0) at 20.0 k/s achieved | yes |
| ` + "`inspect`" + ` time, kube-apiserver | < 1 s | 264 ms wall, 270 ms CPU | yes |
| symbols.Open … ReturnSites allocation, kube-apiserver (BenchmarkOpenLarge) | < 150.0 MB | 60.5 MB (B/op) | yes |
| agent peak RSS tracing 20 processes (worst variant) | < 64 MiB | 62.9 MiB | yes |

4 of 15 figures miss their goal:
`
	r, err := parseBenchmarksMD(md)
	if err != nil {
		t.Fatal(err)
	}
	if r.Date != "2026-11-29 17:49 UTC" || r.Commit != "cdb22ba-dirty" {
		t.Errorf("date %q, commit %q", r.Date, r.Commit)
	}
	want := []float64{1.266, 731, 1.75e6, 0, 264e6, 60.5e6, 62.9 * (1 << 20)}
	if len(r.Figures) != len(want) {
		t.Fatalf("%d figures, want %d: %+v", len(r.Figures), len(want), r.Figures)
	}
	for i, w := range want {
		if got := r.Figures[i].Value; got < w*0.9999 || got > w*1.0001 {
			t.Errorf("%s: %g, want %g", r.Figures[i].Figure, got, w)
		}
	}
}

func TestJudge(t *testing.T) {
	for _, c := range []struct {
		goal       string
		before, at float64
		want       string
	}{
		{"≤ 300 ns", 731, 300, "better"},
		{"≤ 300 ns", 300, 731, "worse"},
		{"≤ 300 ns", 300, 320, ""},
		{"≥ 1.00 M/s", 1.75e6, 1.2e6, "worse"},
		{"< 64 MiB", 60, 40, "better"},
		{"0 lost at 20 k/s", 0, 0, ""},
		{"0 lost at 20 k/s", 0, 12, "worse"},
	} {
		_, got := judge(Verdict{Goal: c.goal, Value: c.before}, Verdict{Goal: c.goal, Value: c.at}, 0.15)
		if got != c.want {
			t.Errorf("%s %g → %g: %q, want %q", c.goal, c.before, c.at, got, c.want)
		}
	}
}

// TestCommittedPrevious: the committed result that make bench compares with can be read.
func TestCommittedPrevious(t *testing.T) {
	for _, f := range []string{"../../BENCHMARKS.json", "../../BENCHMARKS.md"} {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		r, _, err := readPrevious(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(r.Figures) == 0 {
			t.Fatalf("%s: no figures", f)
		}
		return
	}
	t.Fatal("no committed result: BENCHMARKS.json and BENCHMARKS.md are both missing")
}

// TestParseMeasured: each unit bench records is read in its base unit.
func TestParseMeasured(t *testing.T) {
	for _, tt := range []struct {
		in   string
		v    float64
		unit string
	}{
		{"731 ns", 731, "ns"},
		{"1.50 µs", 1500, "ns"},
		{"264 ms wall, 3 runs", 264e6, "ns"},
		{"2 s", 2e9, "ns"},
		{"1.266×", 1.266, "×"},
		{"1.75 M/s (events/cpu-s)", 1.75e6, "/s"},
		{"20.0 k/s", 20e3, "/s"},
		{"60.5 MB (B/op)", 60.5e6, "B"},
		{"2 MiB", 2 << 20, "B"},
		{"512 B", 512, "B"},
		{"0 lost of 1000", 0, "events lost"},
		{"42", 42, ""},
	} {
		v, unit, ok := parseMeasured(tt.in)
		if !ok || math.Abs(v-tt.v) > 1e-9*math.Abs(tt.v) || unit != tt.unit {
			t.Errorf("parseMeasured(%q) = %v %q %v, want %v %q", tt.in, v, unit, ok, tt.v, tt.unit)
		}
	}
	if _, _, ok := parseMeasured("n/a"); ok {
		t.Error("parseMeasured(n/a) is ok")
	}
}
