//go:build soak

package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

// Environment knobs (the defaults are the soak of record).
var (
	soakN       = envInt("SOAK_N", 1_000_000) // reconciles
	soakWorkers = envInt("SOAK_WORKERS", 8)
	// SOAK_INTERVAL is each worker's pause between two reconciles. The default, 300µs, keeps
	// fakectl under the 20 k reconciles/s at which DESIGN.md §6 budgets zero loss, on an idle
	// machine as on a loaded one (sleeps only get longer). 0 runs flat out: measured here at
	// 36–43 k reconciles/s on 2 shared cores, the default 4 MiB ring buffer then lost 0.2–1% of
	// the events (all counted, no wrong span), a 32 MiB one none.
	soakInterval = envDuration("SOAK_INTERVAL", 300*time.Microsecond)
	// SOAK_RING_BUFFER sets the kernel ring buffer's size in bytes (default: the agent's, 4 MiB).
	soakRing = envInt("SOAK_RING_BUFFER", 0)
	// SOAK_RESULT=1 rewrites RESULT.md with this run's figures (make soak sets it).
	writeResult = os.Getenv("SOAK_RESULT") == "1"
)

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// seen is what the soak keeps of one span: enough to compare it with fakectl's ground truth
// without holding a million spans, and free of pointers so that the test's own garbage
// collector has nothing to scan in it (the reader shares this process).
type seen struct {
	count        uint8
	ok           bool // controller, namespace, object name, goid and duration as expected
	incomplete   bool
	result       uint16 // index into recorder.words, as are the two below
	errorType    uint16
	errorMsg     uint16
	requeueAfter time.Duration
}

// recorder indexes spans by the reconcile number that fakectl encodes in its reconcile IDs.
type recorder struct {
	mu    sync.Mutex
	spans []seen
	noID  int // spans whose reconcile ID was not one of fakectl's
	words []string
	ids   map[string]uint16
}

// word returns the index of s in r.words, adding it (all distinct strings past 65534 share
// the last index, and then compare wrong).
func (r *recorder) word(s string) uint16 {
	if id, ok := r.ids[s]; ok {
		return id
	}
	if len(r.words) == 0xffff {
		return 0xffff - 1
	}
	r.words = append(r.words, s)
	r.ids[s] = uint16(len(r.words) - 1)
	return uint16(len(r.words) - 1)
}

func (r *recorder) Write(s *span.Span) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, err := strconv.ParseInt(strings.SplitN(s.ReconcileID, "-", 2)[0], 16, 64)
	if err != nil || len(s.ReconcileID) != 36 || i < 0 || int(i) >= len(r.spans) {
		r.noID++
		return nil
	}
	e := &r.spans[i]
	e.count++
	e.ok = s.Controller == "fake" && s.Namespace == "ns" && s.Name == "obj-"+strconv.Itoa(int(i))+"-" && s.Goid > 0 && s.Duration > 0
	e.incomplete = s.Incomplete
	e.result = r.word(string(s.Result))
	e.errorType = r.word(s.ErrorType)
	e.errorMsg = r.word(s.Error)
	e.requeueAfter = s.RequeueAfter
	return nil
}

type truth = fakectltest.Truth

