package scale

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/bench/verdict"
	"github.com/reconscope/reconscope/test/testenv"
)

// idleGoal is the budget of issue 17: at most 1% of a CPU added to an idle kube-controller-manager.
const idleGoal = 0.01

// variant is how a cycle runs the target: untraced, or traced by reconscope-agent with one
// --goroutine-inheritance and one --detail.
type variant struct {
	name    string // as the tables say it
	inherit string // the agent's --goroutine-inheritance; "": untraced
	detail  string // the agent's --detail; "": its default
	// agent is the reconscope-agent that traces: "" is the one built here (config.agent);
	// another is a baseline to compare with (RECONSCOPE_BENCH_SCALE_BASELINE_AGENT).
	agent string
}

var (
	untraced = variant{name: "untraced"}
	// traced is the agent at --detail calls (the default until issue 28): its calls and the
	// goroutine probes, goroutine creation seen at newproc's calls.
	traced    = variant{name: "traced, --detail calls", inherit: "auto", detail: "calls"}
	tracedOff = variant{name: "traced, --goroutine-inheritance=off", inherit: "off", detail: "calls"}
	// tracedOld sees goroutine creation where it did before: newproc1's entry and RETs.
	tracedOld = variant{name: "traced, goroutine creation at newproc1's entry and RETs (before)", inherit: "newproc1", detail: "calls"}
	// tracedReconcile is the agent as users run it (the default, --detail reconcile): the
	// reconciles, their cache reads' objects and queue adds; no call, no goroutine probe.
	tracedReconcile = variant{name: "traced by reconscope (default, --detail reconcile)", inherit: "auto", detail: "reconcile"}
)

func (v variant) traced() bool { return v.inherit != "" }

// key names the variant in RECONSCOPE_BENCH_SCALE_VARIANTS: untraced, baseline (another
// agent), its --detail when it sets one other than calls, else its --goroutine-inheritance
// (auto, off, newproc1).
func (v variant) key() string {
	switch {
	case !v.traced():
		return "untraced"
	case v.agent != "":
		return "baseline"
	case v.detail != "" && v.detail != "calls":
		return v.detail
	}
	return v.inherit
}

type config struct {
	deployments int
	configMaps  int
	controllers int
	rounds      int
	idle        time.Duration
	agent       string
	// variants, when not nil, keeps only the variants named (variant.key).
	variants []string
	// pprof, when set, is a folder where each traced cycle's agent profiles go (profiler).
	pprof string
	// baseline, when set, is another reconscope-agent (an earlier build) that also traces,
	// as users run it, in each round: the variant "baseline".
	baseline string
	// kcmAll: kube-controller-manager runs all its default controllers, not only deployment
	// and replicaset; its items are counted over every work queue.
	kcmAll bool
}

// target is the traced process and how to read its own count of reconciles.
type target struct {
	pid int
	// metrics is its Prometheus endpoint (http or https, self-signed accepted).
	metrics string
	// queues are the workqueue names (workqueue_work_duration_seconds{name}) of the controllers
	// measured; nil: all.
	queues []string
}

// workload drives one cycle's objects in a namespace of their own.
type workload struct {
	title  string
	target target
	// warmup creates one object and waits until it is reconciled.
	warmup func(ns string) error
	// steps run in order; each returns once the controllers have done the work it caused.
	// The idle part comes after the first.
	steps []func(ns string, before sample) error
	// watched is how many objects the controllers watch during the idle part.
	watched int
	// variants are the ways the target runs in each round, untraced first.
	variants []variant
}

// sample is what is read at the edges of a part.
type sample struct {
	at        time.Time
	cpu       time.Duration // the traced process
	agentCPU  time.Duration
	count     uint64             // reconciles
	buckets   map[float64]uint64 // their cumulative duration histogram
	agentSpan int                // spans the agent has written
	// goroutines the target has created (its go_sched_goroutines_created_goroutines_total,
	// Go 1.26+); created says whether it serves that metric.
	goroutines uint64
	created    bool
}

// phase is the difference between two samples.
type phase struct {
	wall       time.Duration
	cpu        time.Duration
	agentCPU   time.Duration
	reconciles uint64
	buckets    map[float64]uint64
	spans      int
	goroutines uint64 // created by the target
	created    bool   // the target counts the goroutines it creates
}

