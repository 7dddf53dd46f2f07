package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/testenv"
)

// traceWorkQueues skips (or fails, under RECONSCOPE_REQUIRE_BPF=1) without eBPF, builds the
// client-go fixture (go build flags) and traces every process that execs it
// (testenv.TraceExe), the tracer running until stop or the test's end: the fixture's binary,
// the tracer, its sink and its plan.
func traceWorkQueues(t *testing.T, flags ...string) (bin string, tr *tracer.Tracer, s *testkit.Sink, plan *probes.Plan, stop func() error) {
	t.Helper()
	bpftest.Require(t)
	bin = testkit.Build(t, "./test/fixtures/workqueue-controller", flags...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tr, s, plan = testenv.TraceExe(t, ctx, bin)
	t.Cleanup(func() { tr.Close() })
	return bin, tr, s, plan, testkit.Go(t, tr.Run)
}

// TestWorkQueueItems traces a program that uses client-go's work queues and nothing else
// reconscope knows (no controller-runtime, no catalogued handler), from its exec: every item
// its workers processed is one span, of the queue's name (an unnamed queue's: its worker function's, probes.WorkerName), for
// the item's object (string keys, NamespacedName) or type (pointers), with the result the
// worker chose (Forget: success, AddRateLimited: error, AddAfter: requeue_after and its delay),
// exactly as the program's own record of what it did. Plain and stripped.
func TestWorkQueueItems(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	for _, stripped := range []bool{false, true} {
		name, flags := "plain", []string{}
		if stripped {
			name, flags = "stripped", []string{"-ldflags=-s -w"}
		}
		t.Run(name, func(t *testing.T) {
			bin, _, s, plan, stop := traceWorkQueues(t, flags...)
			t.Logf("attached %s", plan)

			truth := filepath.Join(t.TempDir(), "truth.jsonl")
			cmd := exec.Command(bin, "-truth", truth, "-items", "40")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("fixture: %v\n%s", err, out)
			}
			want := readQueueTruth(t, truth)
			testkit.WaitFor(t, "a span per item processed", 10*time.Second, func() (bool, string) {
				n := s.Count()
				return n >= len(want), fmt.Sprintf("%d spans, %d items", n, len(want))
			})
			time.Sleep(200 * time.Millisecond) // any extra span
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sp := range s.Snapshot() {
				got = append(got, queueLine(sp.Controller, sp.Namespace, sp.Name, sp.ItemType, string(sp.Result), sp.RequeueAfter))
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("spans differ from the items the program processed (%d spans, %d items):\n%s", len(got), len(want), lineDiff(want, got))
			}
			// Why each ran (issue 27): main added the keys itself (other, from main.main); a
			// flaky key's retry and later's delayed requeue are added by the delaying queue's
			// goroutine, after the worker asked for them.
			kinds := map[string]bool{}
			for _, sp := range s.Snapshot() {
				for _, tr := range sp.Triggers {
					switch {
					case tr.Kind == span.TriggerOther && tr.Function == "main.main":
						kinds["other from main.main"] = true
					case tr.Kind == span.TriggerRetry && strings.HasPrefix(sp.Name, "flaky-"):
						kinds["retry of flaky"] = true
					case tr.Kind == span.TriggerRequeueAfter && sp.Name == "later":
						kinds["requeue_after of later"] = true
					}
				}
			}
			for _, k := range []string{"other from main.main", "retry of flaky", "requeue_after of later"} {
				if !kinds[k] {
					t.Errorf("no span with a trigger %s", k)
				}
			}
		})
	}
}

// TestWorkQueueHitsPerItem measures the probe hits a work-queue item costs a client-go
// program: the kernel's count of hits in two runs of the fixture that differ only in the
// number of items that succeed at once, per item more. Each costs two hits (Get's call of the
// map insert, Done's entry), both at instructions the kernel emulates (TestWorkQueuePlan
// checks the instructions); Forget costs none. An item of a string-keyed queue costs one more,
// its Add (client-go/queue-add, for its queue wait).
func TestWorkQueueHitsPerItem(t *testing.T) {
	bin, tr, s, _, stop := traceWorkQueues(t)
	defer stop()
	// run returns the hits of one run, its items and those of its string-keyed queues.
	run := func(items int) (hits uint64, processed, keyed int) {
		t.Helper()
		before := tr.Stats().Kernel.Hits
		spans := s.Count()
		truth := filepath.Join(t.TempDir(), fmt.Sprintf("truth-%d.jsonl", items))
		if out, err := exec.Command(bin, "-truth", truth, "-items", fmt.Sprint(items)).CombinedOutput(); err != nil {
			t.Fatalf("fixture: %v\n%s", err, out)
		}
		lines := readQueueTruth(t, truth)
		for _, l := range lines {
			if strings.HasPrefix(l, "keys ") || strings.HasPrefix(l, "main.processNextWorkItem ") {
				keyed++
			}
		}
		testkit.WaitFor(t, "the spans of the run", 10*time.Second, func() (bool, string) {
			return s.Count()-spans >= len(lines), fmt.Sprintf("%d spans, %d items", s.Count()-spans, len(lines))
		})
		return tr.Stats().Kernel.Hits - before, len(lines), keyed
	}
	h1, n1, k1 := run(20)
	h2, n2, k2 := run(220)
	perItem := float64(h2-h1) / float64(n2-n1)
	want := 2 + float64(k2-k1)/float64(n2-n1)
	t.Logf("%d hits for %d items, %d hits for %d items: %.3f hits per item more (%d of them string-keyed), want %.3f", h1, n1, h2, n2, perItem, k2-k1, want)
	// A run's own goroutines (timers, the runtime's) can differ by a few hits between runs.
	if perItem < want-0.03 || perItem > want+0.03 {
		t.Errorf("%.3f probe hits per work-queue item, want %.3f", perItem, want)
	}
}

