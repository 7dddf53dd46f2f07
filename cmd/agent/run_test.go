package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// buildAgent builds reconscope-agent once per test binary.
var buildAgent = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "reconscope-agent-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "reconscope-agent")
	return out, testkit.GoBuild(out, "./cmd/agent", nil)
})

// agentBinary returns reconscope-agent's binary, built once per test binary (buildAgent).
func agentBinary(t *testing.T) string {
	t.Helper()
	agent, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	return agent
}

// requireAgent skips (or fails, under RECONSCOPE_REQUIRE_BPF=1) without eBPF, then returns
// reconscope-agent's binary (agentBinary).
func requireAgent(t *testing.T) string {
	t.Helper()
	bpftest.Require(t)
	return agentBinary(t)
}

// agentWithFixture skips (or fails, under RECONSCOPE_REQUIRE_BPF=1) without eBPF, then returns
// the agent's binary, a control plane started with opts and the scripted fixture's binary.
func agentWithFixture(t *testing.T, opts testenv.Options) (string, *testenv.Env, string) {
	t.Helper()
	agent := requireAgent(t)
	env := testenv.Start(t, opts)
	return agent, env, testkit.Build(t, "./test/fixtures/scripted-controller")
}

// agentProcess is a reconscope-agent a test started: its process, the spans of its standard
// output (-o json) and its log (standard error).
type agentProcess struct {
	*testenv.Process
	spans *spanStream
	logs  *testkit.LogBuffer
}

// startAgent starts reconscope-agent with args, outside any pod (no in-cluster API server, no
// NODE_NAME: --kubeconfig and --node-name say them). Its standard output is read as a span
// stream and its standard error kept as its log; it is stopped when the test ends, if still
// running, and every line of its output must have been a JSON span of exporter.SpanSchema.
func startAgent(t *testing.T, args ...string) *agentProcess {
	t.Helper()
	return startAgentCommand(t, "reconscope-agent", exec.Command(agentBinary(t), args...))
}

// startAgentCommand is startAgent for a command that runs the agent (a shell that execs it).
func startAgentCommand(t *testing.T, name string, cmd *exec.Cmd) *agentProcess {
	t.Helper()
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=", "NODE_NAME=")
	a := &agentProcess{spans: newSpanStream(), logs: &testkit.LogBuffer{}}
	cmd.Stdout, cmd.Stderr = a.spans, a.logs
	a.Process = testenv.StartProcess(t, name, cmd)
	t.Cleanup(func() {
		if lines := a.spans.unschemedLines(); len(lines) > 0 {
			t.Errorf("%s wrote lines that are no JSON span of schema %s: %q", name, exporter.SpanSchema, lines)
		}
	})
	return a
}

// keepSpans reads the agent's JSON spans from stdout to its end, whatever comes, so the agent
// never blocks writing it, and passes those keep accepts on the returned channel, of capacity
// n; it closes the channel at stdout's end.
func keepSpans(stdout io.Reader, n int, keep func(exporter.JSONSpan) bool) <-chan exporter.JSONSpan {
	spans := make(chan exporter.JSONSpan, n)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var s exporter.JSONSpan
			if json.Unmarshal(sc.Bytes(), &s) == nil && keep(s) {
				select {
				case spans <- s:
				default: // more than the test reads: dropped here, not in the agent
				}
			}
		}
		close(spans)
	}()
	return spans
}

// fakeContainer puts pid into a cgroup whose path is what containerd's cgroupfs driver makes
// for a Kubernetes container, so discovery reads a container ID and pod UID for it.
func fakeContainer(t *testing.T, pid int, podUID, containerID string) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/pids/kubepods/burstable", "pod"+podUID, containerID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		bpftest.SkipOrFail(t, "cannot make a cgroup to stand for a container: %v", err)
	}
	t.Cleanup(func() {
		// The process is gone by now (cleanups run last-in first-out); remove the folders.
		for d := dir; strings.HasPrefix(d, "/sys/fs/cgroup/pids/kubepods"); d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644); err != nil {
		t.Fatalf("move %d into %s: %v", pid, dir, err)
	}
}

