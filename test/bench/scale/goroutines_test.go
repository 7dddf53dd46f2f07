package scale

import (
	"strings"
	"testing"
	"time"
)

// TestReportGoroutineCost: the section says, for each way of tracing, what it adds over
// untraced, and what the goroutine probes add per reconcile and per goroutine created (traced
// with them against traced without, within the round).
func TestReportGoroutineCost(t *testing.T) {
	cycle := func(v variant, cpu time.Duration, goroutines uint64) cycleResult {
		churn := phase{wall: 10 * time.Second, cpu: cpu, reconciles: 1000, goroutines: goroutines, created: true,
			buckets: map[float64]uint64{0.01: 1000}}
		idle := phase{wall: 20 * time.Second, cpu: 100 * time.Millisecond, goroutines: 200, created: true}
		return cycleResult{variant: v, churn: churn, idle: idle, inherited: 2000, hits: 3000}
	}
	w := workload{title: "kcm", watched: 7, variants: []variant{untraced, traced, tracedOff, tracedOld, tracedReconcile}}
	md, _ := report(config{}, w, []cycleResult{
		cycle(untraced, time.Second, 10000),
		cycle(traced, 1500*time.Millisecond, 10000),    // 0.5 ms per reconcile over untraced
		cycle(tracedOff, 1250*time.Millisecond, 10000), // 0.25 ms
		cycle(tracedOld, 2000*time.Millisecond, 10000), // 1 ms
		cycle(tracedReconcile, 1100*time.Millisecond, 10000),
	})
	for _, want := range []string{
		"| traced / untraced, within each round | traced, --detail calls | traced, --goroutine-inheritance=off | traced, goroutine creation at newproc1's entry and RETs (before) | traced by reconscope (default, --detail reconcile) |",
		"| CPU per reconcile | 1.500× | 1.250× | 2.000× | 1.100× |",
		// 3000 probe hits over 1000 reconciles; no goroutine joins a span at detail reconcile
		"| traced by reconscope (default, --detail reconcile) | 1000 | 1.1ms | 5ms | 9.9ms | 0.50% | 10.0 | 10.0 | — | 3.0 |",
		// 10 goroutines created per reconcile, and 10 per second while idle
		"| untraced | 1000 | 1ms | 5ms | 9.9ms | 0.50% | 10.0 | 10.0 | — |",
		"| traced, --goroutine-inheritance=off | 1000 | 1.25ms | 5ms | 9.9ms | 0.50% | 10.0 | 10.0 | — |",
		"| traced, --detail calls | 1000 | 1.5ms | 5ms | 9.9ms | 0.50% | 10.0 | 10.0 | 2.000 |",
		// the goroutine probes' cost: the variants with them against tracedOff
		"| goroutine probes: traced with them − traced with `--goroutine-inheritance=off`, within each round | traced, --detail calls | traced, goroutine creation at newproc1's entry and RETs (before) |",
		"| CPU added per reconcile | 250µs | 750µs |",
		"| CPU added per goroutine created | 25µs | 75µs |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

// TestReportGoroutineCostFewGoroutines: where a reconcile starts less than one goroutine, the
// CPU added per goroutine is not divided out (it would be noise over a small number).
func TestReportGoroutineCostFewGoroutines(t *testing.T) {
	cycle := func(v variant, cpu time.Duration) cycleResult {
		return cycleResult{variant: v, churn: phase{wall: time.Second, cpu: cpu, reconciles: 1000, goroutines: 200, created: true},
			idle: phase{wall: time.Second, created: true}}
	}
	w := workload{title: "manager", variants: []variant{untraced, traced, tracedOff}}
	md, _ := report(config{}, w, []cycleResult{cycle(untraced, time.Second), cycle(traced, 1500*time.Millisecond), cycle(tracedOff, 1250*time.Millisecond)})
	if want := "| CPU added per goroutine created | — |"; !strings.Contains(md, want) {
		t.Errorf("the report lacks %q:\n%s", want, md)
	}
}
