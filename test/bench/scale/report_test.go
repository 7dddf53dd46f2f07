package scale

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// verdict is one budget check, in the format of test/bench's Verdict (bench summary and bench
// compare read it from the JSON-lines file).
type verdict struct {
	Figure   string  `json:"figure"`
	Goal     string  `json:"goal"`
	Measured string  `json:"measured"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Met      bool    `json:"met"`
	Why      string  `json:"why,omitempty"`
}

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

// report renders section 5 of BENCHMARKS.md and its budget checks.
func report(cfg config, results []cycleResult) (string, []verdict) {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("Command: `go test -run '^$' -bench BenchmarkAtScale -benchtime 1x ./test/bench/scale` "+
		"(%d Deployments, %d rounds, %s idle; `test/bench/scale`)\n\n", cfg.deployments, cfg.rounds, cfg.idle)
	w(`The traced process is the test bed's stripped kube-controller-manager (built with -ldflags=-s -w
like release builds) running its deployment and replicaset controllers against a real
kube-apiserver and etcd, with --kube-api-qps=300 so that its client's rate limiter does not pace
the work. Each cycle creates %d Deployments of 3 replicas in a namespace of its own and waits
for their %d pods (the replicaset controller creates them; no scheduler or kubelet runs, so they
stay Pending), leaves kube-controller-manager idle for %s while it watches those %d objects,
scales every Deployment to 1 and waits for the pods to go, then deletes the Deployments,
ReplicaSets and pods and waits for its queues to be quiet. A round runs one cycle untraced and
one traced by `+"`reconscope-agent trace --pid`"+` (which attaches when the cycle starts and stops when it
ends), in an order that alternates between rounds; ratios are taken within each round, then their
median.

- **reconciles** are kube-controller-manager's own count: its workqueue_work_duration_seconds
  samples of the deployment and replicaset queues (one per sync handler call);
- **CPU per reconcile** is kube-controller-manager's CPU time (user + system, /proc/PID/stat)
  during the create, scale and delete parts, over those reconciles;
- **p50 / p99** are its reconcile durations estimated from that histogram's buckets (powers of 10:
  coarse) the way Prometheus's histogram_quantile does;
- **idle** is its CPU time over the idle part's wall time, as a share of one core;
- the agent's CPU per reconcile and peak RSS (VmHWM) are those of the whole trace process.

`, cfg.deployments, 3*cfg.deployments, cfg.idle, 5*cfg.deployments+2)

	type agg struct {
		reconciles, cpuPer, p50, p99, idle, agentCPU, hwm, spansPer, lost []float64
	}
	by := map[bool]*agg{false: {}, true: {}}
	perRound := map[int]map[bool]cycleResult{}
	for _, r := range results {
		a := by[r.traced]
		c := r.churn
		per := c.kcmCPU.Seconds() / float64(max(c.reconciles, 1))
		a.reconciles = append(a.reconciles, float64(c.reconciles))
		a.cpuPer = append(a.cpuPer, per)
		a.p50 = append(a.p50, quantile(0.5, c.buckets))
		a.p99 = append(a.p99, quantile(0.99, c.buckets))
		a.idle = append(a.idle, r.idle.kcmCPU.Seconds()/r.idle.wall.Seconds())
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
	w("| configuration | reconciles per cycle | kube-controller-manager CPU per reconcile | p50 | p99 | idle CPU (share of a core) | agent CPU per reconcile | agent peak RSS | spans per reconcile | events lost |\n")
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
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
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name,
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
		perU := u.churn.kcmCPU.Seconds() / float64(max(u.churn.reconciles, 1))
		perT := t.churn.kcmCPU.Seconds() / float64(max(t.churn.reconciles, 1))
		cpuRatio = append(cpuRatio, perT/perU)
		p50Ratio = append(p50Ratio, quantile(0.5, t.churn.buckets)/quantile(0.5, u.churn.buckets))
		p99Ratio = append(p99Ratio, quantile(0.99, t.churn.buckets)/quantile(0.99, u.churn.buckets))
		idleAdded = append(idleAdded, t.idle.kcmCPU.Seconds()/t.idle.wall.Seconds()-u.idle.kcmCPU.Seconds()/u.idle.wall.Seconds())
	}
	w("\n| traced / untraced, within each round | median (min–max) |\n| --- | ---: |\n")
	w("| kube-controller-manager CPU per reconcile | %s |\n", spreadOf(cpuRatio).format(ratio))
	w("| p50 reconcile duration | %s |\n", spreadOf(p50Ratio).format(ratio))
	w("| p99 reconcile duration | %s |\n", spreadOf(p99Ratio).format(ratio))
	w("| idle CPU added (traced − untraced, share of a core) | %s |\n\n", spreadOf(idleAdded).format(pct))
	w("The CPU clock counts in ticks of 10 ms (USER_HZ): an idle figure below about %s is within one tick.\n\n",
		pct(0.01/cfg.idle.Seconds()))

	idle := spreadOf(idleAdded)
	v := verdict{
		Figure:   "idle kube-controller-manager CPU added by tracing (watching its objects, no change)",
		Goal:     "≤ 1% of a core",
		Measured: idle.format(pct),
		Value:    100 * idle.med,
		Unit:     "%",
		Met:      idle.med <= idleGoal,
	}
	if !v.Met {
		v.Why = "section 5: while nothing changes, the probes still fire for kube-controller-manager's own background work (informer watches, goroutines)"
	}
	return sb.String(), []verdict{v}
}
