package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// Node faults (issue 32, part 2): the API server out of the agent's reach for a minute, a
// hundred Go processes starting at once, the agent killed by its own memory limit.

// spanStream is an agent's standard output (-o json) as it comes: its spans by process.
// It is an io.Writer, so exec copies the output into it until the agent exits.
type spanStream struct {
	mu      sync.Mutex
	raw     bytes.Buffer // everything written
	partial []byte
	byPID   map[uint32][]exporter.JSONSpan
	// items counts, by process, the spans of work-queue items that are no controller-runtime
	// reconcile (no reconcile ID): they are not in byPID.
	items map[uint32]int
	// unschemed holds the first lines that are no JSON span of exporter.SpanSchema.
	unschemed []string
}

func newSpanStream() *spanStream {
	return &spanStream{byPID: map[uint32][]exporter.JSONSpan{}, items: map[uint32]int{}}
}

func (s *spanStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw.Write(p)
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		var sp exporter.JSONSpan
		err := json.Unmarshal(s.partial[:i], &sp)
		if (err != nil || sp.Schema != exporter.SpanSchema) && len(s.unschemed) < 3 {
			s.unschemed = append(s.unschemed, string(s.partial[:i]))
		}
		if err == nil {
			if sp.ReconcileID != "" {
				s.byPID[sp.PID] = append(s.byPID[sp.PID], sp)
			} else {
				s.items[sp.PID]++
			}
		}
		s.partial = s.partial[i+1:]
	}
	return len(p), nil
}

// String returns everything written so far.
func (s *spanStream) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

// unschemedLines returns the first lines written that are no JSON span of exporter.SpanSchema.
func (s *spanStream) unschemedLines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unschemed)
}

// itemsOf counts the spans of process pid that are no reconcile of controller-runtime.
func (s *spanStream) itemsOf(pid int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.items[uint32(pid)]
}

// of returns the spans of process pid so far.
func (s *spanStream) of(pid int) []exporter.JSONSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byPID[uint32(pid)])
}

// createRequeueing creates ConfigMap default/name whose script requeues it after every: each
// fixture process reconciles it again and again, with no write.
func createRequeueing(t *testing.T, env *testenv.Env, name string, every time.Duration) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
		Annotations: map[string]string{"scripted.reconscope.io/script": "requeue-after:" + every.String()}}}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// truthCheck is how the spans of one process compare with its ground truth.
type truthCheck struct {
	checked, missing, twice, wrong int
	first                          *groundtruth.Record // the earliest reconcile that is a span
	detail                         []string
}

// compareTruth compares the spans of one process with the reconciles of its ground truth that
// started in [from, to) (to zero: no end): each must be exactly one span, of its object and
// result. A span counted twice is counted whatever its start.
func compareTruth(truths []groundtruth.Record, spans []exporter.JSONSpan, from, to time.Time) truthCheck {
	var c truthCheck
	byID := map[string][]exporter.JSONSpan{}
	for _, s := range spans {
		byID[s.ReconcileID] = append(byID[s.ReconcileID], s)
	}
	for id, ss := range byID {
		if len(ss) > 1 {
			c.twice++
			c.detail = append(c.detail, fmt.Sprintf("reconcile %s: %d spans", id, len(ss)))
		}
	}
	for i, r := range truths {
		if len(byID[r.ReconcileID]) > 0 && (c.first == nil || r.Start.Before(c.first.Start)) {
			c.first = &truths[i]
		}
		if r.Start.Before(from) || (!to.IsZero() && !r.Start.Before(to)) {
			continue
		}
		c.checked++
		ss := byID[r.ReconcileID]
		if len(ss) == 0 {
			c.missing++
			c.detail = append(c.detail, fmt.Sprintf("reconcile %s of %s/%s at %s: no span", r.ReconcileID, r.Namespace, r.Name, r.Start.Format(time.StampMicro)))
			continue
		}
		if s := ss[0]; s.Name != r.Name || s.Namespace != r.Namespace || s.Result != r.MetricResult() {
			c.wrong++
			c.detail = append(c.detail, fmt.Sprintf("reconcile %s of %s/%s (%s): span of %s/%s, %s", r.ReconcileID, r.Namespace, r.Name, r.Outcome, s.Namespace, s.Name, s.Result))
		}
	}
	return c
}

func (c truthCheck) ok() bool { return c.missing == 0 && c.twice == 0 && c.wrong == 0 }

