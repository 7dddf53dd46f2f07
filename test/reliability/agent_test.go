package reliability

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/internal/testproc"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

// agentAndBusyFakectl is where the agent's tests start: it skips (or fails, under
// RECONSCOPE_REQUIRE_BPF=1) without eBPF, builds the agent (programs), copies fakectl into a
// folder of the test's own (copyRelctl) and starts the copy reconciling until stopFile exists:
// workers goroutines, a pause of interval after each reconcile.
func agentAndBusyFakectl(t *testing.T, workers int, interval string) (agent, bin, stopFile string, ctl *testproc.Process) {
	t.Helper()
	bpftest.Require(t)
	_, agent = programs(t)
	dir := t.TempDir()
	bin, stopFile = copyRelctl(t, dir), filepath.Join(dir, "stop")
	ctl = testproc.Start(t, "fakectl", exec.Command(bin, "-n", "1000000000", "-workers", strconv.Itoa(workers), "-interval", interval, "-stop", stopFile))
	return agent, bin, stopFile, ctl
}

// stopFakectl ends fakectl cleanly and checks it never crashed and reconciled every object
// exactly once (obj-0 .. obj-(n-1)): the probes did not disturb it.
func stopFakectl(t *testing.T, p *testproc.Process, stopFile string) int {
	t.Helper()
	if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Wait() != nil {
		t.Fatalf("fakectl failed while traced: %v", p.Wait())
	}
	return fakectltest.CheckEachOnce(t, readTruths(t, output(t, p)))
}

// startAgent runs the agent's trace command on pid, printing JSON lines.
func startAgent(t *testing.T, agent, bin string, pid int, extra ...string) *testproc.Process {
	t.Helper()
	return testproc.Start(t, "agent", agentCommand(agent, agentProbe(t, bin), pid, extra...))
}

// agentCommand is the agent's trace command on pid with --probe probe (agentProbe), printing
// JSON lines.
func agentCommand(agent, probe string, pid int, extra ...string) *exec.Cmd {
	args := append([]string{"trace", "--pid", strconv.Itoa(pid), "--output", "json", "--probe", probe}, extra...)
	return exec.Command(agent, args...)
}

// stopAgent stops the agent with SIGTERM and fails t unless it exits cleanly.
func stopAgent(t *testing.T, a *testproc.Process) {
	t.Helper()
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.Done()
	if a.Wait() != nil {
		t.Errorf("agent exited with %v", a.Wait())
	}
}

// waitSpans waits until the agent has printed at least n spans of process pid.
func waitSpans(t *testing.T, a *testproc.Process, pid, n int, what string) int {
	t.Helper()
	return waitSpansFrom(t, a, pid, 0, n, what)
}

// waitSpansFrom waits until the agent has printed at least n spans of process pid for
// objects numbered from first on (fakectl numbers its reconciles in order).
func waitSpansFrom(t *testing.T, a *testproc.Process, pid, first, n int, what string) int {
	t.Helper()
	got := 0
	testkit.Eventually(t, fmt.Sprintf("%d spans %s", n, what), 2*time.Minute, func() bool {
		if a.Exited() {
			t.Fatalf("agent exited (%v) while waiting for spans %s", a.Wait(), what)
		}
		got = 0
		for _, s := range agentSpans(t, a) {
			var i int
			if _, err := fmt.Sscanf(s.Name, "obj-%d-", &i); err != nil || s.PID != pid || s.Controller != "fake" || s.Result == "abandoned" {
				continue
			}
			if i >= first {
				got++
			}
		}
		return got >= n
	})
	return got
}

// TestAgentKilled: the agent is SIGKILLed while tracing, three times. Each time the kernel
// drops every uprobe link with the agent's file descriptors (nothing is pinned), the traced
// process goes on unharmed, and a new agent traces it again.
func TestAgentKilled(t *testing.T) {
	agent, bin, stop, ctl := agentAndBusyFakectl(t, 2, "2ms")

	for round := range 3 {
		a := startAgent(t, agent, bin, ctl.PID())
		n := waitSpans(t, a, ctl.PID(), 20, fmt.Sprintf("(agent %d)", round+1))
		links := bpftest.LinksOn(t, bin)
		if len(links) == 0 {
			t.Fatalf("agent %d traces, but the kernel lists no uprobe link on %s", round+1, bin)
		}
		for _, l := range links {
			if l.Return {
				t.Fatalf("agent %d made a return probe: %+v", round+1, l)
			}
		}
		kill(t, a)
		testkit.Eventually(t, "the kernel to drop the killed agent's links", time.Minute, func() bool { return len(bpftest.LinksOn(t, bin)) == 0 })
		if ctl.Exited() {
			t.Fatalf("fakectl died (%v) after agent %d was killed", ctl.Wait(), round+1)
		}
		t.Logf("agent %d: %d spans, %d links (%s), SIGKILL, links left: 0", round+1, n, len(links), links[0].Kind)
	}
	total := stopFakectl(t, ctl, stop)
	t.Logf("fakectl: %d reconciles, each exactly once, exit 0", total)
}

