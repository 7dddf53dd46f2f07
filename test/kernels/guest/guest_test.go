package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/symbols"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

var (
	mu     sync.Mutex
	report = Report{Features: map[string]string{}, Traces: map[string]Trace{}}
	failed []string
)

func record(f func(r *Report)) {
	mu.Lock()
	defer mu.Unlock()
	f(&report)
}

func noteFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			failed = append(failed, t.Name())
			mu.Unlock()
		}
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	var u unix.Utsname
	_ = unix.Uname(&u)
	report.Kernel = unix.ByteSliceToString(u.Release[:])
	report.Arch = runtime.GOARCH
	report.Tests = "PASS"
	if code != 0 {
		report.Tests = "FAIL"
	}
	report.FailedTests = strings.Join(failed, " ")
	b, _ := json.Marshal(report)
	fmt.Printf("\n%s%s\n", ResultPrefix, b)
	os.Exit(code)
}

var buildOnce sync.Map

// program returns the path of a prebuilt program in the guest, or builds it on a host.
func program(t *testing.T, name string) string {
	t.Helper()
	if dir := os.Getenv(BinEnv); dir != "" {
		return filepath.Join(dir, name)
	}
	v, _ := buildOnce.LoadOrStore(name, sync.OnceValues(func() (string, error) {
		pkg, args := "./test/fakectl", []string{}
		switch name {
		case "fakectl":
		case "fakectl-stripped":
			args = []string{"-ldflags=-s -w"}
		case "hitloop":
			pkg = "./test/kernels/hitloop"
		default:
			return "", fmt.Errorf("no program %q", name)
		}
		dir, err := os.MkdirTemp("", "reconscope-guest-")
		if err != nil {
			return "", err
		}
		out := filepath.Join(dir, name)
		return out, testkit.GoBuild(out, pkg, nil, args...)
	}))
	path, err := v.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFeatures: every probe answers, and the kernel is above the floor.
func TestFeatures(t *testing.T) {
	bpftest.Require(t)
	noteFailure(t)
	fs := collector.ProbeFeatures()
	for _, f := range fs {
		v := "yes"
		switch {
		case f.Missing():
			v = "no"
		case f.Err != nil:
			v = f.Err.Error()
			t.Errorf("%s: the probe failed: %v", f.Key, f.Err)
		}
		record(func(r *Report) { r.Features[f.Key] = v })
	}
	if err := fs.Floor(); err != nil {
		record(func(r *Report) { r.Floor = err.Error() })
		t.Fatal(err)
	}
}

// TestLoad: the kernel's verifier accepts the programs, and the attach mode follows the
// uprobe_multi feature.
func TestLoad(t *testing.T) {
	bpftest.Require(t)
	noteFailure(t)
	c, err := collector.New(collector.Options{Logger: testkit.Quiet()})
	if err != nil {
		record(func(r *Report) { r.Load = err.Error() })
		t.Fatal(err)
	}
	defer c.Close()
	mode := "single uprobes"
	if c.UprobeMulti() {
		mode = "uprobe_multi"
	}
	record(func(r *Report) { r.Load, r.Mode = "ok", mode })
	if want := collector.ProbeFeatures().Get("uprobe_multi").Err == nil; c.UprobeMulti() != want {
		t.Errorf("uprobe_multi used: %v; the kernel has it: %v", c.UprobeMulti(), want)
	}
}

// TestTraceFake traces the fake controller, plain and stripped, and compares every span with
// its ground truth; where the kernel has uprobe_multi, the plain build is traced once more
// with it pretended missing (the single-uprobe fallback).
func TestTraceFake(t *testing.T) {
	bpftest.Require(t)
	type build struct {
		name, prog, pretend string
		controller          bool // stripped builds have no DWARF for the fake Controller's Name
	}
	builds := []build{{"plain", "fakectl", "", true}, {"stripped", "fakectl-stripped", "", false}}
	if collector.ProbeFeatures().Get("uprobe_multi").Err == nil {
		builds = append(builds, build{"plain, uprobe_multi pretended missing", "fakectl", "uprobe_multi", true})
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			noteFailure(t)
			if b.pretend != "" {
				t.Setenv(collector.PretendMissingEnv, b.pretend)
			}
			tr := traceFake(t, program(t, b.prog), b.controller, 140)
			record(func(r *Report) { r.Traces[b.name] = tr })
		})
	}
}