func (c truthCheck) String() string {
	d := c.detail
	if len(d) > 10 {
		d = append(d[:10:10], fmt.Sprintf("and %d more", len(c.detail)-10))
	}
	return fmt.Sprintf("%d reconciles checked: %d without a span, %d spans twice, %d wrong; %s", c.checked, c.missing, c.twice, c.wrong, strings.Join(d, "; "))
}

// waitTruthSpans waits until every reconcile in the ground truth at truthFile that started in
// [from, to) is a span of process pid in spans, then fails t for any reconcile without its
// one right span. It returns the check and the ground truth.
func waitTruthSpans(t *testing.T, logs fmt.Stringer, spans *spanStream, pid int, truthFile string, from, to time.Time) (truthCheck, []groundtruth.Record) {
	t.Helper()
	var c truthCheck
	var truths []groundtruth.Record
	waitLogged(t, logs, fmt.Sprintf("a span of each reconcile of process %d", pid), func() bool {
		truths, _ = groundtruth.ReadFile(truthFile)
		c = compareTruth(truths, spans.of(pid), from, to)
		return c.missing == 0
	})
	if !c.ok() {
		t.Errorf("process %d: %s", pid, c)
	}
	return c, truths
}

// agentKubeconfigVia returns a proxy to env's API server and a kubeconfig that reaches the API
// server through it, for the agent: the test takes the proxy down and up, the fixtures keep
// their direct connection.
func agentKubeconfigVia(t *testing.T, env *testenv.Env) (*apiProxy, string) {
	t.Helper()
	target := strings.TrimSuffix(strings.TrimPrefix(env.Config.Host, "https://"), "/")
	proxy := &apiProxy{target: target, addr: "127.0.0.1:0"}
	proxy.up(t)
	t.Cleanup(proxy.down)
	kc, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kc), "https://"+target) {
		t.Fatalf("kubeconfig does not name the API server %s", target)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(kc), "https://"+target, "https://"+proxy.addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	return proxy, path
}