func queueLine(controller, ns, name, itemType, result string, after time.Duration) string {
	return fmt.Sprintf("%s %s/%s %s %s %s", controller, ns, name, itemType, result, after)
}

// lineDiff lists the lines of want missing from got (-) and the lines of got not in want (+),
// each as often as it is missing or extra.
func lineDiff(want, got []string) string {
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	var out []string
	for l, n := range count {
		for ; n > 0; n-- {
			out = append(out, "- "+l)
		}
		for ; n < 0; n++ {
			out = append(out, "+ "+l)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// readQueueTruth reads the fixture's records as the lines queueLine makes of spans, sorted.
func readQueueTruth(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Queue, Namespace, Name, Result string
			ItemType                       string `json:"item_type"`
			AfterNS                        int64  `json:"after_ns"`
			Worker                         string
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Queue == "" {
			r.Queue = probes.WorkerName(r.Worker) // an unnamed queue's spans: its worker's
		}
		if strings.HasPrefix(r.ItemType, "struct {") {
			r.Namespace, r.Name = "", "" // a struct item is named by its type only
		}
		out = append(out, queueLine(r.Queue, r.Namespace, r.Name, r.ItemType, r.Result, time.Duration(r.AfterNS)))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestWorkQueueHandoff traces the fixture's hand-off queues (-handoff): one goroutine takes
// each item with Get and hands it through a channel to a pool of goroutines, which process it
// and call Done. Every item, of each shape whose identity the probes know (string keys,
// NamespacedName, a struct of three strings as kube-controller-manager's taint eviction queue
// holds, pointers), is one span, from Get to the Done on the other goroutine, with the result
// the pool goroutine chose (its AddRateLimited and AddAfter, also off the Get's goroutine),
// exactly as the program's own record; no span of an item that could not be paired, none lost.
func TestWorkQueueHandoff(t *testing.T) {
	t.Parallel() // its own control plane, executables (copies) and tracer
	bin, tr, s, _, stop := traceWorkQueues(t)

	truth := filepath.Join(t.TempDir(), "truth.jsonl")
	if out, err := exec.Command(bin, "-truth", truth, "-items", "40", "-handoff").CombinedOutput(); err != nil {
		t.Fatalf("fixture: %v\n%s", err, out)
	}
	want := readQueueTruth(t, truth)
	queues := map[string]int{}
	for _, l := range want {
		q, _, _ := strings.Cut(l, " ")
		queues[q]++
	}
	if len(queues) != 4 {
		t.Fatalf("the fixture's record names queues %v, want the four handoff-* queues", queues)
	}
	spansOf := func() []string {
		var out []string
		for _, sp := range s.Snapshot() {
			out = append(out, queueLine(sp.Controller, sp.Namespace, sp.Name, sp.ItemType, string(sp.Result), sp.RequeueAfter))
		}
		slices.Sort(out)
		return out
	}
	testkit.WaitFor(t, "a span per item", 10*time.Second, func() (bool, string) {
		got := spansOf()
		return len(got) >= len(want), fmt.Sprintf("%d spans, %d items", len(got), len(want))
	})
	time.Sleep(200 * time.Millisecond) // any extra span
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := spansOf()
	if !slices.Equal(got, want) {
		t.Errorf("spans differ from the handed-off items the program processed (%d spans, %d items):\n%s", len(got), len(want), lineDiff(want, got))
	}
	st := tr.Stats()
	t.Logf("%d items paired across goroutines (per queue %v); kernel: %d hand-offs; assembler: %d paired, %d lost",
		len(want), queues, st.Kernel.Handed, st.Assembler.Handoffs, st.Assembler.HandoffsLost)
	if st.Assembler.Handoffs != uint64(len(want)) {
		t.Errorf("%d items paired by the assembler, want %d", st.Assembler.Handoffs, len(want))
	}
	if st.Assembler.HandoffsLost != 0 {
		t.Errorf("%d items counted lost, want none", st.Assembler.HandoffsLost)
	}
}
