package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/testenv"
)

// memoryAgent is one agent of BenchmarkAgentMemory: a build, its --detail, its environment.
type memoryAgent struct {
	label, bin, detail string
	env                []string
	pprof              string
	p                  *testenv.Process
}

// memoryAgents parses RECONSCOPE_BENCH_MEMORY_AGENTS: comma-separated
// LABEL=PATH[:DETAIL[:VAR=VALUE+VAR=VALUE]] items; default: the agent built here at detail
// calls and at detail reconcile.
func memoryAgents(b *testing.B) []*memoryAgent {
	spec := os.Getenv("RECONSCOPE_BENCH_MEMORY_AGENTS")
	if spec == "" {
		bin := testkit.Build(b, "./cmd/agent")
		spec = "calls=" + bin + ":calls,reconcile=" + bin + ":reconcile"
	}
	var out []*memoryAgent
	for i, item := range strings.Split(spec, ",") {
		label, rest, ok := strings.Cut(item, "=")
		if !ok {
			b.Fatalf("RECONSCOPE_BENCH_MEMORY_AGENTS item %q: want LABEL=PATH[:DETAIL[:VAR=VALUE+...]]", item)
		}
		f := strings.SplitN(rest, ":", 3)
		a := &memoryAgent{label: label, bin: f[0], pprof: fmt.Sprintf("127.0.0.1:%d", 16060+i)}
		if len(f) > 1 {
			a.detail = f[1]
		}
		if len(f) > 2 {
			a.env = strings.Split(f[2], "+")
		}
		out = append(out, a)
	}
	return out
}

// BenchmarkAgentMemory measures where the node agent's memory goes (issue 28, item 4), for
// several builds or settings side by side in one run: kube-controller-manager (unstripped, all
// its default controllers) and a controller-runtime manager (test/fixtures/scripted-controller,
// five controllers) on a test control plane, each agent `reconscope-agent run` with a config
// that includes those two executables, while Deployments are scaled and ConfigMaps created for
// RECONSCOPE_BENCH_MEMORY_FOR (60s). It logs each agent's resident memory (anonymous and
// file-backed) and CPU about every 10 s, and at the end its peak, its eBPF maps' memlock, and
// writes into RECONSCOPE_BENCH_MEMORY_OUT/LABEL (when set) its heap profile (heap.pb.gz:
// go tool pprof -sample_index=inuse_space -top), the runtime's memory statistics (heap.txt),
// smaps and smaps_rollup. RECONSCOPE_BENCH_MEMORY_AGENTS chooses the agents (memoryAgents):
//
//	RECONSCOPE_BENCH_MEMORY_AGENTS=before=$PWD/agent-before:calls,after=$PWD/agent-after:calls \
//	go test -v -run '^$' -bench BenchmarkAgentMemory -benchtime 1x ./test/bench/scale
func BenchmarkAgentMemory(b *testing.B) {
	if os.Geteuid() != 0 {
		bpftest.SkipOrFail(b, "needs root: the agents attach eBPF uprobes")
	}
	agents := memoryAgents(b)
	out := os.Getenv("RECONSCOPE_BENCH_MEMORY_OUT")
	dur := envDuration(b, "RECONSCOPE_BENCH_MEMORY_FOR", time.Minute)
	env := testenv.Start(b, testenv.Options{ControllerManager: []string{"*"}})
	fixture := testkit.Build(b, "./test/fixtures/scripted-controller")
	testenv.StartProcess(b, "scripted-controller", exec.Command(fixture, "--kubeconfig", env.Kubeconfig,
		"--controllers", "5", "--metrics-bind-address", "127.0.0.1:0", "--controller-name", "memory"))
	config := filepath.Join(b.TempDir(), "config.yaml")
	must(b, os.WriteFile(config, []byte(fmt.Sprintf("include:\n  - executables: [%q, %q]\n", env.ControllerManagerPath, fixture)), 0o644))
	for i, a := range agents {
		args := []string{"run", "--config", config, "--kubeconfig", env.Kubeconfig, "--node-name", "memory", "-o", "json",
			"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", 19464+i), "--pprof-addr", a.pprof}
		if a.detail != "" {
			args = append(args, "--detail", a.detail)
		}
		cmd := exec.Command(a.bin, args...)
		cmd.Stdout = io.Discard
		cmd.Env = append(os.Environ(), a.env...)
		a.p = testenv.StartProcess(b, "reconscope-agent-"+a.label, cmd)
	}
	for _, a := range agents {
		testkit.WaitFor(b, a.label+" attached to both executables", 3*time.Minute, func() (bool, string) {
			raw, _ := os.ReadFile(a.p.StderrPath())
			return strings.Count(string(raw), `"msg":"attached"`) >= 2, "fewer than two 'attached' lines in its log"
		})
	}
	ctx := context.Background()
	const ns = "memory"
	must(b, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	report := func(when string) {
		for _, a := range agents {
			status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.p.PID()))
			cpu, _ := cpuTime(a.p.PID())
			b.Logf("%s, %s: %s, CPU %s", when, a.label, statusFields(string(status), "VmRSS", "VmHWM", "RssAnon", "RssFile"), cpu)
		}
	}
	began := time.Now()
	for i := 0; time.Since(began) < dur; i++ {
		for j := range 10 {
			name := fmt.Sprintf("d%d", j)
			if i == 0 {
				must(b, env.Client.Create(ctx, deployment(ns, name, 1)))
			} else {
				patch := client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, 1+i%3)))
				must(b, env.Client.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch))
			}
			cm := fmt.Sprintf("c%d-%d", j, i)
			must(b, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cm,
				Annotations: map[string]string{"scripted.reconscope.io/script": "get:configmap/" + cm}}}))
		}
		time.Sleep(2 * time.Second)
		if i%5 == 0 {
			report(fmt.Sprintf("after %s", time.Since(began).Round(time.Second)))
		}
	}
	report("end")
	for _, a := range agents {
		memlock, maps := mapsMemlock(a.p.PID())
		b.Logf("%s: eBPF maps' memlock %d KiB in %d maps", a.label, memlock>>10, maps)
		if out != "" {
			saveMemoryProfile(b, filepath.Join(out, a.label), a)
		}
		must(b, syscall.Kill(a.p.PID(), syscall.SIGTERM))
		if err := a.p.Wait(); err != nil {
			b.Errorf("reconscope-agent %s: %v", a.label, err)
		}
	}
}

