package tracer_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

// traceFake runs fakectl under the tracer and returns its ground truth and our spans.
func traceFake(t *testing.T, bin string, args ...string) ([]fakectltest.Truth, []span.Span, tracer.Stats) {
	t.Helper()
	truths, spans, stats, _ := traceFakeWith(t, fakectltest.Catalog(t), bin, args...)
	return truths, spans, stats
}

// traceFakeWith is traceFake with a catalog of the test's; it also returns the plan.
func traceFakeWith(t *testing.T, catalog []*probes.Probe, bin string, args ...string) ([]fakectltest.Truth, []span.Span, tracer.Stats, *probes.Plan) {
	t.Helper()
	startFile := filepath.Join(t.TempDir(), "start")
	var stdout bytes.Buffer
	cmd := exec.Command(bin, append([]string{"-start", startFile}, args...)...)
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	sink := &testkit.Sink{}
	tr, err := tracer.New(tracer.Options{
		Catalog: catalog,
		Writer:  sink,
		Logger:  testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	plan, err := tr.TracePID(cmd.Process.Pid)
	if err != nil {
		t.Fatalf("trace fakectl: %v", err)
	}
	if len(plan.Sites) < 2 {
		t.Fatalf("plan has %d sites, want an entry and at least one return", len(plan.Sites))
	}
	stop := testkit.Go(t, tr.Run)

	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("fakectl failed while traced: %v", err)
	}
	// The tracer notices the exit and closes the process at an idle poll.
	testkit.Poll(10*time.Second, func() bool { return len(tr.PIDs()) == 0 })
	if n := len(tr.PIDs()); n > 0 {
		t.Errorf("tracer still traces %d processes after fakectl exited", n)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	truths, err := fakectltest.ReadTruths(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return truths, sink.Snapshot(), tr.Stats(), plan
}

// checkMatch asserts one span per ground-truth reconcile with the same fields, and no event
// lost. wantController "" means the controller's name cannot be known (stripped build): the
// span must then have none, rather than a wrong one.
func checkMatch(t *testing.T, truths []fakectltest.Truth, spans []span.Span, stats tracer.Stats, wantController string) {
	t.Helper()
	if stats.Kernel.LostRingBuffer != 0 {
		t.Errorf("lost %d events", stats.Kernel.LostRingBuffer)
	}
	if len(spans) != len(truths) {
		t.Logf("tracer stats: %+v", stats)
	}
	testkit.Compare(t, truths, spans, testkit.Match{NoController: wantController == ""})
}

func TestTraceFakeController(t *testing.T) {
	bpftest.Require(t)
	builds := []struct {
		name       string
		env        []string
		args       []string
		controller string // stripped builds have no DWARF for the fake Controller: no name
	}{
		{"plain", nil, nil, "fake"},
		{"stripped", nil, []string{"-ldflags=-s -w"}, ""},
		{"pie", nil, []string{"-buildmode=pie"}, "fake"},
		{"cgo", []string{"CGO_ENABLED=1"}, []string{"-ldflags=-linkmode=external"}, "fake"},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			bin := testkit.BuildEnv(t, "./test/fakectl", b.env, b.args...)
			truths, spans, stats := traceFake(t, bin, "-n", "140", "-deep", "40")
			if len(truths) != 140 {
				t.Fatalf("fakectl reported %d reconciles, want 140", len(truths))
			}
			checkMatch(t, truths, spans, stats, b.controller)
		})
	}
}

// TestGoroutinesJoinSpan: each reconcile of fakectl -list -spawn lists from the cache on its own
// goroutine, then starts a goroutine that lists from the cache too. With goroutine inheritance
// (auto: the goroutine probes at newproc's calls, the catalog's choice; newproc1: at newproc1's
// entry and RETs, its fallback) both calls are in the reconcile's span, the second made by
// another goroutine. With it off (--goroutine-inheritance=off) the plan has no goroutine site,
// and each span has its own goroutine's call only and is as exact otherwise.
func TestGoroutinesJoinSpan(t *testing.T) {
	bpftest.Require(t)
	list, err := fakectltest.ListProbe()
	if err != nil {
		t.Fatal(err)
	}
	bin := testkit.Build(t, "./test/fakectl")
	for _, tc := range []struct {
		inherit probes.Inheritance
		at      string // the function the goroutine-start sites are in; "": no goroutine site
	}{
		{probes.InheritAuto, "runtime.newproc.func1"},
		{probes.InheritNewproc1, "runtime.newproc1"},
		{probes.InheritOff, ""},
	} {
		t.Run(tc.inherit.String(), func(t *testing.T) {
			const n = 60
			catalog := tc.inherit.Catalog(append(append(fakectltest.Catalog(t), list), probes.GoroutineProbes...))
			truths, spans, stats, plan := traceFakeWith(t, catalog, bin, "-n", strconv.Itoa(n), "-workers", "3", "-list", "-spawn")
			goroutineSites := 0
			for _, s := range plan.Sites {
				if s.Probe.Role == probes.RoleSpawn || s.Probe.Role == probes.RoleExit {
					goroutineSites++
				}
				if s.Probe.Role == probes.RoleSpawn && s.Function.Name != tc.at {
					t.Errorf("goroutine-start site in %s, want %q", s.Function.Name, tc.at)
				}
			}
			if (goroutineSites == 0) != (tc.at == "") {
				t.Errorf("%d goroutine sites (plan %s)", goroutineSites, plan)
			}
			checkMatch(t, truths, spans, stats, "fake")
			wantOthers := 1 // the call of the goroutine the reconcile started
			if tc.at == "" {
				wantOthers = 0
			}
			joined := 0
			for _, sp := range spans {
				own, others := 0, 0
				for _, c := range sp.Calls {
					switch {
					case c.Kind != span.CallCacheList || c.Goroutine <= 0:
						t.Errorf("span of %s (goroutine %d): call %+v, want a cache list by a known goroutine", sp.Name, sp.Goid, c)
					case c.Goroutine == sp.Goid:
						own++
					default:
						others++
					}
				}
				if own != 1 || others != wantOthers {
					t.Errorf("span of %s: %d calls by its goroutine and %d by others, want 1 and %d", sp.Name, own, others, wantOthers)
				}
				joined += others
			}
			if joined != n*wantOthers || (wantOthers == 1) != (stats.Kernel.Inherited >= n) {
				t.Errorf("%d of %d reconciles have their goroutine's call; the kernel counted %d inheriting goroutines", joined, n, stats.Kernel.Inherited)
			}
		})
	}
}

// TestReturnAddressSites: fakectl's reconciles traced with the return probed at the return
// address of Handle's call of Reconcile (a JMP, emulated) give the spans its ground truth
// says, as they do with the return probed at Reconcile's RETs (single-stepped).
func TestReturnAddressSites(t *testing.T) {
	bpftest.Require(t)
	atRet, err := fakectltest.Probe()
	if err != nil {
		t.Fatal(err)
	}
	atAddr, err := fakectltest.ReturnAddressProbe()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		name       string
		flags      []string
		controller string
	}{{"plain", nil, "fake"}, {"stripped", []string{"-ldflags=-s -w"}, ""}} {
		bin := testkit.Build(t, "./test/fakectl", b.flags...)
		for _, tc := range []struct {
			name  string
			probe *probes.Probe
		}{{"ret", atRet}, {"return-address", atAddr}} {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				truths, spans, stats, plan := traceFakeWith(t, []*probes.Probe{tc.probe}, bin, "-n", "140", "-workers", "2", "-deep", "40")
				if len(truths) != 140 {
					t.Fatalf("fakectl reported %d reconciles, want 140", len(truths))
				}
				for _, s := range plan.Sites {
					if s.Kind != probes.SiteReturn {
						continue
					}
					atAddress := s.In.Name != ""
					if atAddress != (tc.probe == atAddr) || (atAddress && (!strings.HasPrefix(s.Insn, "JMP ") || !strings.HasSuffix(s.In.Name, ").Handle"))) {
						t.Errorf("return site %s %q (choices %+v)", s.Where(), s.Insn, plan.Choices)
					}
				}
				checkMatch(t, truths, spans, stats, b.controller)
				if stats.Assembler.Abandoned != 0 || stats.Assembler.OrphanReturns != 0 {
					t.Errorf("entries and returns do not pair: %+v", stats.Assembler)
				}
				checkProbeHits(t, plan, spans)
			})
		}
	}
}

