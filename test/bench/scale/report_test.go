package scale

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/reconscope/reconscope/test/bench/verdict"
)

// spread is a median with its min and max.
type spread struct{ med, lo, hi float64 }

func spreadOf(xs []float64) spread {
	s := append([]float64(nil), xs...)
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
runs one cycle of each kind, in an order that alternates between rounds; ratios are taken within
each round, then their median. A cycle warms up (one object reconciled, and traced, its span
written), runs the workload's first step (creations), leaves the controller idle for ` + cfg.idle.String() + `
while it watches the objects, then runs the other steps; after each step it waits until the
controller's queues have been quiet for a second.

- **reconciles** are the controller's own count: the samples of client-go's
  workqueue_work_duration_seconds (one per item processed: a sync handler call, a Reconcile);
- **CPU per reconcile** is the controller's CPU time (user + system, /proc/PID/stat) during the
  steps, over those reconciles; the idle part is not in it;
- **p50 / p99** are its reconcile durations estimated from that histogram (buckets are powers of
  10, so coarse) the way Prometheus's histogram_quantile does;
- **idle** is its CPU time over the idle part's wall time, as a share of one core (the CPU clock
  counts in ticks of 10 ms: a difference below ` + pct(0.01/cfg.idle.Seconds()) + ` is within one tick);
- the agent's CPU per reconcile and peak RSS (VmHWM) are those of the whole trace process;
  spans per reconcile are the JSON lines it wrote over the controller's reconciles.

`
}

// report renders w's part of section 5 and its budget checks.
func report(cfg config, w workload, results []cycleResult) (string, []verdict.Verdict) {
	var sb strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	p("### %s\n\n", w.title)

	type agg struct {
		reconciles, cpuPer, p50, p99, idle, agentCPU, hwm, spansPer, lost []float64
	}
	by := map[bool]*agg{false: {}, true: {}}
	perRound := map[int]map[bool]cycleResult{}
	for _, r := range results {
		a := by[r.traced]
		c := r.churn
		a.reconciles = append(a.reconciles, float64(c.reconciles))
		a.cpuPer = append(a.cpuPer, cpuPer(c))
		a.p50 = append(a.p50, quantile(0.5, c.buckets))
		a.p99 = append(a.p99, quantile(0.99, c.buckets))
		a.idle = append(a.idle, idleShare(r))
		if r.traced {
			a.agentCPU = append(a.agentCPU, (c.agentCPU+r.idle.agentCPU).Seconds()/float64(max(c.reconciles, 1)))
			a.hwm = append(a.hwm, float64(r.agentHWM))
			a.spansPer = append(a.spansPer, float64(c.spans+r.idle.spans)/float64(max(c.reconciles+r.idle.reconciles, 1)))
			a.lost = append(a.lost, float64(r.eventsLost))
		}
		if perRound[r.round] == nil {
			perRound[r.round] = map[bool]cycleResult{}
		}
		perRound[r.round][r.traced] = r
	}
	p("| configuration | reconciles per cycle | CPU per reconcile | p50 | p99 | idle CPU (share of a core) | agent CPU per reconcile | agent peak RSS | spans per reconcile | events lost |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, traced := range []bool{false, true} {
		a := by[traced]
		name, agentCPU, hwmS, spans, lost := "untraced", "—", "—", "—", "—"
		if traced {
			name = "traced by reconscope"
			agentCPU = spreadOf(a.agentCPU).format(dur)
			hwmS = spreadOf(a.hwm).format(mib)
			spans = spreadOf(a.spansPer).format(func(x float64) string { return fmt.Sprintf("%.3f", x) })
			lost = spreadOf(a.lost).format(num)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name,
			spreadOf(a.reconciles).format(num), spreadOf(a.cpuPer).format(dur),
			spreadOf(a.p50).format(dur), spreadOf(a.p99).format(dur), spreadOf(a.idle).format(pct),
			agentCPU, hwmS, spans, lost)
	}

	var cpuRatio, p50Ratio, p99Ratio, idleAdded []float64
	rounds := make([]int, 0, len(perRound))
	for r := range perRound {
		rounds = append(rounds, r)
	}
	sort.Ints(rounds)
	for _, r := range rounds {
		u, okU := perRound[r][false]
		t, okT := perRound[r][true]
		if !okU || !okT {
			continue
		}
		cpuRatio = append(cpuRatio, cpuPer(t.churn)/cpuPer(u.churn))
		p50Ratio = append(p50Ratio, quantile(0.5, t.churn.buckets)/quantile(0.5, u.churn.buckets))
		p99Ratio = append(p99Ratio, quantile(0.99, t.churn.buckets)/quantile(0.99, u.churn.buckets))
		idleAdded = append(idleAdded, idleShare(t)-idleShare(u))
	}
	p("\n| traced / untraced, within each round | median (min–max) |\n| --- | ---: |\n")
	p("| CPU per reconcile | %s |\n", spreadOf(cpuRatio).format(ratio))
	p("| p50 reconcile duration | %s |\n", spreadOf(p50Ratio).format(ratio))
	p("| p99 reconcile duration | %s |\n", spreadOf(p99Ratio).format(ratio))
	p("| idle CPU added (traced − untraced, share of a core), watching %d objects | %s |\n\n", w.watched, spreadOf(idleAdded).format(pct))

	idle := spreadOf(idleAdded)
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

func cpuPer(p phase) float64 { return p.cpu.Seconds() / float64(max(p.reconciles, 1)) }

func idleShare(r cycleResult) float64 { return r.idle.cpu.Seconds() / r.idle.wall.Seconds() }