type cycleResult struct {
	round      int
	variant    variant
	churn      phase // every step
	idle       phase
	agentHWM   uint64 // bytes
	eventsLost uint64
	hits       uint64 // probe hits in the target over the whole cycle (the kernel's count)
	inherited  uint64 // goroutines started inside a reconcile, over the whole cycle (the agent's count)
}

func BenchmarkAtScale(b *testing.B) {
	cfg := config{
		deployments: envInt(b, "RECONSCOPE_BENCH_SCALE_DEPLOYMENTS", 500),
		configMaps:  envInt(b, "RECONSCOPE_BENCH_SCALE_CONFIGMAPS", 100),
		controllers: envInt(b, "RECONSCOPE_BENCH_SCALE_CONTROLLERS", 50),
		rounds:      envInt(b, "RECONSCOPE_BENCH_SCALE_ROUNDS", 2),
		idle:        envDuration(b, "RECONSCOPE_BENCH_SCALE_IDLE", 20*time.Second),
		agent:       os.Getenv("RECONSCOPE_BENCH_AGENT"),
		variants:    envList("RECONSCOPE_BENCH_SCALE_VARIANTS"),
		pprof:       os.Getenv("RECONSCOPE_BENCH_SCALE_PPROF"),
		baseline:    os.Getenv("RECONSCOPE_BENCH_SCALE_BASELINE_AGENT"),
		// RECONSCOPE_BENCH_SCALE_KCM_ALL=1: kube-controller-manager runs all its default
		// controllers (--controllers='*'), its items counted over every work queue.
		kcmAll: os.Getenv("RECONSCOPE_BENCH_SCALE_KCM_ALL") == "1",
	}
	kcmControllers := []string{"deployment", "replicaset"}
	if cfg.kcmAll {
		kcmControllers = []string{"*"}
	}
	if os.Geteuid() != 0 {
		bpftest.SkipOrFail(b, "needs root: the traced runs attach eBPF uprobes")
	}
	if cfg.agent == "" {
		cfg.agent = testkit.Build(b, "./cmd/agent")
	}
	env := testenv.Start(b, testenv.Options{
		ControllerManager:         kcmControllers,
		StrippedControllerManager: true,
		ControllerManagerFlags: []string{
			// kube-controller-manager's default client limit (20 requests/s) would make the
			// workload's thousands of pod creations wait in its rate limiter, not in its work.
			"--kube-api-qps=300", "--kube-api-burst=600",
			"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		},
	})
	var md strings.Builder
	var verdicts []verdict.Verdict
	only := os.Getenv("RECONSCOPE_BENCH_SCALE_ONLY") // kcm or manager: that workload alone
	var workloads []workload
	if only != "manager" {
		workloads = append(workloads, kcmWorkload(b, env, cfg))
	}
	if only != "kcm" {
		manager := testkit.Build(b, "./test/fixtures/scripted-controller")
		workloads = append(workloads, managerWorkload(b, env, cfg, manager))
	}
	for _, w := range workloads {
		if cfg.baseline != "" {
			w.variants = append(w.variants, variant{name: "traced (default), baseline agent " + filepath.Base(cfg.baseline), inherit: "auto", agent: cfg.baseline})
		}
		w.variants = slices.DeleteFunc(w.variants, func(v variant) bool {
			return cfg.variants != nil && !slices.Contains(cfg.variants, v.key())
		})
		var results []cycleResult
		for r := 0; r < cfg.rounds; r++ {
			// The order rotates from round to round.
			n := len(w.variants)
			for i := range n {
				v := w.variants[(i+r)%n]
				res := runCycle(b, env, cfg, w, r, v)
				b.Logf("%s, round %d, %s: %d reconciles, CPU %s, %d goroutines created; idle CPU %s in %s; agent CPU %s (%s of it idle), spans %d, goroutines inherited %d",
					w.title, r, v.name, res.churn.reconciles, res.churn.cpu, res.churn.goroutines, res.idle.cpu, res.idle.wall.Round(time.Millisecond),
					res.churn.agentCPU+res.idle.agentCPU, res.idle.agentCPU, res.churn.spans+res.idle.spans, res.inherited)
				results = append(results, res)
			}
		}
		part, vs := report(cfg, w, results)
		md.WriteString(part)
		verdicts = append(verdicts, vs...)
	}
	b.StopTimer()
	b.Log("\n" + md.String())
	if out := os.Getenv("RECONSCOPE_BENCH_SCALE_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(intro(cfg)+md.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if file := os.Getenv("RECONSCOPE_BENCH_VERDICTS"); file != "" {
		must(b, verdict.Append(file, verdicts...))
	}
}

// kcmWorkload: cfg.deployments Deployments of 3 replicas created (and their pods: no scheduler or
// kubelet runs, so they stay Pending), scaled to 1, then deleted with their ReplicaSets and pods
// (this control plane runs no garbage collector).
func kcmWorkload(b *testing.B, env *testenv.Env, cfg config) workload {
	ctx := context.Background()
	n := cfg.deployments
	pods := func(ns string, want int) error {
		testkit.WaitFor(b, fmt.Sprintf("%d pods", want), 10*time.Minute, func() (bool, string) {
			got := countPods(b, env, ns)
			return got == want, fmt.Sprintf("%d pods", got)
		})
		return nil
	}
	t := target{pid: env.ControllerManagerPID, metrics: env.ControllerManagerURL + "/metrics", queues: []string{"deployment", "replicaset"}}
	title := fmt.Sprintf("kube-controller-manager (stripped; deployment and replicaset controllers), %d Deployments × 3 replicas", n)
	if cfg.kcmAll {
		t.queues = nil // every queue's items
		title = fmt.Sprintf("kube-controller-manager (stripped; all its default controllers, every work queue's items), %d Deployments × 3 replicas", n)
	}
	return workload{
		title:  title,
		target: t,
		warmup: func(ns string) error {
			if err := env.Client.Create(ctx, deployment(ns, "warmup", 1)); err != nil {
				return err
			}
			return pods(ns, 1)
		},
		steps: []func(string, sample) error{
			func(ns string, _ sample) error {
				if err := parallel(n, func(i int) error {
					return env.Client.Create(ctx, deployment(ns, fmt.Sprintf("d%04d", i), 3))
				}); err != nil {
					return err
				}
				return pods(ns, 3*n+1)
			},
			func(ns string, _ sample) error {
				patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":1}}`))
				if err := parallel(n, func(i int) error {
					d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("d%04d", i)}}
					return env.Client.Patch(ctx, d, patch)
				}); err != nil {
					return err
				}
				return pods(ns, n+1)
			},
			func(ns string, _ sample) error {
				for _, obj := range []client.Object{&appsv1.Deployment{}, &appsv1.ReplicaSet{}, &corev1.Pod{}} {
					if err := env.Client.DeleteAllOf(ctx, obj, client.InNamespace(ns)); err != nil {
						return err
					}
				}
				testkit.WaitFor(b, "the namespace empty", 10*time.Minute, func() (bool, string) {
					var rs appsv1.ReplicaSetList
					must(b, env.Client.List(ctx, &rs, client.InNamespace(ns)))
					got := countPods(b, env, ns)
					return got == 0 && len(rs.Items) == 0, fmt.Sprintf("%d pods, %d ReplicaSets", got, len(rs.Items))
				})
				return nil
			},
		},
		watched: 5*n + 2, // Deployments, ReplicaSets and pods, with the warm-up's
		// client-go's slowStartBatch creates and deletes pods from goroutines the sync handler
		// starts: what goroutine inheritance costs, against its sites before and without it.
		// (tracedOld, goroutine creation at the sites used before: BENCHMARKS.md's earlier runs.)
		variants: []variant{untraced, traced, tracedOff, tracedReconcile},
	}
}