// TestRunAPIServerUnreachableForAMinute: the agent's way to the API server is cut for 60 s
// while a fixture in a pod reconciles every 500 ms (the fixture keeps its own connection).
// Every reconcile of the fixture in that minute is one span naming its pod, as known before.
// A second pod scheduled to the node during the outage starts a process of the same
// executable: it is traced from its first reconcile, its spans name no pod and are counted in
// reconscope_spans_unnamed_total; once the API server is back they name its pod.
func TestRunAPIServerUnreachableForAMinute(t *testing.T) {
	_, env, fixture := agentWithFixture(t, testenv.Options{})
	const node, outage = "node-1", 60 * time.Second
	dir := t.TempDir()
	truth1, truth2 := filepath.Join(dir, "truth-1.jsonl"), filepath.Join(dir, "truth-2.jsonl")
	first, execFirst := fixtureOnNode(t, env, fixture, node, "operator-1", strings.Repeat("a1b2", 16), "--ground-truth", truth1)
	execFirst()
	proxy, kubeconfig := agentKubeconfigVia(t, env)
	metrics := testenv.FreeAddr(t)
	a := startAgent(t, "run", "--kubeconfig", kubeconfig, "--node-name", node, "--metrics-addr", metrics,
		"--scan-interval", "200ms", "--log-format", "json", "-o", "json")
	spans, logs := a.spans, a.logs
	waitLogged(t, logs, "the agent to trace the first pod's process", func() bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d,`, first.PID())) &&
			strings.Contains(logs.String(), `"pod":"default/operator-1"`)
	})
	createRequeueing(t, env, "tick", 500*time.Millisecond)
	waitLogged(t, logs, "a span of the first pod", func() bool { return len(spans.of(first.PID())) > 0 })

	proxy.down()
	from := time.Now()
	waitLogged(t, logs, "the agent to notice the API server is gone", func() bool {
		return strings.Contains(logs.String(), "kubernetes metadata unavailable")
	})
	// A pod bound to the node now: the kubelet (the test) knows of it, the agent cannot.
	second, execSecond := fixtureOnNode(t, env, fixture, node, "operator-2", strings.Repeat("c3d4", 16), "--ground-truth", truth2)
	execSecond()
	waitLogged(t, logs, "the agent to trace the second pod's process", func() bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d,`, second.PID()))
	})
	waitLogged(t, logs, "a span of the second pod's process", func() bool { return len(spans.of(second.PID())) > 0 })
	if s := spans.of(second.PID())[0]; s.Pod != "" || s.Container != "" {
		t.Errorf("the second process's first span names pod %q container %q while the agent cannot reach the API server", s.Pod, s.Container)
	}
	unnamedDuring := metricValue(httpGet(t, "http://"+metrics+"/metrics"), "reconscope_spans_unnamed_total")
	if unnamedDuring < 1 {
		t.Errorf("during the outage, with spans of a pod the agent could not name: reconscope_spans_unnamed_total %v, want at least 1", unnamedDuring)
	}
	time.Sleep(time.Until(from.Add(outage)))
	to := time.Now()
	proxy.up(t)
	waitLogged(t, logs, "the agent to notice the API server is back", func() bool {
		return strings.Contains(logs.String(), "kubernetes metadata available again")
	})
	waitLogged(t, logs, "a span of the second process naming its pod", func() bool {
		ss := spans.of(second.PID())
		return len(ss) > 0 && ss[len(ss)-1].Pod == "default/operator-2"
	})

	// The first pod: every reconcile of the outage, one span each, with its pod.
	c1, _ := waitTruthSpans(t, logs, spans, first.PID(), truth1, from, to)
	if c1.checked < int(outage/time.Second) {
		t.Errorf("the first pod reconciled %d times in the outage, want about %d (every 500 ms)", c1.checked, 2*int(outage/time.Second))
	}
	for _, s := range spans.of(first.PID()) {
		if s.Pod != "default/operator-1" || s.Container != "manager" {
			t.Errorf("span %s of the first pod names pod %q container %q", s.ReconcileID, s.Pod, s.Container)
			break
		}
	}
	// The second pod: every reconcile from its first, unnamed until the agent could list its
	// pod, named from then on.
	c2, truths2 := waitTruthSpans(t, logs, spans, second.PID(), truth2, time.Time{}, time.Now())
	unnamed, named := 0, 0
	for _, s := range spans.of(second.PID()) {
		switch {
		case s.Pod == "" && named == 0:
			unnamed++
		case s.Pod == "default/operator-2" && s.Container == "manager":
			named++
		default:
			t.Errorf("span %s of the second pod (after %d unnamed, %d named): pod %q container %q", s.ReconcileID, unnamed, named, s.Pod, s.Container)
		}
	}
	body := httpGet(t, "http://"+metrics+"/metrics")
	unnamedAfter := metricValue(body, "reconscope_spans_unnamed_total")
	if unnamed == 0 || unnamedAfter < float64(unnamed) {
		t.Errorf("the second pod had %d unnamed spans; reconscope_spans_unnamed_total %v", unnamed, unnamedAfter)
	}
	t.Logf("outage %s: first pod %d reconciles, each one span naming it; second pod (started during the outage) %d reconciles of %d in its ground truth, %d spans unnamed then %d named, and %d spans of other work-queue items; reconscope_spans_unnamed_total %v during, %v after",
		to.Sub(from).Round(time.Second), c1.checked, c2.checked, len(truths2), unnamed, named, spans.itemsOf(second.PID()), unnamedDuring, unnamedAfter)

	if err := a.Stop(); err != nil {
		t.Errorf("agent exit on SIGTERM: %v", err)
	}
	for _, msg := range []string{"kubernetes metadata unavailable", "kubernetes metadata available again"} {
		if n := strings.Count(logs.String(), msg); n != 1 {
			t.Errorf("%q logged %d times, want once", msg, n)
		}
	}
}

// percentile is the p-th percentile (0 to 100) of sorted d, nearest rank.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := (p*len(d) + 99) / 100
	return d[min(max(i-1, 0), len(d)-1)]
}