// statusFields picks fields of /proc/PID/status.
func statusFields(status string, names ...string) string {
	var out []string
	for _, line := range strings.Split(status, "\n") {
		for _, n := range names {
			if v, ok := strings.CutPrefix(line, n+":"); ok {
				out = append(out, n+" "+strings.TrimSpace(v))
			}
		}
	}
	return strings.Join(out, ", ")
}

// mapsMemlock sums the memlock of the eBPF maps process pid holds, each map once.
func mapsMemlock(pid int) (memlock uint64, maps int) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	fds, _ := os.ReadDir(dir)
	seen := map[string]bool{}
	for _, fd := range fds {
		raw, _ := os.ReadFile(filepath.Join(dir, fd.Name()))
		var id string
		var kb uint64
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "map_id:"); ok {
				id = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "memlock:"); ok {
				kb, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
		}
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		memlock += kb
		maps++
	}
	return memlock, maps
}

// saveMemoryProfile writes a's heap profile, its runtime memory statistics and its memory maps
// into dir.
func saveMemoryProfile(b *testing.B, dir string, a *memoryAgent) {
	must(b, os.MkdirAll(dir, 0o755))
	for file, url := range map[string]string{"heap.pb.gz": "/debug/pprof/heap", "heap.txt": "/debug/pprof/heap?debug=1"} {
		resp, err := http.Get("http://" + a.pprof + url)
		if err != nil {
			b.Errorf("%s: %v", a.label, err)
			continue
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		must(b, err)
		must(b, os.WriteFile(filepath.Join(dir, file), raw, 0o644))
	}
	for _, file := range []string{"smaps", "smaps_rollup"} {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", a.p.PID(), file))
		must(b, err)
		must(b, os.WriteFile(filepath.Join(dir, file), raw, 0o644))
	}
}