// managerWorkload: a controller-runtime manager (test/fixtures/scripted-controller) hosting
// cfg.controllers controllers that each reconcile every ConfigMap (one cache Get of it per
// reconcile); cfg.configMaps ConfigMaps created, updated, then deleted.
func managerWorkload(b *testing.B, env *testenv.Env, cfg config, bin string) workload {
	ctx := context.Background()
	n, per := cfg.configMaps, cfg.controllers
	cmd := exec.Command(bin, "--kubeconfig", env.Kubeconfig, "--controllers", strconv.Itoa(per),
		"--metrics-bind-address", "127.0.0.1:0", "--controller-name", "scale")
	p := testenv.StartProcess(b, "scripted-controller", cmd)
	var addr string
	testkit.WaitFor(b, "the manager's metrics address", time.Minute, func() (bool, string) {
		raw, _ := os.ReadFile(p.StderrPath())
		m := regexp.MustCompile(`metrics listening on (\S+)`).FindSubmatch(raw)
		if m != nil {
			addr = string(m[1])
		}
		return m != nil, "no 'metrics listening on' line yet"
	})
	t := target{pid: p.PID(), metrics: "http://" + addr + "/metrics"}
	configMap := func(ns, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{"scripted.reconscope.io/script": "get:configmap/" + name}}}
	}
	// Each change of a ConfigMap is one reconcile of each controller.
	reconciled := func(before sample, want uint64) error {
		testkit.WaitFor(b, fmt.Sprintf("%d reconciles", want), 10*time.Minute, func() (bool, string) {
			c, _, _, _, err := scrape(t)
			if err != nil {
				return false, err.Error()
			}
			return c-before.count >= want, fmt.Sprintf("%d of %d reconciles", c-before.count, want)
		})
		return nil
	}
	return workload{
		title:  fmt.Sprintf("a controller-runtime manager with %d controllers (test/fixtures/scripted-controller), %d ConfigMaps", per, n),
		target: t,
		warmup: func(ns string) error {
			before, err := sampleOf(t, nil)
			if err != nil {
				return err
			}
			if err := env.Client.Create(ctx, configMap(ns, "warmup")); err != nil {
				return err
			}
			return reconciled(before, uint64(per))
		},
		steps: []func(string, sample) error{
			func(ns string, before sample) error {
				if err := parallel(n, func(i int) error {
					return env.Client.Create(ctx, configMap(ns, fmt.Sprintf("c%04d", i)))
				}); err != nil {
					return err
				}
				return reconciled(before, uint64(n*per))
			},
			func(ns string, before sample) error {
				patch := client.RawPatch("application/merge-patch+json", []byte(`{"data":{"changed":"yes"}}`))
				if err := parallel(n, func(i int) error {
					return env.Client.Patch(ctx, configMap(ns, fmt.Sprintf("c%04d", i)), patch)
				}); err != nil {
					return err
				}
				return reconciled(before, uint64(n*per))
			},
			func(ns string, before sample) error {
				if err := env.Client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns)); err != nil {
					return err
				}
				return reconciled(before, uint64((n+1)*per))
			},
		},
		watched:  n + 1,
		variants: []variant{untraced, traced, tracedOff, tracedReconcile},
	}
}