// TestRunHundredProcessesAtOnce: with the agent running, 100 Go controller processes of 30
// executables (copies of the scripted fixture, a third of them stripped) start at once on the
// node, each reconciling one object every second. Every process is traced; from its first
// traced reconcile on, each reconcile of its ground truth is one span; none is harmed (all run
// to the end and exit cleanly). The time from each process's start to its first traced
// reconcile is reported (docs/e2e.md), not asserted.
func TestRunHundredProcessesAtOnce(t *testing.T) {
	_, env, fixture := agentWithFixture(t, testenv.Options{})
	stripped := testkit.Build(t, "./test/fixtures/scripted-controller", "-ldflags=-s -w")
	const executables, processes = 30, 100
	dir := t.TempDir()
	exes := make([]string, executables)
	for i := range exes {
		src := fixture
		if i%3 == 2 {
			src = stripped
		}
		exes[i] = filepath.Join(dir, fmt.Sprintf("scripted-%02d", i))
		if err := testkit.CopyFile(src, exes[i]); err != nil { // another inode, the same code
			t.Fatal(err)
		}
	}
	createRequeueing(t, env, "tick", time.Second)

	a := startAgent(t, "run", "--metrics-addr", "", "--scan-interval", "200ms", "--log-format", "json", "-o", "json")
	spans, logs := a.spans, a.logs
	waitLogged(t, logs, "the agent to run", func() bool { return strings.Contains(logs.String(), `"msg":"reconscope agent running"`) })

	// Light fixtures: one OS thread each for Go code, a small heap goal.
	procs := make([]*testenv.Process, processes)
	truths := make([]string, processes)
	started := make([]time.Time, processes)
	for i := range procs {
		truths[i] = filepath.Join(dir, fmt.Sprintf("truth-%03d.jsonl", i))
		c := exec.Command(exes[i%executables], "--kubeconfig", env.Kubeconfig, "--ground-truth", truths[i])
		c.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=50")
		started[i] = time.Now()
		procs[i] = testenv.StartProcess(t, fmt.Sprintf("scripted-%03d", i), c)
	}
	t.Logf("%d processes of %d executables started in %s", processes, executables, time.Since(started[0]).Round(time.Millisecond))

	// 30 inspections, at most max(2, cores) at once: more than waitLogged's minute on 2 cores.
	testkit.WaitFor(t, "a span of every process", 5*time.Minute, func() (bool, string) {
		var untraced []string
		for i, p := range procs {
			if len(spans.of(p.PID())) == 0 {
				untraced = append(untraced, fmt.Sprintf("%d (pid %d)", i, p.PID()))
			}
		}
		return len(untraced) == 0, fmt.Sprintf("no span of processes %s; logs:\n%s", strings.Join(untraced, ", "), logs.String())
	})
	// A few more reconciles of each after its first traced one, then the comparison.
	time.Sleep(3 * time.Second)
	cutoff := time.Now()
	firsts := make([]time.Duration, 0, processes)
	before, checked := 0, 0
	for i, p := range procs {
		select {
		case <-p.Done():
			t.Errorf("process %d (pid %d, %s) exited: %v", i, p.PID(), filepath.Base(exes[i%executables]), p.Wait())
			continue
		default:
		}
		// The first traced reconcile, then every one after it that started before the cutoff.
		truth, _ := groundtruth.ReadFile(truths[i])
		first := compareTruth(truth, spans.of(p.PID()), time.Time{}, time.Time{}).first
		if first == nil {
			t.Errorf("process %d (pid %d): spans %d, none of a reconcile in its ground truth", i, p.PID(), len(spans.of(p.PID())))
			continue
		}
		c, all := waitTruthSpans(t, logs, spans, p.PID(), truths[i], first.Start, cutoff)
		checked += c.checked
		for _, r := range all {
			if r.Start.Before(first.Start) {
				before++
			}
		}
		firsts = append(firsts, first.Start.Sub(started[i]))
	}
	if len(firsts) > 0 {
		sorted := slices.Clone(firsts)
		slices.Sort(sorted)
		r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
		t.Logf("time to first traced reconcile, %d processes of %d executables: min %s, median %s, p90 %s, max %s; %d reconciles after each one's first traced one compared, each one span; %d reconciles before it (not traced yet)",
			len(firsts), executables, r(sorted[0]), r(percentile(sorted, 50)), r(percentile(sorted, 90)), r(sorted[len(sorted)-1]), checked, before)
	}

	// No process harmed: all stop cleanly on SIGTERM, as at a pod's deletion.
	var wg sync.WaitGroup
	errs := make([]error, processes)
	for i, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Stop() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d (pid %d) exit: %v", i, procs[i].PID(), err)
		}
	}
	if err := a.Stop(); err != nil {
		t.Errorf("agent exit on SIGTERM: %v", err)
	}
}

