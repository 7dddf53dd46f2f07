package testkit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// TestMismatch: the span of a reconcile as its ground truth has it matches; each field the
// tracer can get wrong, changed alone, is named.
func TestMismatch(t *testing.T) {
	wall := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func(mono uint64) time.Time { return wall.Add(time.Duration(mono)) }
	rec := groundtruth.Record{Controller: "c", Namespace: "ns", Name: "o", Outcome: groundtruth.OutcomeError,
		ErrorType: "*errors.errorString", Error: "a long message", RequeueAfterNS: 0, ReconcileID: "id-1",
		Start: wall.Add(10 * time.Millisecond), End: wall.Add(20 * time.Millisecond)}
	good := span.Span{Controller: "c", Namespace: "ns", Name: "o", Result: span.ResultError,
		ErrorType: "*errors.errorString", Error: "a long message", ReconcileID: "id-1", Goid: 7,
		Start: uint64(9 * time.Millisecond), Duration: 12 * time.Millisecond}
	m := Match{Wall: clock}
	if p := Mismatch(rec, good, m); len(p) != 0 {
		t.Fatalf("the exact span mismatches: %v", p)
	}
	cut := good
	cut.Error = "a long…"
	if p := Mismatch(rec, cut, m); len(p) != 0 {
		t.Errorf("a message cut to the bound mismatches: %v", p)
	}
	for _, c := range []struct {
		want   string
		change func(s *span.Span)
	}{
		{"controller", func(s *span.Span) { s.Controller = "d" }},
		{"object", func(s *span.Span) { s.Name = "p" }},
		{"result", func(s *span.Span) { s.Result = span.ResultSuccess }},
		{"error type", func(s *span.Span) { s.ErrorType = "*fmt.wrapError" }},
		{"error", func(s *span.Span) { s.Error = "another message" }},
		{"requeue after", func(s *span.Span) { s.RequeueAfter = time.Second }},
		{"reconcile ID", func(s *span.Span) { s.ReconcileID = "id-2" }},
		{"goroutine", func(s *span.Span) { s.Goid = 0 }},
		{"does not enclose", func(s *span.Span) { s.Start = uint64(12 * time.Millisecond) }},
		{"incomplete", func(s *span.Span) { s.Incomplete = true }},
	} {
		s := good
		c.change(&s)
		if p := Mismatch(rec, s, m); len(p) != 1 || !strings.HasPrefix(p[0], c.want) && !strings.Contains(p[0], c.want) {
			t.Errorf("%s changed: mismatches %q, want one naming %s", c.want, p, c.want)
		}
	}
	if p := Mismatch(rec, good, Match{NoController: true}); len(p) != 1 {
		t.Errorf("a controller name where none can be known: mismatches %q, want one", p)
	}
	panicked := rec
	panicked.Outcome, panicked.ErrorType, panicked.Error, panicked.Panic = groundtruth.OutcomePanic, "", "", "boom"
	ps := good
	ps.Error = "panic: boom [recovered]"
	if p := Mismatch(panicked, ps, m); len(p) != 0 {
		t.Errorf("a recovered panic's span mismatches: %v", p)
	}
}

// errorsOf records what a check reports instead of failing the test.
type errorsOf struct {
	testing.TB
	msgs []string
}

func (e *errorsOf) Helper() {}
func (e *errorsOf) Errorf(format string, args ...any) {
	e.msgs = append(e.msgs, fmt.Sprintf(format, args...))
}

// TestByReconcileID: a span without an ID, a second span of one ID and a count other than the
// reconciles' are each reported; the index holds each ID once.
func TestByReconcileID(t *testing.T) {
	type s struct{ id, name string }
	e := &errorsOf{TB: t}
	got := ByReconcileID(e, []s{{"a", "first"}, {"", "none"}, {"a", "second"}, {"b", "b"}}, 2, func(x s) string { return x.id })
	want := []string{"span without reconcile ID: {id: name:none}", "two spans for reconcile a", "4 spans for 2 reconciles"}
	if !slices.Equal(e.msgs, want) {
		t.Errorf("reported %q, want %q", e.msgs, want)
	}
	if len(got) != 2 || got["b"].name != "b" {
		t.Errorf("index %v", got)
	}
	e = &errorsOf{TB: t}
	if ByReconcileID(e, []s{{"a", ""}}, 1, func(x s) string { return x.id }); len(e.msgs) != 0 {
		t.Errorf("one span of one reconcile reported %q", e.msgs)
	}
}

// TestDetailRuns: consecutive spans of one detail are one run, and the spans with calls are
// counted, whatever the spans' form.
func TestDetailRuns(t *testing.T) {
	for _, tt := range []struct {
		calls []int
		runs  []bool
		with  int
	}{
		{nil, nil, 0},
		{[]int{0, 0}, []bool{false}, 0},
		{[]int{0, 0, 2, 1}, []bool{false, true}, 2},
		{[]int{0, 3, 3, 0, 0}, []bool{false, true, false}, 2},
		{[]int{1, 0, 1}, []bool{true, false, true}, 2},
	} {
		runs, with := DetailRuns(tt.calls, func(n int) bool { return n > 0 })
		if !slices.Equal(runs, tt.runs) || with != tt.with {
			t.Errorf("DetailRuns(%v) = %v, %d; want %v, %d", tt.calls, runs, with, tt.runs, tt.with)
		}
	}
}

func TestMessageMatches(t *testing.T) {
	for _, tt := range []struct {
		got, want string
		ok        bool
	}{
		{"boom", "boom", true},
		{"bo…", "boom", true},
		{"bx…", "boom", false},
		{"boo", "boom", false},
		{"", "boom", false},
		{"…", "boom", true},
	} {
		if ok := MessageMatches(tt.got, tt.want); ok != tt.ok {
			t.Errorf("MessageMatches(%q, %q) = %v, want %v", tt.got, tt.want, ok, tt.ok)
		}
	}
}