func traceFake(t *testing.T, bin string, checkController bool, n int) Trace {
	t.Helper()
	startFile := filepath.Join(t.TempDir(), "start")
	var stdout bytes.Buffer
	cmd := exec.Command(bin, "-start", startFile, "-n", strconv.Itoa(n), "-deep", "40")
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p, err := fakectltest.Probe()
	if err != nil {
		t.Fatal(err)
	}
	sink := &testkit.Sink{}
	var logs bytes.Buffer
	tr, err := tracer.New(tracer.Options{Catalog: []*probes.Probe{p}, Writer: sink, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.TracePID(cmd.Process.Pid); err != nil {
		t.Fatalf("trace fakectl: %v", err)
	}
	mode := "uprobe_multi"
	if strings.Contains(logs.String(), "attaching one uprobe per site") {
		mode = "single uprobes"
	}
	stop := testkit.Go(t, tr.Run)
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("fakectl failed while traced: %v", err)
	}
	// The tracer notices the exit and closes the process at an idle poll; spans it did not
	// write by then are counted below.
	testkit.Poll(20*time.Second, func() bool { return len(tr.PIDs()) == 0 })
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	truths, err := fakectltest.ReadTruths(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	spans := sink.Snapshot()
	st := tr.Stats()
	res := Trace{Mode: mode, Reconciles: len(truths), Spans: len(spans), Lost: st.Kernel.LostRingBuffer}
	res.Exact = testkit.Compare(t, truths, spans, testkit.Match{NoController: !checkController})
	if len(truths) != n || len(spans) != len(truths) || res.Lost != 0 {
		t.Errorf("%d reconciles, %d spans, %d lost; want %d, %d, 0", len(truths), len(spans), res.Lost, n, n)
	}
	t.Logf("%s: %d of %d spans exact (%s)", filepath.Base(bin), res.Exact, len(truths), mode)
	return res
}

// TestHitCost measures what one probe hit costs a traced program on this kernel: hitloop's
// time per call with a probe on main.work's entry site, or on its RET, minus the untraced
// time, each the median of 3 interleaved runs. The probe runs an empty program, so this is
// the kernel's uprobe cost (trap, plus single-step or emulation of the probed instruction).
func TestHitCost(t *testing.T) {
	bpftest.Require(t)
	noteFailure(t)
	bin := program(t, "hitloop")
	b, err := symbols.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fn, err := b.Lookup("main.work")
	if err != nil {
		t.Fatal(err)
	}
	entry, err := b.EntrySite(fn)
	if err != nil {
		t.Fatal(err)
	}
	rets, err := b.ReturnSites(fn)
	if err != nil || len(rets) != 1 {
		t.Fatalf("main.work's RETs: %v %v, want one", rets, err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	ex, err := link.OpenExecutable(bin)
	if err != nil {
		t.Fatal(err)
	}
	const calls = 10000
	run := func(site *symbols.Site) float64 {
		t.Helper()
		if site != nil {
			l, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: site.FileOffset})
			if err != nil {
				t.Fatalf("attach at %s: %v", site.Insn, err)
			}
			defer l.Close()
		}
		out, err := exec.Command(bin, "-n", strconv.Itoa(calls)).Output()
		if err != nil {
			t.Fatalf("hitloop: %v", err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			t.Fatalf("hitloop printed %q", out)
		}
		return v
	}
	var base, atEntry, atRet []float64
	for range 3 {
		base = append(base, run(nil))
		atEntry = append(atEntry, run(&entry))
		atRet = append(atRet, run(&rets[0]))
	}
	med := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
	e, r, bs := med(atEntry)-med(base), med(atRet)-med(base), med(base)
	record(func(rp *Report) {
		rp.EntryInsn, rp.RetInsn = entry.Insn, rets[0].Insn
		rp.EntryHitNs, rp.RetHitNs, rp.BaseCallNs = e, r, bs
	})
	t.Logf("per hit: entry (%s) %.0f ns, RET (%s) %.0f ns; untraced call %.0f ns", entry.Insn, e, rets[0].Insn, r, bs)
	if e <= 0 || r <= 0 {
		t.Errorf("a probe hit cost nothing measurable (entry %.0f ns, RET %.0f ns): the probes did not fire", e, r)
	}
}

// TestExecNotifications: the sched_process_exec raw tracepoint reports each new program.
func TestExecNotifications(t *testing.T) {
	bpftest.Require(t)
	noteFailure(t)
	c, err := collector.New(collector.Options{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	execs, err := c.WatchExecs(ctx)
	if err != nil {
		record(func(r *Report) { r.Execs = err.Error() })
		t.Fatal(err)
	}
	var smu sync.Mutex
	seenPIDs := map[int]bool{}
	go func() {
		for ex := range execs {
			smu.Lock()
			seenPIDs[ex.PID] = true
			smu.Unlock()
		}
	}()
	var pids []int
	for range 5 {
		cmd := exec.Command("true")
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	// Not WaitFor: the report records how many were seen either way.
	seen := 0
	testkit.Poll(20*time.Second, func() bool {
		smu.Lock()
		defer smu.Unlock()
		seen = 0
		for _, p := range pids {
			if seenPIDs[p] {
				seen++
			}
		}
		return seen == len(pids)
	})
	record(func(r *Report) { r.Execs = fmt.Sprintf("%d/%d seen", seen, len(pids)) })
	if seen != len(pids) {
		t.Fatalf("%d of %d execs reported", seen, len(pids))
	}
}
