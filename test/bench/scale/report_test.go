package scale

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/reconscope/reconscope/test/bench/verdict"
)

// spread is a median with its min and max.
type spread struct{ med, lo, hi float64 }

// spreadOf is the spread of the values of xs that are numbers (NaN: not measured).
func spreadOf(xs []float64) spread {
	s := slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	sort.Float64s(s)
	if len(s) == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN()}
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{med, s[0], s[len(s)-1]}
}

func (s spread) format(f func(float64) string) string {
	if math.IsNaN(s.med) {
		return "—" // nothing measured
	}
	if s.lo == s.hi {
		return f(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.lo), f(s.hi))
}

func dur(sec float64) string {
	if math.IsNaN(sec) {
		return "—"
	}
	return time.Duration(sec * float64(time.Second)).Round(roundTo(sec)).String()
}

func roundTo(sec float64) time.Duration {
	switch {
	case sec >= 1:
		return time.Millisecond
	case sec >= 1e-3:
		return time.Microsecond
	default:
		return time.Nanosecond
	}
}

func pct(x float64) string   { return fmt.Sprintf("%.2f%%", 100*x) }
func ratio(x float64) string { return fmt.Sprintf("%.3f×", x) }
func mib(x float64) string   { return fmt.Sprintf("%.1f MiB", x/(1<<20)) }
func num(x float64) string   { return fmt.Sprintf("%.0f", x) }

// intro is the text before the tables of section 5 of BENCHMARKS.md.
func intro(cfg config) string {
	return fmt.Sprintf("Command: `go test -run '^$' -bench BenchmarkAtScale -benchtime 1x ./test/bench/scale` "+
		"(%d Deployments; %d controllers, %d ConfigMaps; %d rounds; %s idle)\n\n", cfg.deployments, cfg.controllers, cfg.configMaps, cfg.rounds, cfg.idle) +
		`Two real controllers against a real kube-apiserver and etcd, each untraced and traced by
` + "`reconscope-agent trace --pid`" + ` (attached when a cycle starts, stopped when it ends), side by side: a round
runs one cycle of each kind, in an order that rotates between rounds; ratios are taken within
each round, then their median. Traced runs as users run it (` + "`--detail reconcile`" + `, the default:
the reconciles' own probes, their cache reads' objects and their queue adds; no call, no goroutine
probe), with ` + "`--detail calls`" + ` (calls, and goroutine inheritance at newproc's calls), and with
` + "`--detail calls --goroutine-inheritance=off`" + ` (no goroutine probe).
A cycle warms up (one object reconciled, and traced, its span
written), runs the workload's first step (creations), leaves the controller idle for ` + cfg.idle.String() + `
while it watches the objects, then runs the other steps; after each step it waits until the
controller's queues have been quiet for a second.

- **reconciles** are the controller's own count: the samples of client-go's
  workqueue_work_duration_seconds (one per item processed: a sync handler call, a Reconcile);
- **CPU per reconcile** is the controller's CPU time (user + system, /proc/PID/stat) during the
  steps, over those reconciles; the idle part is not in it;
- **p50 / p99** are its reconcile durations estimated from that histogram the way Prometheus's
  histogram_quantile does: from its native buckets (9 % wide) where the controller keeps them
  (controller-runtime), else from its classic buckets (powers of 10, so coarse: kube-controller-manager);
- **idle** is its CPU time over the idle part's wall time, as a share of one core (the CPU clock
  counts in ticks of 10 ms: a difference below ` + pct(0.01/cfg.idle.Seconds()) + ` is within one tick);
- **goroutines created** are the controller's own count (its ` + "`" + goroutinesCreated + "`" + `, Go's
  /sched/goroutines-created, "—" where it does not serve it) during the steps over their
  reconciles, and while idle per second; **joining a span** are the goroutines started inside a
  reconcile as the agent counts them, over the cycle's reconciles;
- the agent's CPU per reconcile and peak RSS (VmHWM) are those of the whole trace process;
  spans per reconcile are the JSON lines it wrote over the controller's reconciles;
- **probe hits per reconcile** are the kernel's count of probe hits in the controller over the
  whole cycle (warm-up, steps and idle part: informer queue adds included) over its reconciles
  in the steps and the idle part;
- **added per goroutine** is the controller's CPU per reconcile traced with goroutine probes
  minus traced without, over the goroutines it created per reconcile ("—" where that is less
  than one).

`
}

