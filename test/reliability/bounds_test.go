package reliability

import (
	"testing"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/collector"
)

// strMax is STR_MAX in bpf/include/events.h: the bytes the kernel copies of any string.
const strMax = len(rbpf.TraceEvent{}.Str[0])

// TestLongStringsTruncated: fakectl's controller name, namespaces, object names and error
// messages are 10 KiB long. The kernel copies 128 bytes of each: every span carries the first
// 128 bytes of each name and is marked incomplete, an error message is cut at 128 bytes and
// ends with "…"; everything else (result, error type, requeue, reconcile ID, pairing) is
// exact, and nothing is lost.
func TestLongStringsTruncated(t *testing.T) {
	dir, bin, tr, out, stop := tracerOfFakectl(t, collector.Options{})

	const n, long = 140, 10 << 10
	ctl := runTraced(t, tr, bin, dir, "-n", "140", "-workers", "2",
		"-name-len", "10240", "-controller-len", "10240", "-error-len", "10240")
	if err := stop(); err != nil {
		t.Fatalf("tracer run: %v", err)
	}

	truths := readTruths(t, output(t, ctl))
	if len(truths) != n {
		t.Fatalf("fakectl reported %d reconciles, want %d", len(truths), n)
	}
	spans := out.Snapshot()
	byID := map[string]int{}
	for i, s := range spans {
		byID[s.ReconcileID] = i
	}
	longErrors := 0
	for _, tt := range truths {
		if len(tt.Controller) != long || len(tt.Namespace) != long || len(tt.Name) != long {
			t.Fatalf("fakectl did not make 10 KiB names: %d %d %d", len(tt.Controller), len(tt.Namespace), len(tt.Name))
		}
		i, ok := byID[tt.ReconcileID]
		if !ok {
			t.Errorf("%s: no span", tt.ReconcileID)
			continue
		}
		s := spans[i]
		want := tt
		want.Controller, want.Namespace, want.Name = tt.Controller[:strMax], tt.Namespace[:strMax], tt.Name[:strMax]
		if len(tt.Error) > strMax {
			want.Error = tt.Error[:strMax] + "…"
			longErrors++
		}
		if p := testkit.Mismatch(want, s, testkit.Match{Incomplete: true}); len(p) > 0 {
			t.Errorf("%s: %v", tt.ReconcileID, p)
		}
		if len(tt.Error) > strMax && s.Error != want.Error {
			t.Errorf("%s: error %q, want it cut to %d bytes: %q", tt.ReconcileID, s.Error, strMax, want.Error)
		}
	}
	st := tr.Stats()
	if len(spans) != n || st.Kernel.LostRingBuffer != 0 || st.Assembler.Abandoned != 0 || st.Assembler.OrphanReturns != 0 || st.Reader.Malformed != 0 {
		t.Errorf("%d spans for %d reconciles; stats %+v", len(spans), n, st)
	}
	if longErrors == 0 {
		t.Error("no 10 KiB error message was traced: the test did not test error truncation")
	}
	t.Logf("%d reconciles with 10 KiB names: %d spans, each with 128-byte names, marked incomplete; %d 10 KiB error messages cut to 128 bytes + \"…\"", n, len(spans), longErrors)
}