// memoryCgroup makes a cgroup v1 memory cgroup of its own for the test and returns its folder;
// it is removed at cleanup, once its processes are gone.
func memoryCgroup(t *testing.T) string {
	t.Helper()
	const root = "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		bpftest.SkipOrFail(t, "needs the cgroup v1 memory controller at %s: %v", root, err)
	}
	dir := filepath.Join(root, fmt.Sprintf("reconscope-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		bpftest.SkipOrFail(t, "cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		testkit.Poll(10*time.Second, func() bool { return os.Remove(dir) == nil })
	})
	return dir
}

// cgroupValue reads one number of a cgroup file, or one line "key N" of it when key is set.
func cgroupValue(t *testing.T, dir, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.TrimSpace(string(b))
	if key != "" {
		text = ""
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+" "); ok {
				text = v
			}
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		t.Fatalf("%s %s: %q: %v", file, key, text, err)
	}
	return n
}

func setCgroup(t *testing.T, dir, file string, v int64) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
		t.Fatalf("set %s to %d: %v", file, v, err)
	}
}

// agentInCgroup starts the agent with args in the memory cgroup dir from its first instruction,
// as a container's process is: a shell joins the cgroup, then execs the agent.
func agentInCgroup(t *testing.T, name, agent, dir string, args ...string) (*testenv.Process, *spanStream, *testkit.LogBuffer) {
	t.Helper()
	a := startAgentCommand(t, name, exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, dir, agent}, args...)...))
	return a.Process, a.spans, a.logs
}