// TestSoak: 1 M reconciles (stack growth every 7th, a forced GC every 500th, a recovered panic
// every 7th) on 8 workers, traced from the first to the last. The traced process must exit 0;
// entries must equal returns (no abandoned span, no orphan return); every span must match
// fakectl's ground truth; the kernel's hit count must equal events read plus events lost,
// and the goal is no loss at all.
func TestSoak(t *testing.T) {
	bpftest.Require(t)
	dir := t.TempDir()
	bin := testkit.Build(t, "./test/fakectl")
	args := []string{"-n", strconv.Itoa(soakN), "-workers", strconv.Itoa(soakWorkers), "-deep", "64", "-gc-every", "500", "-interval", soakInterval.String()}
	startFile := filepath.Join(dir, "start")
	truthFile := filepath.Join(dir, "truth.jsonl")
	out, err := os.Create(truthFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-start", startFile}, args...)...)
	cmd.Stdout = out
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	rec := &recorder{spans: make([]seen, soakN), ids: map[string]uint16{}}
	tr, err := tracer.New(tracer.Options{
		Collector: collector.Options{RingBufferSize: soakRing},
		Catalog:   fakectltest.Catalog(t),
		Writer:    rec,
		Logger:    testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.TracePID(cmd.Process.Pid); err != nil {
		t.Fatalf("trace fakectl: %v", err)
	}
	stop := testkit.Go(t, tr.Run)

	began := time.Now()
	var before unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &before)
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitErr := cmd.Wait()
	elapsed := time.Since(began)
	out.Close()
	crashed := 0
	if waitErr != nil {
		crashed = 1
		t.Errorf("fakectl did not exit cleanly while traced: %v", waitErr)
	}
	// The tracer notices the exit and closes the process at an idle poll.
	testkit.Poll(60*time.Second, func() bool { return len(tr.PIDs()) == 0 })
	if err := stop(); err != nil {
		t.Fatalf("tracer run: %v", err)
	}
	var after unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &after)
	st := tr.Stats()

	// Compare with the ground truth, streamed.
	f, err := os.Open(truthFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// marked: abandoned or incomplete (events were lost); wrong: neither, yet not the truth.
	truths, matched, missing, marked, wrong, dups := 0, 0, 0, 0, 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var tt truth
		if err := json.Unmarshal(sc.Bytes(), &tt); err != nil {
			t.Fatalf("ground truth %q: %v", sc.Text(), err)
		}
		truths++
		i, _ := strconv.ParseInt(tt.ReconcileID[:8], 16, 64)
		s := rec.spans[i]
		switch {
		case s.count == 0:
			missing++
		case s.count > 1:
			dups++
		case s.incomplete || rec.words[s.result] == string(span.ResultAbandoned):
			if marked++; marked <= 10 {
				t.Errorf("%s: span marked %s, incomplete (ground truth %+v)", tt.ReconcileID, rec.words[s.result], tt)
			}
		case !s.ok || rec.words[s.result] != string(tt.Outcome) || rec.words[s.errorType] != tt.ErrorType ||
			int64(s.requeueAfter) != tt.RequeueAfterNS ||
			((tt.ErrorType == "*errors.errorString" || tt.ErrorType == "*fmt.wrapError") && rec.words[s.errorMsg] != tt.Error):
			if wrong++; wrong <= 10 {
				t.Errorf("%s: span (ok %v, %s, %q %q, requeue after %v) does not match ground truth %+v", tt.ReconcileID,
					s.ok, rec.words[s.result], rec.words[s.errorType], rec.words[s.errorMsg], s.requeueAfter, tt)
			}
		default:
			matched++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	k, a, r := st.Kernel, st.Assembler, st.Reader
	t.Logf("%d reconciles in %s (%.0f/s); spans %d: matched %d, marked abandoned/incomplete %d, wrong %d, duplicated %d; missing %d",
		truths, elapsed.Round(time.Millisecond), float64(truths)/elapsed.Seconds(), a.Spans, matched, marked, wrong, dups, missing)
	t.Logf("kernel: hits %d, lost (ring buffer) %d, lost (state) %d; reader: events %d, malformed %d; assembler: %+v",
		k.Hits, k.LostRingBuffer, k.LostState, r.Events, r.Malformed, a)
	agentCPU := time.Duration((after.Utime.Nano() + after.Stime.Nano()) - (before.Utime.Nano() + before.Stime.Nano()))
	t.Logf("agent (this test process) CPU during the run: %s; max RSS %d MiB", agentCPU.Round(time.Millisecond), after.Maxrss/1024)

	if truths != soakN {
		t.Errorf("fakectl reported %d reconciles, want %d", truths, soakN)
	}
	if missing != 0 || marked != 0 || wrong != 0 || dups != 0 || rec.noID != 0 {
		t.Errorf("%d missing, %d marked, %d wrong, %d duplicated spans, %d spans with a foreign reconcile ID", missing, marked, wrong, dups, rec.noID)
	}
	if lost := a.Abandoned + 2*uint64(missing) - a.OrphanReturns; lost != k.LostRingBuffer {
		t.Errorf("lost %d events, but abandoned %d + 2 × missing %d − orphan returns %d = %d", k.LostRingBuffer, a.Abandoned, missing, a.OrphanReturns, lost)
	}
	if a.Abandoned != 0 || a.OrphanReturns != 0 || a.Spans != uint64(soakN) {
		t.Errorf("entries and returns do not pair: %+v", a)
	}
	if k.Hits != 2*uint64(soakN) {
		t.Errorf("kernel counted %d probe hits, want %d (an entry and a return per reconcile)", k.Hits, 2*soakN)
	}
	if r.Events+k.LostRingBuffer != k.Hits {
		t.Errorf("events read %d + lost %d != hits %d: a loss went uncounted", r.Events, k.LostRingBuffer, k.Hits)
	}
	if k.LostRingBuffer != 0 || k.LostState != 0 || r.Malformed != 0 {
		t.Errorf("lost %d events (ring buffer), %d span states; %d malformed (goal: none)", k.LostRingBuffer, k.LostState, r.Malformed)
	}

	if writeResult {
		var uts unix.Utsname
		_ = unix.Uname(&uts)
		status := "PASS"
		if t.Failed() {
			status = "FAIL"
		}
		res := fmt.Sprintf(`# Soak: last result

Written by `+"`make soak`"+` (TestSoak in soak_test.go, SOAK_RESULT=1). Rerun it to refresh this file.

| | |
| --- | --- |
| date (UTC) | %s |
| command | `+"`make soak`"+` (`+"`go test -tags soak -run '^TestSoak$' -count=1 -timeout 2h -v ./test/soak/`"+` as root) |
| traced program | test/fakectl %s (stack growth every 7th reconcile, a GC every 500th, a recovered panic every 7th) |
| machine | Linux %s, %s, %d CPUs (shared) |
| outcome | **%s** |
| reconciles (ground truth) | %d |
| traced process crashes | %d |
| duration | %s (%.0f reconciles/s, traced) |
| spans emitted / matching the ground truth exactly | %d / %d |
| spans marked abandoned or incomplete / wrong (unmarked, not the truth) / duplicated | %d / %d / %d |
| reconciles without a span | %d |
| abandoned spans / orphan returns | %d / %d |
| kernel probe hits | %d (= 2 × reconciles: one entry, one return each) |
| events read + lost (ring buffer) | %d + %d = %d |
| span states lost (goroutine map full) / malformed records | %d / %d |
| agent CPU (user + system) / max RSS | %s / %d MiB |
`, time.Now().UTC().Format("2006-01-02 15:04:05"), strings.Join(args, " "),
			unix.ByteSliceToString(uts.Release[:]), runtime.Version(), runtime.NumCPU(), status,
			truths, crashed, elapsed.Round(time.Second), float64(truths)/elapsed.Seconds(),
			a.Spans, matched, marked, wrong, dups, missing, a.Abandoned, a.OrphanReturns,
			k.Hits, r.Events, k.LostRingBuffer, r.Events+k.LostRingBuffer, k.LostState, r.Malformed,
			agentCPU.Round(time.Millisecond), after.Maxrss/1024)
		if err := os.WriteFile("RESULT.md", []byte(res), 0o644); err != nil {
			t.Errorf("write RESULT.md: %v", err)
		}
	}
}
