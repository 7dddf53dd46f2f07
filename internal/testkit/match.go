package testkit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// Match says what Mismatch expects of a span beyond what every span must get right.
type Match struct {
	// NoController: the build has no DWARF for the controller's name (a stripped fake
	// controller): the span must have no controller name rather than a wrong one.
	NoController bool
	// Incomplete: the span must be marked incomplete (strings cut to the tracer's bound).
	Incomplete bool
	// Wall, when set, turns a span's monotonic start into wall time (ktime.Clock.Wall): the
	// span must then enclose the record's own [Start, End], 1ms slack for the two clocks.
	Wall func(mono uint64) time.Time
	// Slack, when above 0, bounds how much longer than the record's own measurement the span may
	// last.
	Slack time.Duration
}

// WantError is the error type and message the span of r has: the program's, or for a
// recovered panic controller-runtime's *errors.errorString "panic: … [recovered]".
func WantError(r groundtruth.Record) (typ, msg string) {
	if r.Outcome == groundtruth.OutcomePanic {
		return "*errors.errorString", fmt.Sprintf("panic: %s [recovered]", r.Panic)
	}
	return r.ErrorType, r.Error
}

// MessageMatches says whether an error message a span has is want, or want cut to the
// tracer's bound (ending in "…").
func MessageMatches(got, want string) bool {
	cut, isCut := strings.CutSuffix(got, "…")
	return got == want || isCut && strings.HasPrefix(want, cut)
}

// Mismatch lists how span s differs from the ground truth r of the same reconcile: controller,
// object, result, error type and message (a message cut to the tracer's bound ends in "…"),
// requeue delay, reconcile ID, goroutine ID, duration, and what m adds.
func Mismatch(r groundtruth.Record, s span.Span, m Match) []string {
	var bad []string
	switch {
	case m.NoController && s.Controller != "":
		bad = append(bad, fmt.Sprintf("controller %q, want none", s.Controller))
	case !m.NoController && s.Controller != r.Controller:
		bad = append(bad, fmt.Sprintf("controller %q, want %q", s.Controller, r.Controller))
	}
	if s.Namespace != r.Namespace || s.Name != r.Name {
		bad = append(bad, fmt.Sprintf("object %s/%s, want %s/%s", s.Namespace, s.Name, r.Namespace, r.Name))
	}
	if want := span.Result(r.MetricResult()); s.Result != want {
		bad = append(bad, fmt.Sprintf("result %s, want %s", s.Result, want))
	}
	wantType, wantMsg := WantError(r)
	if s.ErrorType != wantType {
		bad = append(bad, fmt.Sprintf("error type %q, want %q", s.ErrorType, wantType))
	}
	switch wantType {
	case "*errors.errorString", "*fmt.wrapError", "*errors.StatusError": // messages the tracer reads
		if !MessageMatches(s.Error, wantMsg) {
			bad = append(bad, fmt.Sprintf("error %q, want %q", s.Error, wantMsg))
		}
	}
	if int64(s.RequeueAfter) != r.RequeueAfterNS {
		bad = append(bad, fmt.Sprintf("requeue after %v, want %v", s.RequeueAfter, time.Duration(r.RequeueAfterNS)))
	}
	if s.ReconcileID != r.ReconcileID {
		bad = append(bad, fmt.Sprintf("reconcile ID %q, want %q", s.ReconcileID, r.ReconcileID))
	}
	if s.Goid <= 0 || s.Duration <= 0 {
		bad = append(bad, fmt.Sprintf("goroutine %d, duration %v", s.Goid, s.Duration))
	}
	if m.Wall != nil && !r.Start.IsZero() {
		// The probed frame encloses the program's Reconcile: it starts no later and ends no
		// earlier than the program measured.
		start := m.Wall(s.Start)
		end := start.Add(s.Duration)
		if start.After(r.Start.Add(time.Millisecond)) || end.Before(r.End.Add(-time.Millisecond)) {
			bad = append(bad, fmt.Sprintf("span [%s, %s] does not enclose the program's [%s, %s]",
				start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), r.Start.Format(time.RFC3339Nano), r.End.Format(time.RFC3339Nano)))
		}
	}
	if m.Slack > 0 && !r.Start.IsZero() && s.Duration > r.End.Sub(r.Start)+m.Slack {
		bad = append(bad, fmt.Sprintf("duration %v, the program measured %v", s.Duration, r.End.Sub(r.Start)))
	}
	if s.Incomplete != m.Incomplete {
		bad = append(bad, fmt.Sprintf("incomplete %v, want %v", s.Incomplete, m.Incomplete))
	}
	return bad
}

// ByReconcileID indexes spans of any form by their reconcile ID (id) and fails t for a span
// without one, two spans of one ID, and a number of spans other than reconciles (the ground
// truth's).
func ByReconcileID[S any](t testing.TB, spans []S, reconciles int, id func(S) string) map[string]S {
	t.Helper()
	byID := map[string]S{}
	for _, s := range spans {
		rid := id(s)
		if rid == "" {
			t.Errorf("span without reconcile ID: %+v", s)
			continue
		}
		if _, dup := byID[rid]; dup {
			t.Errorf("two spans for reconcile %s", rid)
		}
		byID[rid] = s
	}
	if len(spans) != reconciles {
		t.Errorf("%d spans for %d reconciles", len(spans), reconciles)
	}
	return byID
}

// DetailRuns reads the detail of spans of any form in the order given (a caller sorts them by
// start): whether each has calls (hasCalls), consecutive equal ones merged into one run, so a
// switch to calls detail is [false true] and a switch there and back [false true false]. It
// returns the runs and how many spans have calls.
func DetailRuns[S any](spans []S, hasCalls func(S) bool) (runs []bool, with int) {
	for _, s := range spans {
		calls := hasCalls(s)
		if calls {
			with++
		}
		if len(runs) == 0 || runs[len(runs)-1] != calls {
			runs = append(runs, calls)
		}
	}
	return runs, with
}

// maxReported bounds the mismatches Compare reports one by one.
const maxReported = 10

// Compare matches spans with the ground truth recs one to one by reconcile ID and fails t for
// a span without an ID, two spans of one ID, a reconcile without its span, a span too many and
// every Mismatch (the first ten in detail). It returns how many reconciles have an exact span.
func Compare(t testing.TB, recs []groundtruth.Record, spans []span.Span, m Match) (exact int) {
	t.Helper()
	byID := ByReconcileID(t, spans, len(recs), func(s span.Span) string { return s.ReconcileID })
	bad := 0
	for _, r := range recs {
		problems := []string{"no span"}
		if s, ok := byID[r.ReconcileID]; ok {
			problems = Mismatch(r, s, m)
		}
		if len(problems) == 0 {
			exact++
			continue
		}
		if bad++; bad <= maxReported {
			t.Errorf("%s/%s attempt %d (%s, %s %s): %s", r.Namespace, r.Name, r.Attempt, r.ReconcileID, r.Outcome, r.ErrorType, strings.Join(problems, "; "))
		}
	}
	if bad > maxReported {
		t.Errorf("... %d reconciles mismatched in all", bad)
	}
	return exact
}