// TestBinaryDeletedOrReplaced: the traced binary is removed or replaced (a new file renamed
// over it, as package managers and image updates do) while its process runs, before or after
// the agent attaches. The agent attaches through /proc/PID/exe, which still names the running
// inode: spans keep coming, the agent does not fail, the process is unharmed.
func TestBinaryDeletedOrReplaced(t *testing.T) {
	bpftest.Require(t)
	_, agent := programs(t)
	replace := func(t *testing.T, bin string) {
		t.Helper()
		// A different executable at the same path: the agent, renamed over it.
		b, err := os.ReadFile(agent)
		if err != nil {
			t.Fatal(err)
		}
		tmp := bin + ".new"
		if err := os.WriteFile(tmp, b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, bin); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(t *testing.T, bin string) {
		t.Helper()
		if err := os.Remove(bin); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		change func(*testing.T, string)
		before bool // change the file before the agent attaches
	}{
		{"deleted-while-traced", remove, false},
		{"replaced-while-traced", replace, false},
		{"deleted-before-attach", remove, true},
		{"replaced-before-attach", replace, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, bin, stop, ctl := agentAndBusyFakectl(t, 2, "2ms")
			probe := agentProbe(t, bin) // read the symbol while the file is still there
			if tc.before {
				tc.change(t, bin)
			}
			a := testproc.Start(t, "agent", agentCommand(agent, probe, ctl.PID()))
			n := waitSpans(t, a, ctl.PID(), 20, "before the change")
			if !tc.before {
				tc.change(t, bin)
			}
			// Reconciles that began after the change: numbered past what fakectl had printed.
			after := len(lines(t, ctl)) + 8
			m := waitSpansFrom(t, a, ctl.PID(), after, 100, "of reconciles begun after the change")
			exe := agentSpans(t, a)[0].Exe
			stopAgent(t, a)
			total := stopFakectl(t, ctl, stop)
			t.Logf("%d spans before the change, %d of reconciles from obj-%d on (exe reported as %q); fakectl: %d reconciles, exit 0", n, m, after, exe, total)
		})
	}
}

// freePort returns a loopback port nothing listens on (it was free a moment ago).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// scrape reads one metric (without labels) from the agent's /metrics.
func scrape(t *testing.T, addr, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// vmRSS reads a process's resident set size in KiB.
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestOTLPUnreachable: the agent exports over OTLP/gRPC to a port nothing listens on. It
// keeps tracing and printing, its /metrics counts the spans it could not deliver, and its
// memory stays bounded (the export queue is bounded) while thousands of spans go nowhere.
func TestOTLPUnreachable(t *testing.T) {
	agent, bin, stop, ctl := agentAndBusyFakectl(t, 4, "100us")
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a := startAgent(t, agent, bin, ctl.PID(),
		"--otlp-endpoint", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--otlp-protocol", "grpc", "--metrics-addr", metrics)

	const limitKiB = 200 << 10
	var rss []int
	var dropped []float64
	lines := 0
	for i := range 4 {
		// Each step: thousands more spans printed, and more dropped on the way to OTLP.
		want := (i + 1) * 3000
		waitSpans(t, a, ctl.PID(), want, fmt.Sprintf("(step %d)", i+1))
		var d float64
		testkit.Eventually(t, "reconscope_spans_dropped_total to rise", 2*time.Minute, func() bool {
			v, ok := scrape(t, metrics, "reconscope_spans_dropped_total")
			d = v
			return ok && v > 0 && (len(dropped) == 0 || v > dropped[len(dropped)-1])
		})
		dropped = append(dropped, d)
		rss = append(rss, vmRSS(t, a.PID()))
		if rss[i] > limitKiB {
			t.Errorf("agent RSS %d KiB, more than %d KiB", rss[i], limitKiB)
		}
		lines = len(agentSpans(t, a))
	}
	exported, ok := scrape(t, metrics, "reconscope_spans_exported_total")
	if !ok {
		t.Error("no reconscope_spans_exported_total on the agent's /metrics (a missing series is not 0)")
	}
	reconciles, ok := scrape(t, metrics, `reconscope_reconcile_total{controller="fake",k8s_container_name="",k8s_namespace_name="",k8s_pod_name="",k8s_workload_kind="",k8s_workload_name="",result="success",service_name=""}`)
	if !ok || reconciles == 0 {
		t.Errorf("reconscope_reconcile_total of fake's successes on the agent's /metrics: %v (present: %v), want a count", reconciles, ok)
	}
	if exported != 0 {
		t.Errorf("%v spans exported to a port nothing listens on", exported)
	}
	stopAgent(t, a)
	stopFakectl(t, ctl, stop)
	t.Logf("printed %d spans; spans_dropped_total at each step %v; success reconciles counted %v; VmRSS (KiB) %v", lines, dropped, reconciles, rss)
}