// runCycle runs w's warm-up, its first step, the idle part, and its other steps in a namespace of
// their own, and measures them. Traced, reconscope-agent traces the target throughout the cycle.
func runCycle(b *testing.B, env *testenv.Env, cfg config, w workload, round int, v variant) cycleResult {
	b.Helper()
	mode := "untraced"
	if v.traced() {
		mode = "traced-" + v.inherit + v.detail
	}
	agentBin := cfg.agent
	if v.agent != "" {
		mode, agentBin = "baseline", v.agent
	}
	ns := fmt.Sprintf("scale-%d-%d-%s", w.target.pid, round, mode)
	must(b, env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	var agent *testenv.Process
	var prof *profiler
	if v.traced() {
		args := []string{"trace", "--pid", strconv.Itoa(w.target.pid), "--output", "json", "--goroutine-inheritance", v.inherit}
		if v.detail != "" {
			args = append(args, "--detail", v.detail)
		}
		if cfg.pprof != "" {
			prof = newProfiler(b, cfg.pprof, ns)
			args = append(args, "--pprof-addr", prof.addr)
		}
		cmd := exec.Command(agentBin, args...)
		agent = testenv.StartProcess(b, "reconscope-agent-"+ns, cmd)
		testkit.WaitFor(b, "reconscope-agent to attach", 2*time.Minute, func() (bool, string) {
			raw, err := os.ReadFile(agent.StderrPath())
			return err == nil && bytes.Contains(raw, []byte("msg=attached")), "no 'attached' line in its log"
		})
	}
	// Warm up: one object reconciled end to end (and, traced, its span written) before anything
	// is measured.
	must(b, w.warmup(ns))
	if agent != nil {
		testkit.WaitFor(b, "the warm-up's span", time.Minute, func() (bool, string) {
			return spanCount(agent) > 0, "no span from the agent yet"
		})
	}

	take := func() sample {
		s, err := sampleOf(w.target, agent)
		must(b, err)
		return s
	}
	res := cycleResult{round: round, variant: v}
	res.churn.buckets = map[float64]uint64{}
	res.churn.created = true // until a step's samples say the target does not count its goroutines
	if prof != nil {
		prof.start(b)
	}
	for i, step := range w.steps {
		before := take()
		must(b, step(ns, before))
		after := quiesce(b, w.target, agent)
		res.churn = res.churn.plus(diff(before, after))
		if i == 0 {
			time.Sleep(cfg.idle)
			res.idle = diff(after, take())
		}
	}
	if agent != nil {
		if prof != nil {
			prof.finish(b, agent.PID())
		}
		res.agentHWM = hwm(b, agent.PID())
		must(b, syscall.Kill(agent.PID(), syscall.SIGTERM))
		if err := agent.Wait(); err != nil {
			b.Fatalf("reconscope-agent: %v", err)
		}
		res.eventsLost, res.inherited, res.hits = summaryCounts(b, agent.StderrPath(), v)
	}
	return res
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "scale.invalid/none"}}},
			},
		},
	}
}