// report renders w's part of section 5 and its budget checks.
func report(cfg config, w workload, results []cycleResult) (string, []verdict.Verdict) {
	var sb strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	p("### %s\n\n", w.title)

	type agg struct {
		reconciles, cpuPer, p50, p99, idle, created, idleCreated, inherited, agentCPU, hwm, spansPer, lost, hits []float64
	}
	by := map[variant]*agg{}
	perRound := map[int]map[variant]cycleResult{}
	for _, r := range results {
		a := by[r.variant]
		if a == nil {
			a = &agg{}
			by[r.variant] = a
		}
		c := r.churn
		a.reconciles = append(a.reconciles, float64(c.reconciles))
		a.cpuPer = append(a.cpuPer, cpuPer(c))
		a.p50 = append(a.p50, quantile(0.5, c.buckets))
		a.p99 = append(a.p99, quantile(0.99, c.buckets))
		a.idle = append(a.idle, idleShare(r))
		if c.created && r.idle.created {
			a.created = append(a.created, createdPer(c))
			a.idleCreated = append(a.idleCreated, float64(r.idle.goroutines)/r.idle.wall.Seconds())
		}
		if r.variant.traced() {
			all := float64(max(c.reconciles+r.idle.reconciles, 1))
			a.agentCPU = append(a.agentCPU, (c.agentCPU+r.idle.agentCPU).Seconds()/float64(max(c.reconciles, 1)))
			a.hwm = append(a.hwm, float64(r.agentHWM))
			a.spansPer = append(a.spansPer, float64(c.spans+r.idle.spans)/all)
			a.lost = append(a.lost, float64(r.eventsLost))
			if r.hits != noHits {
				a.hits = append(a.hits, float64(r.hits)/all)
			}
			if r.variant != tracedOff && r.variant.detail != "reconcile" {
				a.inherited = append(a.inherited, float64(r.inherited)/all)
			}
		}
		if perRound[r.round] == nil {
			perRound[r.round] = map[variant]cycleResult{}
		}
		perRound[r.round][r.variant] = r
	}
	f3 := func(x float64) string { return fmt.Sprintf("%.3f", x) }
	f1 := func(x float64) string { return fmt.Sprintf("%.1f", x) }
	p("| configuration | reconciles per cycle | CPU per reconcile | p50 | p99 | idle CPU (share of a core) | goroutines created per reconcile | goroutines created per second, idle | goroutines joining a span per reconcile | probe hits per reconcile | agent CPU per reconcile | agent peak RSS | spans per reconcile | events lost |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, v := range w.variants {
		a := by[v]
		if a == nil {
			continue
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v.name,
			spreadOf(a.reconciles).format(num), spreadOf(a.cpuPer).format(dur),
			spreadOf(a.p50).format(dur), spreadOf(a.p99).format(dur), spreadOf(a.idle).format(pct),
			spreadOf(a.created).format(f1), spreadOf(a.idleCreated).format(f1), spreadOf(a.inherited).format(f3),
			spreadOf(a.hits).format(f1), spreadOf(a.agentCPU).format(dur), spreadOf(a.hwm).format(mib), spreadOf(a.spansPer).format(f3), spreadOf(a.lost).format(num))
	}

	rounds := make([]int, 0, len(perRound))
	for r := range perRound {
		rounds = append(rounds, r)
	}
	sort.Ints(rounds)
	// within calls f on the cycles of a and b of each round that ran both.
	within := func(a, b variant, f func(x, y cycleResult) float64) spread {
		var xs []float64
		for _, r := range rounds {
			x, okX := perRound[r][a]
			y, okY := perRound[r][b]
			if okX && okY {
				xs = append(xs, f(x, y))
			}
		}
		return spreadOf(xs)
	}
	var tracedVariants []variant
	for _, v := range w.variants {
		if v.traced() && by[v] != nil {
			tracedVariants = append(tracedVariants, v)
		}
	}
	// table prints one row per comparison, one column per variant: f of its cycle and base's,
	// within each round.
	table := func(title string, cols []variant, base variant, rows []comparison) {
		p("| %s |", title)
		for _, v := range cols {
			p(" %s |", v.name)
		}
		p("\n| --- |%s\n", strings.Repeat(" ---: |", len(cols)))
		for _, row := range rows {
			p("| %s |", row.name)
			for _, v := range cols {
				p(" %s |", within(v, base, row.f).format(row.fmt))
			}
			p("\n")
		}
		p("\n")
	}
	p("\n")
	table("traced / untraced, within each round", tracedVariants, untraced, []comparison{
		{"CPU per reconcile", func(t, u cycleResult) float64 { return cpuPer(t.churn) / cpuPer(u.churn) }, ratio},
		{"p50 reconcile duration", func(t, u cycleResult) float64 { return quantile(0.5, t.churn.buckets) / quantile(0.5, u.churn.buckets) }, ratio},
		{"p99 reconcile duration", func(t, u cycleResult) float64 {
			return quantile(0.99, t.churn.buckets) / quantile(0.99, u.churn.buckets)
		}, ratio},
		{fmt.Sprintf("idle CPU added (traced − untraced, share of a core), watching %d objects", w.watched), func(t, u cycleResult) float64 { return idleShare(t) - idleShare(u) }, pct},
	})

	// What the goroutine probes cost: traced with them against traced without, per site choice.
	if by[tracedOff] != nil {
		with := slices.DeleteFunc(slices.Clone(tracedVariants), func(v variant) bool { return v == tracedOff || v.detail == "reconcile" })
		table("goroutine probes: traced with them − traced with `--goroutine-inheritance=off`, within each round", with, tracedOff, []comparison{
			{"CPU per reconcile, with / without", func(t, off cycleResult) float64 { return cpuPer(t.churn) / cpuPer(off.churn) }, ratio},
			{"CPU added per reconcile", func(t, off cycleResult) float64 { return cpuPer(t.churn) - cpuPer(off.churn) }, dur},
			// Where a reconcile starts less than one goroutine, this divides noise by a small
			// number: left out.
			{"CPU added per goroutine created", func(t, off cycleResult) float64 {
				if !t.churn.created || createdPer(t.churn) < 1 {
					return math.NaN()
				}
				return (cpuPer(t.churn) - cpuPer(off.churn)) / createdPer(t.churn)
			}, dur},
			{"idle CPU added (share of a core)", func(t, off cycleResult) float64 { return idleShare(t) - idleShare(off) }, pct},
		})
	}

	idle := within(traced, untraced, func(t, u cycleResult) float64 { return idleShare(t) - idleShare(u) })
	v := verdict.Verdict{
		Figure:   "idle CPU added by tracing: " + strings.SplitN(w.title, " (", 2)[0] + fmt.Sprintf(" watching %d objects", w.watched),
		Goal:     "≤ 1% of a core",
		Measured: idle.format(pct),
		Value:    100 * idle.med,
		Unit:     "%",
		Met:      idle.med <= idleGoal,
	}
	if !v.Met {
		v.Why = "section 5: with nothing changing, the probes still fire for the controller's own background work (informer watches and resyncs, goroutines it starts)"
	}
	return sb.String(), []verdict.Verdict{v}
}

// comparison is a row of a table comparing two variants, cycle by cycle.
type comparison struct {
	name string
	f    func(x, base cycleResult) float64
	fmt  func(float64) string
}

func cpuPer(p phase) float64 { return p.cpu.Seconds() / float64(max(p.reconciles, 1)) }

func createdPer(p phase) float64 { return float64(p.goroutines) / float64(max(p.reconciles, 1)) }

func idleShare(r cycleResult) float64 { return r.idle.cpu.Seconds() / r.idle.wall.Seconds() }