// fixtureInPod runs the fixture controller as container "manager" of pod default/podName on
// node: the pod object with that container's ID in its status, and the process in a cgroup
// named the way containerd names it (with the UID the API server gave the pod) from before it
// execs the fixture, as runc does (fixtureOnNode): the agent reads a process as it execs.
func fixtureInPod(t *testing.T, env *testenv.Env, fixture, node, podName, containerID string) *testenv.Process {
	t.Helper()
	ctl, release := fixtureOnNode(t, env, fixture, node, podName, containerID)
	release()
	return ctl
}

// podWithContainer creates pod default/podName on node, with container "manager" of ID
// containerID running in its status, as the kubelet reports it.
func podWithContainer(t *testing.T, env *testenv.Env, node, podName, containerID string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: podName},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "manager", Image: "example.com/op:1"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "manager", Image: "example.com/op:1", ImageID: "example.com/op@sha256:0",
		ContainerID: "containerd://" + containerID, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// TestRunDaemonSetMode runs `reconscope-agent run` as the DaemonSet does: it finds the fixture
// controller by scanning /proc, names its pod and container from the API server, exports
// metrics, and detaches everything on SIGTERM. Another, bigger controller runs on the node
// too (kube-controller-manager, started first, so found first): the fixture is traced without
// waiting for that one's inspection, and its reconciles from then on are all spans.
func TestRunDaemonSetMode(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{ControllerManager: []string{"replicaset", "deployment"}})
	ctx := context.Background()
	const node = "node-1"
	ctl := fixtureInPod(t, env, fixture, node, "operator-0", strings.Repeat("ab12", 16))

	metrics := testenv.FreeAddr(t)
	cmd := exec.Command(agent, "run", "--kubeconfig", env.Kubeconfig, "--node-name", node, "--metrics-addr", metrics,
		"--scan-interval", "200ms", "--log-format", "json", "--output", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.LogBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The agent traces every Go controller of the machine it finds (other tests' control planes
	// too): keep only the fixture's spans, and keep reading stdout to its end whatever comes, so
	// the agent never blocks writing it.
	spans := keepSpans(stdout, 100, func(s exporter.JSONSpan) bool { return s.PID == uint32(ctl.PID()) })

	// Wait until the agent says it traces the fixture, then make it reconcile.
	waitLogged(t, logs, "the agent to trace the fixture", func() bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d`, ctl.PID()))
	})
	kcmTraced := fmt.Sprintf(`"msg":"tracing","pid":%d`, env.ControllerManagerPID)
	t.Logf("fixture traced; kube-controller-manager traced already: %v", strings.Contains(logs.String(), kcmTraced))
	for _, name := range []string{"a", "b", "c"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Annotations: map[string]string{"scripted.reconscope.io/script": "success"}}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]exporter.JSONSpan{}
	timeout := time.After(30 * time.Second)
	for len(got) < 3 {
		select {
		case s, ok := <-spans:
			if !ok {
				t.Fatalf("the agent's output ended after spans for %d of 3 objects; logs:\n%s", len(got), logs.String())
			}
			got[s.Name] = s
		case <-timeout:
			t.Fatalf("spans for %d of 3 objects; logs:\n%s", len(got), logs.String())
		}
	}
	for name, s := range got {
		if s.Controller != "scripted" || s.Pod != "default/operator-0" || s.Container != "manager" || s.PID != uint32(ctl.PID()) {
			t.Errorf("span of %s: controller %q pod %q container %q pid %d", name, s.Controller, s.Pod, s.Container, s.PID)
		}
	}

	waitLogged(t, logs, "the agent to trace kube-controller-manager", func() bool { return strings.Contains(logs.String(), kcmTraced) })
	body := httpGet(t, "http://"+metrics+"/metrics")
	// The fixture's series names its pod and container (the series also carries the other
	// workload labels: service_name, k8s_workload_name, k8s_workload_kind).
	series := false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "reconscope_reconcile_total{") {
			continue
		}
		all := true
		for _, l := range []string{`controller="scripted"`, `k8s_container_name="manager"`, `k8s_namespace_name="default"`, `k8s_pod_name="operator-0"`, `result="success"`} {
			all = all && strings.Contains(line, l)
		}
		series = series || all
	}
	if !series {
		t.Errorf("/metrics lacks reconscope_reconcile_total of controller scripted, pod default/operator-0, container manager, result success:\n%s", body)
	}
	// The fixture and kube-controller-manager, at least: every work-queue consumer on the
	// machine is traced (issue 26), the kube-apiservers of this and other tests too.
	if n := metricValue(body, "reconscope_processes_traced"); n < 2 {
		t.Errorf("/metrics says %v processes traced, want at least 2:\n%s", n, body)
	}
	for _, want := range []string{
		`reconscope_tracing{reason=""} 1`,
		`reconscope_events_lost_total{cause="ring_buffer_full"} 0`,
		`reconscope_events_lost_total{cause="state"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		httpGet(t, "http://"+metrics+path)
	}

	// The links this agent holds on the fixture, before it stops: only those must go with it
	// (another agent running on the machine, another test's, may hold links on it too).
	held, err := bpftest.LinksHeldBy(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	own := map[link.ID]bool{}
	for _, l := range held {
		own[l.ID] = true
	}
	onFixture := 0
	for _, l := range bpftest.LinksOn(t, fixture) {
		if own[l.ID] {
			onFixture++
		}
	}
	if onFixture == 0 {
		t.Fatalf("the agent holds no uprobe link on the fixture while tracing it (it holds %d links)", len(held))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent exit on SIGTERM: %v\n%s", err, logs.String())
	}
	for _, l := range bpftest.LinksLeftOn(t, fixture) {
		if own[l.ID] {
			t.Errorf("link left after the agent stopped: %+v", l)
		}
	}
}

// TestRunWithoutAPI: with no API access the agent keeps tracing, says so once, and spans
// carry host metadata only.
func TestRunWithoutAPI(t *testing.T) {
	_, env, fixture := agentWithFixture(t, testenv.Options{})
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig))
	a := startAgent(t, "run", "--metrics-addr", "", "--scan-interval", "200ms", "--log-format", "json", "-o", "json")
	// The reconcile must come after the agent attached (on a loaded machine that takes seconds).
	waitLogged(t, a.logs, "the agent to trace the fixture", func() bool {
		return strings.Contains(a.logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d,`, ctl.PID()))
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "no-api",
		Annotations: map[string]string{"scripted.reconscope.io/script": "success"}}}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	// Not WaitFor: without the span the test goes on, and the checks below say what is missing.
	testkit.Poll(30*time.Second, func() bool { return strings.Contains(a.spans.String(), `"name":"no-api"`) })
	if err := a.Stop(); err != nil {
		t.Fatalf("agent: %v", err)
	}
	out, logs := a.spans.String(), a.logs.String()
	if n := strings.Count(logs, "kubernetes metadata unavailable"); n != 1 {
		t.Errorf("said %d times that there is no API access, want once:\n%s", n, logs)
	}
	if !strings.Contains(out, `"name":"no-api"`) || !strings.Contains(out, fmt.Sprintf(`"pid":%d`, ctl.PID())) {
		t.Errorf("no span for the fixture without API access; stdout:\n%s\nlogs:\n%s", out, logs)
	}
	if strings.Contains(out, `"pod":"default/`) {
		t.Errorf("pod metadata without API access?\n%s", out)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	return string(b)
}

// TestRunFindsNewProcessOnExec: with an hour between /proc scans, a controller started after
// the agent is traced all the same: its exec prompts a scan.
func TestRunFindsNewProcessOnExec(t *testing.T) {
	_, env, fixture := agentWithFixture(t, testenv.Options{})
	a := startAgent(t, "run", "--metrics-addr", "", "--scan-interval", "1h", "--log-format", "json")
	waitLogged(t, a.logs, "the agent to start", func() bool {
		return strings.Contains(a.logs.String(), `"msg":"reconscope agent running"`)
	})
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig))
	waitLogged(t, a.logs, fmt.Sprintf("the fixture (pid %d), started after the agent, to be traced without a /proc scan", ctl.PID()), func() bool {
		return strings.Contains(a.logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d`, ctl.PID()))
	})
	if err := a.Stop(); err != nil {
		t.Errorf("agent exit on SIGTERM: %v", err)
	}
}

// waitLogged waits up to a minute for cond, and shows the agent's logs when it times out.
func waitLogged(t *testing.T, logs fmt.Stringer, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, time.Minute, func() (bool, string) { return cond(), "logs:\n" + logs.String() })
}

// createSucceeding creates n ConfigMaps in namespace default, named by format and their index,
// whose script is success.
func createSucceeding(t *testing.T, env *testenv.Env, format string, n int) {
	t.Helper()
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf(format, i),
			Annotations: map[string]string{"scripted.reconscope.io/script": "success"}}}
		if err := env.Client.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSpansOfTruth waits for n reconciles in the ground truth at truthFile, then for a span of
// each among the agent's JSON spans of process pid in out, and checks each span's object and
// result against its reconcile. It returns the reconciles and the spans by reconcile ID.
func waitSpansOfTruth(t *testing.T, logs, out fmt.Stringer, truthFile string, pid, n int) ([]groundtruth.Record, map[string]exporter.JSONSpan) {
	t.Helper()
	var truths []groundtruth.Record
	waitLogged(t, logs, fmt.Sprintf("%d reconciles in the ground truth", n), func() bool {
		truths, _ = groundtruth.ReadFile(truthFile)
		return len(truths) >= n
	})
	byID := map[string]exporter.JSONSpan{}
	waitLogged(t, logs, fmt.Sprintf("a span of process %d for each reconcile in the ground truth", pid), func() bool {
		for _, line := range strings.Split(out.String(), "\n") {
			var s exporter.JSONSpan
			if json.Unmarshal([]byte(line), &s) == nil && s.PID == uint32(pid) {
				byID[s.ReconcileID] = s
			}
		}
		for _, r := range truths {
			if _, ok := byID[r.ReconcileID]; !ok {
				return false
			}
		}
		return true
	})
	for _, r := range truths {
		if s := byID[r.ReconcileID]; s.Name != r.Name || s.Namespace != r.Namespace || string(s.Result) != r.MetricResult() {
			t.Errorf("reconcile %s of %s/%s (%s): span of %s/%s, %s", r.ReconcileID, r.Namespace, r.Name, r.Outcome, s.Namespace, s.Name, s.Result)
		}
	}
	return truths, byID
}

// apiProxy is a TCP proxy to the API server that the test can take down and bring back on the
// same address, as an outage looks to the agent.
type apiProxy struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

func (p *apiProxy) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("proxy listen %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

func (p *apiProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestRunAPIServerDown: the API server becomes unreachable for the agent and comes back. The
// agent says so once each way and keeps tracing throughout, with the pod metadata it had.
func TestRunAPIServerDown(t *testing.T) {
	_, env, fixture := agentWithFixture(t, testenv.Options{})
	ctx := context.Background()
	const node = "node-1"
	ctl := fixtureInPod(t, env, fixture, node, "operator-1", strings.Repeat("cd34", 16))

	// The agent reaches the API server through the proxy; the fixture directly.
	proxy, agentKubeconfig := agentKubeconfigVia(t, env)
	a := startAgent(t, "run", "--kubeconfig", agentKubeconfig, "--node-name", node, "--metrics-addr", "",
		"--scan-interval", "200ms", "--log-format", "json", "-o", "json")
	out, logs := a.spans, a.logs
	reconcile := func(name string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Annotations: map[string]string{"scripted.reconscope.io/script": "success"}}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		waitLogged(t, logs, "a span of "+name+" with its pod", func() bool {
			return strings.Contains(out.String(), `"name":"`+name+`"`) &&
				strings.Contains(out.String(), `"pod":"default/operator-1","container":"manager"`)
		})
	}
	waitLogged(t, logs, "the agent to trace the fixture", func() bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d`, ctl.PID())) &&
			strings.Contains(logs.String(), `"pod":"default/operator-1"`)
	})
	reconcile("before")

	proxy.down()
	waitLogged(t, logs, "the agent to notice the API server is gone", func() bool {
		return strings.Contains(logs.String(), "kubernetes metadata unavailable")
	})
	reconcile("during") // tracing goes on, with the metadata it had

	proxy.up(t)
	waitLogged(t, logs, "the agent to notice the API server is back", func() bool {
		return strings.Contains(logs.String(), "kubernetes metadata available again")
	})
	reconcile("after")

	if err := a.Stop(); err != nil {
		t.Errorf("agent exit on SIGTERM: %v", err)
	}
	for _, msg := range []string{"kubernetes metadata unavailable", "kubernetes metadata available again"} {
		if n := strings.Count(logs.String(), msg); n != 1 {
			t.Errorf("%q logged %d times, want once", msg, n)
		}
	}
}

// TestRunTracesNewProcessFromItsFirstReconcile: the agent traces a controller; a second process
// of the same executable starts (as a restarted pod does) and serves its initial sync at once.
// Every reconcile of the second process, from its very first, is a span: the kernel admits it
// at exec. Its ground truth is compared with the spans, reconcile ID by reconcile ID, and with
// its own controller_runtime_reconcile_total.
func TestRunTracesNewProcessFromItsFirstReconcile(t *testing.T) {
	_, env, fixture := agentWithFixture(t, testenv.Options{})
	const objects = 30
	createSucceeding(t, env, "cm-%02d", objects)
	first := testenv.StartProcess(t, "scripted-1", exec.Command(fixture, "--kubeconfig", env.Kubeconfig))

	a := startAgent(t, "run", "--metrics-addr", "", "--scan-interval", "200ms", "--log-format", "json", "-o", "json")
	out, logs := a.spans, a.logs
	waitLogged(t, logs, "the agent to trace the first process", func() bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d`, first.PID()))
	})

	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	second := testenv.StartProcess(t, "scripted-2", exec.Command(fixture, "--kubeconfig", env.Kubeconfig,
		"--ground-truth", truthFile, "--metrics-bind-address", "127.0.0.1:0"))
	truths, byID := waitSpansOfTruth(t, logs, out, truthFile, second.PID(), objects)
	// The process's own count, from its start, agrees.
	addr := second.WaitStderr(t, regexp.MustCompile(`metrics listening on (\S+)`))
	body := httpGet(t, "http://"+addr+"/metrics")
	want := fmt.Sprintf(`controller_runtime_reconcile_total{controller="scripted",result="success"} %d`, len(truths))
	if !strings.Contains(body, want) {
		t.Errorf("the second process's metrics lack %q (it reconciled %d times by its ground truth)", want, len(truths))
	}
	t.Logf("second process: %d reconciles in its initial sync, %d spans", len(truths), len(byID))
	if err := a.Stop(); err != nil {
		t.Errorf("agent exit on SIGTERM: %v", err)
	}
}

// TestRunProcRoot runs the agent as a DaemonSet pod without hostPID sees the node: its own /proc
// shows only its own PID namespace, the host's processes are under --proc-root. Everything the
// agent reads of a traced process (executable, memory maps, liveness) must come from there, or
// the fixture is never traced.
func TestRunProcRoot(t *testing.T) {
	bpftest.Require(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		bpftest.SkipOrFail(t, "needs util-linux's unshare for a PID namespace: %v", err)
	}
	agent := agentBinary(t)
	env := testenv.Start(t, testenv.Options{})
	fixture := testkit.Build(t, "./test/fixtures/scripted-controller")
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig))

	hostProc := filepath.Join(t.TempDir(), "host-proc")
	if err := os.Mkdir(hostProc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("proc", hostProc, "proc", 0, ""); err != nil {
		bpftest.SkipOrFail(t, "cannot mount proc elsewhere: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(hostProc, syscall.MNT_DETACH) })

	cmd := exec.Command(unshare, "--pid", "--mount-proc", "--kill-child=SIGTERM", agent, "run", "--proc-root", hostProc,
		"--metrics-addr", "", "--scan-interval", "200ms", "--log-format", "json", "--output", "json")
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=", "NODE_NAME=")
	// unshare ignores SIGTERM while it waits for the agent: signal the group, reaching both.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, logs testkit.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	waitLogged(t, &logs, "the agent to trace the fixture through --proc-root", func() bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d`, ctl.PID()))
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "proc-root",
		Annotations: map[string]string{"scripted.reconscope.io/script": "success"}}}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, &logs, "a span of the fixture", func() bool {
		return strings.Contains(out.String(), `"name":"proc-root"`) && strings.Contains(out.String(), fmt.Sprintf(`"pid":%d`, ctl.PID()))
	})
	// Still traced a while later: liveness is read from --proc-root too, not from the agent's
	// own PID namespace (where the fixture does not exist).
	time.Sleep(2 * time.Second)
	// The fixture's pid only: the agent traces every process of the machine, and another
	// test's controller on it may exit meanwhile.
	if strings.Contains(logs.String(), fmt.Sprintf(`"msg":"process exited","pid":%d}`, ctl.PID())) {
		t.Errorf("the agent took the fixture for exited:\n%s", logs.String())
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent exit on SIGTERM: %v\n%s", err, logs.String())
	}
}

// metricValue is the value of the unlabelled series name in a Prometheus text body, -1 when
// absent.
func metricValue(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}