// parallel runs f(i) for i in [0, n) on 8 workers and returns the first error.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

func countPods(b *testing.B, env *testenv.Env, ns string) int {
	var pods metav1.PartialObjectMetadataList
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	must(b, env.Client.List(context.Background(), &pods, client.InNamespace(ns)))
	return len(pods.Items)
}

// quiesce waits until the target's queues have taken no item for a second, and returns the
// sample taken then.
func quiesce(b *testing.B, t target, agent *testenv.Process) sample {
	last, err := sampleOf(t, agent)
	must(b, err)
	// Not a testkit wait: each turn is a measurement, the count of a second's window.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		s, err := sampleOf(t, agent)
		must(b, err)
		if s.count == last.count {
			return s
		}
		last = s
	}
	b.Fatalf("the queues of process %d still busy after 2 minutes", t.pid)
	return last
}

func sampleOf(t target, agent *testenv.Process) (sample, error) {
	s := sample{at: time.Now()}
	var err error
	if s.cpu, err = cpuTime(t.pid); err != nil {
		return s, err
	}
	if agent != nil {
		if s.agentCPU, err = cpuTime(agent.PID()); err != nil {
			return s, err
		}
		s.agentSpan = spanCount(agent)
	}
	s.count, s.buckets, s.goroutines, s.created, err = scrape(t)
	return s, err
}

func diff(a, z sample) phase {
	p := phase{wall: z.at.Sub(a.at), cpu: z.cpu - a.cpu, agentCPU: z.agentCPU - a.agentCPU,
		spans: z.agentSpan - a.agentSpan, reconciles: z.count - a.count, buckets: map[float64]uint64{},
		goroutines: z.goroutines - a.goroutines, created: a.created && z.created}
	for le, n := range z.buckets {
		p.buckets[le] = n - a.buckets[le]
	}
	return p
}

func (p phase) plus(o phase) phase {
	r := phase{wall: p.wall + o.wall, cpu: p.cpu + o.cpu, agentCPU: p.agentCPU + o.agentCPU,
		reconciles: p.reconciles + o.reconciles, spans: p.spans + o.spans, buckets: map[float64]uint64{},
		goroutines: p.goroutines + o.goroutines, created: p.created && o.created}
	for le, n := range p.buckets {
		r.buckets[le] += n
	}
	for le, n := range o.buckets {
		r.buckets[le] += n
	}
	return r
}

// quantile estimates the q-quantile from cumulative buckets the way Prometheus's
// histogram_quantile does: linear interpolation within the bucket that holds it.
func quantile(q float64, buckets map[float64]uint64) float64 {
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return math.NaN()
	}
	totalN := buckets[les[len(les)-1]]
	if totalN == 0 {
		return math.NaN()
	}
	rank := q * float64(totalN)
	lower, prevCount := 0.0, uint64(0)
	for _, le := range les {
		c := buckets[le]
		if float64(c) >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			in := float64(c - prevCount)
			if in == 0 {
				return le
			}
			return lower + (le-lower)*(rank-float64(prevCount))/in
		}
		lower, prevCount = le, c
	}
	return lower
}

