package reliability

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/internal/testproc"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/span"
)

// TestRingBufferOverflow: a ring buffer of one page (4 entries of 920 bytes, or more with the
// returns' 136-byte records) under a burst of
// 8 workers reconciling flat out. The kernel must drop events and count each drop; the agent
// goes on; and no span is wrong: a span that is not marked incomplete or abandoned matches
// its reconcile exactly, the others carry the right object, and the spans, the missing
// reconciles and the counters add up exactly:
//
//	hits = events read + events lost = 2 × reconciles
//	lost = abandoned + 2 × missing − orphan returns
//
// (a reconcile whose return was lost is abandoned; one whose entry was lost has no span, and
// its return, when not lost too, is counted as an orphan).
func TestRingBufferOverflow(t *testing.T) {
	dir, bin, tr, out, stopTracer := tracerOfFakectl(t, collector.Options{RingBufferSize: os.Getpagesize()})

	const n = 20000
	ctl := runTraced(t, tr, bin, dir, "-n", "20000", "-workers", "8")
	burst := tr.Stats().Kernel

	// The agent keeps going: a second, slow process is traced completely.
	stop, start2 := filepath.Join(dir, "stop"), filepath.Join(dir, "start2")
	slow := testproc.Start(t, "fakectl-slow", exec.Command(bin, "-start", start2, "-stop", stop, "-n", "1000000", "-interval", "5ms"))
	if _, err := tr.TracePID(slow.PID()); err != nil {
		t.Fatalf("trace the second fakectl: %v", err)
	}
	if err := os.WriteFile(start2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n0 := out.Count()
	testkit.Eventually(t, "spans of the second process", time.Minute, func() bool { return out.Count() >= n0+100 })
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-slow.Done()
	testkit.Eventually(t, "the tracer to notice the second exit", time.Minute, func() bool { return len(tr.PIDs()) == 0 })
	if err := stopTracer(); err != nil {
		t.Fatalf("tracer run: %v", err)
	}

	// Both processes' reconciles against the spans of each (reconcile IDs repeat across them).
	truths := readTruths(t, output(t, ctl))
	if len(truths) != n {
		t.Fatalf("fakectl reported %d reconciles, want %d", len(truths), n)
	}
	slowTruths := readTruths(t, output(t, slow))
	type key struct {
		pid int
		id  string
	}
	byID := map[key]span.Span{}
	entryLost := 0 // spans whose entry event was lost: the kernel kept their start time
	for _, s := range out.Snapshot() {
		if s.ReconcileID == "" {
			// All that came is the return: an incomplete span without the entry's fields.
			if !s.Incomplete || s.Controller != "" || s.Name != "" || s.Start == 0 {
				t.Errorf("span without reconcile ID that is not an entry-lost span: %+v", s)
			}
			entryLost++
			continue
		}
		k := key{int(s.PID), s.ReconcileID}
		if _, dup := byID[k]; dup {
			t.Errorf("span with reconcile ID %q: duplicated: %+v", s.ReconcileID, s)
		}
		byID[k] = s
	}
	var exact, marked, missing, wrong int
	check := func(pid int, tt truth) {
		s, ok := byID[key{pid, tt.ReconcileID}]
		switch {
		case !ok:
			missing++
		case s.Incomplete || s.Result == span.ResultAbandoned:
			marked++
			// What the span has, its entry, is right.
			if s.Controller != tt.Controller || s.Namespace != tt.Namespace || s.Name != tt.Name {
				wrong++
				t.Errorf("%s: marked span names %q %s/%s", tt.ReconcileID, s.Controller, s.Namespace, s.Name)
			}
		default:
			if p := testkit.Mismatch(tt, s, testkit.Match{}); len(p) > 0 {
				if wrong++; wrong <= 10 {
					t.Errorf("%s (%s): unmarked span is wrong: %s", tt.Name, tt.ReconcileID, strings.Join(p, "; "))
				}
			} else {
				exact++
			}
		}
	}
	for _, tt := range truths {
		check(ctl.PID(), tt)
	}
	burstExact, burstMarked, burstMissing := exact, marked, missing
	for _, tt := range slowTruths {
		check(slow.PID(), tt)
	}
	total := len(truths) + len(slowTruths)
	st := tr.Stats() // final: Run has returned
	k, a, r := st.Kernel, st.Assembler, st.Reader
	t.Logf("burst of %d reconciles, 8 workers, ring buffer %d bytes: %d exact spans, %d marked (abandoned/incomplete), %d missing; %d events lost (%.1f%% of %d)",
		n, os.Getpagesize(), burstExact, burstMarked, burstMissing, burst.LostRingBuffer, 100*float64(burst.LostRingBuffer)/float64(burst.Hits), burst.Hits)
	t.Logf("then %d slow reconciles: %d exact, %d marked, %d missing", len(slowTruths), exact-burstExact, marked-burstMarked, missing-burstMissing)
	t.Logf("in all: kernel hits %d, lost %d, state lost %d; read %d; assembler %+v; wrong spans %d; spans whose entry was lost %d", k.Hits, k.LostRingBuffer, k.LostState, r.Events, a, wrong, entryLost)
	if burst.LostRingBuffer == 0 {
		t.Errorf("no event lost with a one-page ring buffer under a burst: the test did not test overflow")
	}
	if k.Hits != 2*uint64(total) || r.Events+k.LostRingBuffer != k.Hits {
		t.Errorf("hits %d, read %d + lost %d: want hits = read + lost = %d", k.Hits, r.Events, k.LostRingBuffer, 2*total)
	}
	if k.LostState != 0 || r.Malformed != 0 {
		t.Errorf("state lost %d, malformed %d", k.LostState, r.Malformed)
	}
	if a.Spans != uint64(exact+marked+entryLost) || a.Abandoned != uint64(marked) {
		t.Errorf("assembler emitted %d spans (%d abandoned); the ground truth finds %d exact, %d marked, and %d spans lost their entry", a.Spans, a.Abandoned, exact, marked, entryLost)
	}
	// Each lost event: the return of an abandoned span, the entry of an entry-lost span, or
	// both events of a reconcile with no span at all (missing, less the entry-lost ones).
	if want := a.Abandoned + uint64(entryLost) + 2*uint64(missing-entryLost) - a.OrphanReturns; k.LostRingBuffer != want {
		t.Errorf("lost %d events, but abandoned %d + entry-lost %d + 2 × (missing %d − entry-lost) − orphan returns %d = %d", k.LostRingBuffer, a.Abandoned, entryLost, missing, a.OrphanReturns, want)
	}
	if exact-burstExact < 50 {
		t.Errorf("after the burst the agent made only %d exact spans of the second process", exact-burstExact)
	}
}