// TestRunAgentOOMKilled: the agent runs in a memory cgroup, as in its pod, tracing a
// controller. Its limit is then set just above what it cannot give back, and
// kube-controller-manager starts on the node: inspecting it, the agent outgrows the limit and
// the kernel kills it. No uprobe link of it is left; the traced controller is unharmed (it runs, its
// reconciles keep succeeding). Started again with a sane limit, as the kubelet restarts the
// container, the agent traces the same controller again, every reconcile a span.
func TestRunAgentOOMKilled(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{})
	memcg := memoryCgroup(t)
	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig, "--ground-truth", truthFile))
	createRequeueing(t, env, "tick", 500*time.Millisecond)
	args := []string{"run", "--metrics-addr", "", "--scan-interval", "200ms", "--log-format", "json", "-o", "json"}

	first, spans, logs := agentInCgroup(t, "reconscope-agent-1", agent, memcg, args...)
	waitLogged(t, logs, "the agent to trace the fixture", func() bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d,`, ctl.PID())) && len(spans.of(ctl.PID())) > 0
	})
	held, err := bpftest.LinksHeldBy(first.PID())
	if err != nil {
		t.Fatal(err)
	}
	onFixture := 0
	for _, l := range bpftest.LinksOn(t, fixture) {
		for _, h := range held {
			if h.ID == l.ID {
				onFixture++
			}
		}
	}
	if onFixture == 0 {
		t.Fatalf("the agent holds %d uprobe links, none on the fixture", len(held))
	}

	// The limit, low on purpose: what the agent cannot give back now (its anonymous memory,
	// mapped files, kernel memory: usage less the page cache it does not map), raised by 8 MiB
	// steps only while the kernel refuses it. With 8 MiB more from the start, the agent's leaner
	// inspection fitted and it was not killed (CI, this stop). Then kube-controller-manager, an
	// executable of 150 MB the agent has not seen, starts on the node: inspecting it needs more.
	var limit, usage int64
	for margin := int64(0); limit == 0; margin += 8 << 20 {
		usage = cgroupValue(t, memcg, "memory.usage_in_bytes", "")
		unmapped := cgroupValue(t, memcg, "memory.stat", "total_cache") - cgroupValue(t, memcg, "memory.stat", "total_mapped_file")
		try := usage - unmapped + margin
		if err := os.WriteFile(filepath.Join(memcg, "memory.limit_in_bytes"), []byte(strconv.FormatInt(try, 10)), 0o644); err == nil {
			limit = try
		} else if !errors.Is(err, syscall.EBUSY) || margin > 256<<20 {
			t.Fatalf("set memory.limit_in_bytes to %d (usage %d): %v", try, usage, err)
		}
	}
	kcm := exec.Command(filepath.Join(env.BinDir, "kube-controller-manager"), "--kubeconfig="+env.Kubeconfig,
		"--authentication-kubeconfig="+env.Kubeconfig, "--authorization-kubeconfig="+env.Kubeconfig, "--authentication-skip-lookup=true",
		"--bind-address=127.0.0.1", "--secure-port="+strings.TrimPrefix(testenv.FreeAddr(t), "127.0.0.1:"), "--cert-dir="+t.TempDir(),
		"--leader-elect=false", "--use-service-account-credentials=false", "--controllers=deployment")
	testenv.StartProcess(t, "kube-controller-manager", kcm)
	select {
	case <-first.Done():
	case <-time.After(2 * time.Minute):
		t.Fatalf("the agent, limited to %d MiB (it used %d MiB), outlived kube-controller-manager's inspection by 2 minutes (max usage %d MiB); logs:\n%s",
			limit>>20, usage>>20, cgroupValue(t, memcg, "memory.max_usage_in_bytes", "")>>20, logs.String())
	}
	killed := time.Now()
	var exit *exec.ExitError
	if err := first.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the agent exited with %v, want killed by SIGKILL (the OOM killer)", err)
	}
	ooms := cgroupValue(t, memcg, "memory.oom_control", "oom_kill")
	failcnt := cgroupValue(t, memcg, "memory.failcnt", "")
	if ooms < 1 {
		t.Errorf("memory.oom_control of the agent's cgroup: oom_kill %d, want at least 1", ooms)
	}
	t.Logf("agent limited to %d MiB (it used %d MiB tracing the fixture, page cache included), OOM-killed %d time(s) inspecting kube-controller-manager (failcnt %d, max usage %d MiB)",
		limit>>20, usage>>20, ooms, failcnt, cgroupValue(t, memcg, "memory.max_usage_in_bytes", "")>>20)

	// No link left: every link it held went with it, and no link on the fixture is held by no
	// process (a pinned or leaked one).
	testkit.WaitFor(t, "the killed agent's links to go", 10*time.Second, func() (bool, string) {
		all, err := bpftest.UprobeLinks()
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, l := range all {
			for _, h := range held {
				if h.ID == l.ID {
					left = append(left, fmt.Sprintf("%+v", l))
				}
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	holders, err := bpftest.LinkHolders()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range bpftest.LinksOn(t, fixture) {
		if _, ok := holders[l.ID]; !ok {
			t.Errorf("link on the fixture that no process holds: %+v", l)
		}
	}

	// The fixture is unharmed: it runs, and reconciles on, each succeeding as its script says.
	var after []groundtruth.Record
	testkit.WaitFor(t, "the fixture to reconcile 5 times after the agent's death", time.Minute, func() (bool, string) {
		truths, _ := groundtruth.ReadFile(truthFile)
		after = after[:0]
		for _, r := range truths {
			if r.Start.After(killed) {
				after = append(after, r)
			}
		}
		return len(after) >= 5, fmt.Sprintf("%d", len(after))
	})
	for _, r := range after {
		if r.MetricResult() != "requeue_after" || r.Error != "" || r.Panic != "" {
			t.Errorf("reconcile %s after the agent's death: %s %s %s", r.ReconcileID, r.Outcome, r.Error, r.Panic)
		}
	}
	select {
	case <-ctl.Done():
		t.Fatalf("the fixture exited with the agent: %v", ctl.Wait())
	default:
	}

	// Restarted with a sane limit, the agent traces the fixture again.
	setCgroup(t, memcg, "memory.limit_in_bytes", 1<<30)
	second, spans2, logs2 := agentInCgroup(t, "reconscope-agent-2", agent, memcg, args...)
	waitLogged(t, logs2, "the restarted agent to trace the fixture", func() bool {
		return strings.Contains(logs2.String(), fmt.Sprintf(`"msg":"tracing","pid":%d,`, ctl.PID())) && len(spans2.of(ctl.PID())) > 0
	})
	truths, _ := groundtruth.ReadFile(truthFile)
	firstAgain := compareTruth(truths, spans2.of(ctl.PID()), time.Time{}, time.Time{}).first
	if firstAgain == nil {
		t.Fatalf("the restarted agent's spans of the fixture are of no reconcile in its ground truth")
	}
	time.Sleep(3 * time.Second)
	c, _ := waitTruthSpans(t, logs2, spans2, ctl.PID(), truthFile, firstAgain.Start, time.Now())
	t.Logf("restarted agent: fixture traced again %s after the OOM kill, %d reconciles since compared, each one span",
		firstAgain.Start.Sub(killed).Round(10*time.Millisecond), c.checked)
	if err := second.Stop(); err != nil {
		t.Errorf("restarted agent exit on SIGTERM: %v", err)
	}
	left := bpftest.LinksLeftOn(t, fixture)
	if holders, err = bpftest.LinkHolders(); err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		if _, ok := holders[l.ID]; !ok {
			t.Errorf("link left after the restarted agent stopped: %+v", l)
		}
	}
	if err := ctl.Stop(); err != nil {
		t.Errorf("fixture exit: %v", err)
	}
}

// TestCompareTruth: the comparison the node-fault tests rest on, without a kernel: a reconcile
// of the window without a span, with two, or with a span of another object or result is
// counted; reconciles outside the window are not; the first traced reconcile is the earliest.
func TestCompareTruth(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	rec := func(id string, s int) groundtruth.Record {
		return groundtruth.Record{ReconcileID: id, Namespace: "default", Name: "tick", Outcome: groundtruth.OutcomeRequeueAfter, Start: at(s), End: at(s)}
	}
	span := func(id string) exporter.JSONSpan {
		return exporter.JSONSpan{ReconcileID: id, Namespace: "default", Name: "tick", Result: "requeue_after"}
	}
	truths := []groundtruth.Record{rec("r0", 0), rec("r1", 1), rec("r2", 2), rec("r3", 3), rec("r4", 4)}
	wrong := span("r3")
	wrong.Result = "success"
	for _, tt := range []struct {
		name                           string
		spans                          []exporter.JSONSpan
		from, to                       time.Time
		checked, missing, twice, wrong int
		first                          string
	}{
		{name: "all, one each", spans: []exporter.JSONSpan{span("r0"), span("r1"), span("r2"), span("r3"), span("r4")}, checked: 5, first: "r0"},
		{name: "traced from r2, window from r2", spans: []exporter.JSONSpan{span("r3"), span("r2"), span("r4")}, from: at(2), checked: 3, first: "r2"},
		{name: "traced from r2, whole truth", spans: []exporter.JSONSpan{span("r2"), span("r3"), span("r4")}, checked: 5, missing: 2, first: "r2"},
		{name: "a gap", spans: []exporter.JSONSpan{span("r1"), span("r3")}, from: at(1), to: at(4), checked: 3, missing: 1, first: "r1"},
		{name: "twice", spans: []exporter.JSONSpan{span("r1"), span("r1"), span("r2")}, from: at(1), to: at(3), checked: 2, twice: 1, first: "r1"},
		{name: "wrong result", spans: []exporter.JSONSpan{span("r2"), wrong}, from: at(2), to: at(4), checked: 2, wrong: 1, first: "r2"},
		{name: "no span", checked: 5, missing: 5},
	} {
		c := compareTruth(truths, tt.spans, tt.from, tt.to)
		first := ""
		if c.first != nil {
			first = c.first.ReconcileID
		}
		if c.checked != tt.checked || c.missing != tt.missing || c.twice != tt.twice || c.wrong != tt.wrong || first != tt.first {
			t.Errorf("%s: checked %d missing %d twice %d wrong %d first %q; want %d %d %d %d %q", tt.name,
				c.checked, c.missing, c.twice, c.wrong, first, tt.checked, tt.missing, tt.twice, tt.wrong, tt.first)
		}
		if want := tt.missing+tt.twice+tt.wrong == 0; c.ok() != want {
			t.Errorf("%s: ok() = %v", tt.name, c.ok())
		}
	}
}

// TestSpanStream: spans split across writes are whole once their line ends; other lines are
// left out.
func TestSpanStream(t *testing.T) {
	s := newSpanStream()
	for _, chunk := range []string{`{"reconcile_id":"a","pid":7}` + "\n" + `{"reconcile_`, `id":"b","pid":7}` + "\nnot json\n" + `{"reconcile_id":"c","pid":8}`} {
		if _, err := s.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, sp := range s.of(7) {
		got = append(got, sp.ReconcileID)
	}
	if strings.Join(got, ",") != "a,b" || len(s.of(8)) != 0 {
		t.Errorf("pid 7: %v, pid 8: %d spans; want a,b and none before its line ends", got, len(s.of(8)))
	}
	if p := percentile([]time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90); p != 9 {
		t.Errorf("p90 of 1..10 = %v, want 9", p)
	}
}