// goroutinesCreated is the Go runtime's /sched/goroutines-created:goroutines (Go 1.26+) as
// Prometheus' Go collector serves it, when the program enables the runtime's scheduler metrics.
const goroutinesCreated = "go_sched_goroutines_created_goroutines_total"

// scrape reads the target's workqueue_work_duration_seconds (client-go's workqueue metrics,
// which kube-controller-manager and controller-runtime both serve: one sample per item
// processed, that is per reconcile): the count and the cumulative buckets, summed over its
// queues; and the goroutines it has created, when it serves goroutinesCreated (ok). It asks for
// the protobuf format, which carries a native histogram where the program keeps one
// (controller-runtime since v0.19 keeps one beside the classic buckets, which are powers of
// ten): then the buckets are the native ones (nativeBuckets), 9 % wide, instead of the classic.
func scrape(t target) (count uint64, buckets map[float64]uint64, goroutines uint64, ok bool, err error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, self-signed
	req, err := http.NewRequest(http.MethodGet, t.metrics, nil)
	if err != nil {
		return 0, nil, 0, false, err
	}
	req.Header.Set("Accept", string(expfmt.FmtProtoDelim)+",text/plain;version=0.0.4;q=0.5")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, 0, false, fmt.Errorf("scrape process %d: %w", t.pid, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, nil, 0, false, fmt.Errorf("scrape process %d: %s %v: %.200s", t.pid, resp.Status, err, body)
	}
	families, err := parseMetrics(body, expfmt.ResponseFormat(resp.Header))
	if err != nil {
		return 0, nil, 0, false, fmt.Errorf("parse the metrics of process %d: %w", t.pid, err)
	}
	fam := families["workqueue_work_duration_seconds"]
	if fam == nil {
		return 0, nil, 0, false, fmt.Errorf("the metrics of process %d have no workqueue_work_duration_seconds", t.pid)
	}
	if g := families[goroutinesCreated]; g != nil && len(g.GetMetric()) == 1 {
		goroutines, ok = uint64(g.GetMetric()[0].GetCounter().GetValue()), true
	}
	buckets = map[float64]uint64{}
	for _, m := range fam.GetMetric() {
		h := m.GetHistogram()
		if h == nil || (t.queues != nil && !slices.Contains(t.queues, label(m, "name"))) {
			continue
		}
		count += h.GetSampleCount()
		buckets[math.Inf(1)] += h.GetSampleCount()
		if h.Schema != nil { // a native histogram (the protobuf format's only)
			for le, n := range nativeBuckets(h) {
				buckets[le] += n
			}
			continue
		}
		for _, bk := range h.GetBucket() {
			if !math.IsInf(bk.GetUpperBound(), 1) { // the text format's le="+Inf" is the count
				buckets[bk.GetUpperBound()] += bk.GetCumulativeCount()
			}
		}
	}
	return count, buckets, goroutines, ok, nil
}

// parseMetrics decodes a scrape's body in its format: the protobuf format (delimited) or text.
func parseMetrics(body []byte, format expfmt.Format) (map[string]*dto.MetricFamily, error) {
	if format.FormatType() != expfmt.TypeProtoDelim {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		return parser.TextToMetricFamilies(bytes.NewReader(body))
	}
	families := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(bytes.NewReader(body), format)
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err == io.EOF {
			return families, nil
		} else if err != nil {
			return nil, err
		}
		families[mf.GetName()] = mf
	}
}

// Native buckets are read into cumulative counts at a fixed set of upper bounds, the same in
// every scrape (so that two scrapes subtract bound by bound, even where the program widened
// its buckets in between): those of schema nativeSchema (factor 2^(1/8), controller-runtime's
// 1.1 rounded as the runtime rounds it) from nativeLowest to nativeHighest. A wider bucket's
// bound is one of them. Durations at or below nativeLowest (the zero bucket's among them) count
// at the lowest bound, those above nativeHighest only in the total (+Inf).
const (
	nativeSchema                = 3
	nativeLowest, nativeHighest = 1e-7, 100.0
)