// checkProbeHits checks that every span counts the two hits a reconcile of a probe without
// calls costs (its entry and one return site), each of the kind its site's instruction is:
// single-stepped ones as the plan says of the sites (a RET on amd64), emulated the others.
func checkProbeHits(t *testing.T, plan *probes.Plan, spans []span.Span) {
	t.Helper()
	var want span.ProbeHits
	kinds := map[probes.SiteKind]map[bool]bool{probes.SiteEntry: {}, probes.SiteReturn: {}}
	for _, s := range plan.Sites {
		kinds[s.Kind][s.Emulated] = true
	}
	for kind, seen := range kinds {
		if len(seen) != 1 {
			t.Fatalf("the plan's %v sites are not all of one trap kind: %v", kind, plan.Sites)
		}
		if seen[true] {
			want.Emulated++
		} else {
			want.SingleStepped++
		}
	}
	bad := 0
	for _, sp := range spans {
		if sp.ProbeHits != want {
			if bad++; bad <= 3 {
				t.Errorf("span %s/%s counts probe hits %+v, want %+v", sp.Namespace, sp.Name, sp.ProbeHits, want)
			}
		}
	}
	t.Logf("%d spans, each %+v", len(spans), want)
}

// TestTraceStress: 8 workers, 10 000 reconciles with stack growth and forced GC inside.
func TestTraceStress(t *testing.T) {
	bpftest.Require(t)
	if testing.Short() {
		t.Skip("stress test skipped in -short mode")
	}
	bin := testkit.Build(t, "./test/fakectl")
	truths, spans, stats := traceFake(t, bin, "-n", "10000", "-workers", "8", "-deep", "64", "-gc-every", "500")
	if len(truths) != 10000 {
		t.Fatalf("fakectl reported %d reconciles, want 10000", len(truths))
	}
	checkMatch(t, truths, spans, stats, "fake")
	if stats.Assembler.Abandoned != 0 || stats.Assembler.OrphanReturns != 0 {
		t.Errorf("entries and returns do not pair: %+v", stats.Assembler)
	}
}