// nativeBuckets returns the native histogram h's cumulative counts by upper bound (the zero
// bucket and the positive buckets: a duration has no negative ones). Bucket i of schema s
// holds (2^((i-1)/2^s), 2^(i/2^s)]; its count is the running sum of the deltas.
func nativeBuckets(h *dto.Histogram) map[float64]uint64 {
	scale := math.Pow(2, float64(nativeSchema-h.GetSchema())) // grid indices per bucket index
	lo := int(math.Ceil(math.Log2(nativeLowest) * (1 << nativeSchema)))
	hi := int(math.Ceil(math.Log2(nativeHighest) * (1 << nativeSchema)))
	per := map[int]uint64{lo: h.GetZeroCount()}
	deltas := h.GetPositiveDelta()
	i, n, d := 0, int64(0), 0
	for _, span := range h.GetPositiveSpan() {
		i += int(span.GetOffset()) // the first span's offset is its first index
		for range span.GetLength() {
			n += deltas[d]
			d++
			grid := int(math.Ceil(float64(i)*scale - 1e-9)) // the grid bound at or above the bucket's
			per[min(max(grid, lo), hi+1)] += uint64(n)
			i++
		}
	}
	out := make(map[float64]uint64, hi-lo+1)
	var cum uint64
	for j := lo; j <= hi; j++ {
		cum += per[j]
		out[math.Exp2(float64(j)/(1<<nativeSchema))] = cum
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's utime and stime (100 on Linux).
const clockTicks = 100

// cpuTime is the process's user + system CPU time, from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of %d: %w", pid, err)
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// hwm is the process's peak resident set (VmHWM), in bytes.
func hwm(b *testing.B, pid int) uint64 {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatalf("read the memory of %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no VmHWM in the status of %d", pid)
	return 0
}

// spanCount counts the JSON lines (one per reconcile) the agent has written; 0 when its output
// cannot be read.
func spanCount(agent *testenv.Process) int {
	f, err := os.Open(agent.StdoutPath())
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("{")) {
			n++
		}
	}
	return n
}

var (
	lostRE      = regexp.MustCompile(`events: \d+ read, (\d+) lost`)
	inheritedRE = regexp.MustCompile(`goroutines started inside a reconcile \(their calls are in its span\): (\d+)`)
	hitsRE      = regexp.MustCompile(`probe hits: (\d+) in traced processes`)
)

// summaryCounts reads, from the summary trace prints when it stops, the events the kernel
// dropped, the goroutines started inside a reconcile (none with goroutine inheritance off) and
// the probe hits in the target.
// noHits is summaryCounts' count of probe hits from an agent that does not print it.
const noHits = math.MaxUint64

func summaryCounts(b *testing.B, stderr string, v variant) (lost, inherited, hits uint64) {
	raw, err := os.ReadFile(stderr)
	if err != nil {
		b.Fatal(err)
	}
	m := lostRE.FindSubmatch(raw)
	g := inheritedRE.FindSubmatch(raw)
	h := hitsRE.FindSubmatch(raw)
	// A baseline agent may be older than the hits' count.
	if m == nil || (h == nil && v.agent == "") || (g == nil) != (v.inherit == "off") {
		b.Fatalf("reconscope-agent (--goroutine-inheritance %s) printed no summary, or not the one expected:\n%s", v.inherit, raw)
	}
	lost, _ = strconv.ParseUint(string(m[1]), 10, 64)
	if g != nil {
		inherited, _ = strconv.ParseUint(string(g[1]), 10, 64)
	}
	hits = noHits
	if h != nil {
		hits, _ = strconv.ParseUint(string(h[1]), 10, 64)
	}
	return lost, inherited, hits
}

// envList is the comma-separated list in the environment variable name; nil when unset.
func envList(name string) []string {
	s := os.Getenv(name)
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func envInt(b *testing.B, name string, def int) int {
	if s := os.Getenv(name); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive integer", name, s)
		}
		return n
	}
	return def
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	if s := os.Getenv(name); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive duration", name, s)
		}
		return d
	}
	return def
}