// TestAttachDetachBusy attaches to and detaches from a busy process 50 times: the process
// keeps its own counts right, no uretprobe is ever created, and no link is left behind.
func TestAttachDetachBusy(t *testing.T) {
	bpftest.Require(t)
	forEachAttachMode(t, func(t *testing.T, single bool) {
		bin := testkit.Build(t, "./test/fakectl")
		before := bpftest.LinksOn(t, bin)
		if len(before) != 0 {
			t.Fatalf("links on a fresh binary before attaching: %+v", before)
		}
		startFile := filepath.Join(t.TempDir(), "start")
		if err := os.WriteFile(startFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		stopFile := filepath.Join(t.TempDir(), "stop")
		cmd := exec.Command(bin, "-start", startFile, "-stop", stopFile, "-n", "100000000", "-workers", "4", "-interval", "200us", "-deep", "30")
		cmd.Stdout = &stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()

		sawSpans := 0
		for i := 0; i < 50; i++ {
			sink := &testkit.Sink{}
			tr, err := tracer.New(tracer.Options{
				Catalog:   fakectltest.Catalog(t),
				Writer:    sink,
				Logger:    testkit.Quiet(),
				Collector: collectorOpts(single),
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.TracePID(cmd.Process.Pid); err != nil {
				tr.Close()
				t.Fatalf("attach %d: %v", i, err)
			}
			for _, l := range bpftest.LinksOn(t, bin) {
				if l.Return {
					t.Fatalf("attach %d created a return probe: %+v", i, l)
				}
			}
			if got := bpftest.LinksOn(t, bin); len(got) == 0 {
				t.Fatalf("attach %d: no uprobe link in the kernel for the binary", i)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
			if err := tr.Run(ctx); err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
			cancel()
			if err := tr.Close(); err != nil {
				t.Fatalf("detach %d: %v", i, err)
			}
			if left := bpftest.LinksLeftOn(t, bin); len(left) != 0 {
				t.Fatalf("after detach %d, links left: %+v", i, left)
			}
			sawSpans += sink.Count()
		}
		if sawSpans == 0 {
			t.Error("50 attaches saw no reconcile at all")
		}
		if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := <-exited; err != nil {
			t.Fatalf("busy process failed: %v", err)
		}
		// Its own record: every object reconciled exactly once, obj-0 .. obj-(n-1).
		truths, err := fakectltest.ReadTruths(stdout.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		n := fakectltest.CheckEachOnce(t, truths)
		t.Logf("busy process: %d reconciles, %d seen by the 50 short traces", n, sawSpans)
	})
}

// forEachAttachMode runs test as a subtest for each way the collector attaches: one
// uprobe_multi link, and single uprobes (one link per site).
func forEachAttachMode(t *testing.T, test func(t *testing.T, single bool)) {
	for _, single := range []bool{false, true} {
		name := "uprobe_multi"
		if single {
			name = "single_uprobes"
		}
		t.Run(name, func(t *testing.T) { test(t, single) })
	}
}

func collectorOpts(single bool) collector.Options {
	return collector.Options{ForceSingleUprobes: single}
}
