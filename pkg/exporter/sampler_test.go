package exporter

import (
	"testing"
	"time"

	"github.com/reconscope/reconscope/pkg/span"
)

// recorder is a Writer that keeps what it is given.
type recorder struct{ got []*span.Span }

func (r *recorder) Write(s *span.Span) error { r.got = append(r.got, s); return nil }

func TestSamplerKeeps(t *testing.T) {
	noop := func(mod func(*span.Span)) *span.Span {
		s := &span.Span{Controller: "c", Result: span.ResultSuccess, Noop: true, Duration: time.Millisecond}
		if mod != nil {
			mod(s)
		}
		return s
	}
	tests := []struct {
		name string
		opts SamplerOptions
		span *span.Span
		keep bool
	}{
		{"noop at rate 0", SamplerOptions{}, noop(nil), false},
		{"noop at rate 1", SamplerOptions{NoopRate: 1}, noop(nil), true},
		{"write", SamplerOptions{}, noop(func(s *span.Span) { s.Noop = false }), true},
		{"error without writes", SamplerOptions{}, noop(func(s *span.Span) { s.Result = span.ResultError }), true},
		{"error type on a requeue", SamplerOptions{}, noop(func(s *span.Span) { s.Result, s.ErrorType = span.ResultRequeue, "*errors.errorString" }), true},
		{"abandoned", SamplerOptions{}, noop(func(s *span.Span) { s.Result, s.Noop = span.ResultAbandoned, false }), true},
		{"incomplete noop", SamplerOptions{}, noop(func(s *span.Span) { s.Incomplete = true }), true},
		{"requeue_after noop", SamplerOptions{}, noop(func(s *span.Span) { s.Result = span.ResultRequeueAfter }), false},
		{"slow noop", SamplerOptions{SlowThreshold: time.Millisecond}, noop(nil), true},
		{"fast noop", SamplerOptions{SlowThreshold: 2 * time.Millisecond}, noop(nil), false},
		{"negative rate", SamplerOptions{NoopRate: -3}, noop(nil), false},
		{"rate above 1", SamplerOptions{NoopRate: 7}, noop(nil), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			s := NewSampler(tt.opts, &r)
			if err := s.Write(tt.span); err != nil {
				t.Fatal(err)
			}
			if kept := len(r.got) == 1; kept != tt.keep {
				t.Errorf("kept = %v, want %v", kept, tt.keep)
			}
			wantOut := uint64(0)
			if !tt.keep {
				wantOut = 1
			}
			if s.SampledOut() != wantOut {
				t.Errorf("SampledOut = %d, want %d", s.SampledOut(), wantOut)
			}
		})
	}
}

func TestSamplerNoopRate(t *testing.T) {
	tests := []struct {
		rate float64
		n    int
		want []int // indexes (from 0) of the no-ops passed
	}{
		{0.25, 10, []int{3, 7}},
		{0.5, 6, []int{1, 3, 5}},
		{0.1, 25, []int{9, 19}},
		{1.0 / 3, 9, []int{2, 5, 8}},
		{0, 5, nil},
		{1, 3, []int{0, 1, 2}},
	}
	for _, tt := range tests {
		var r recorder
		s := NewSampler(SamplerOptions{NoopRate: tt.rate}, &r)
		for i := range tt.n {
			_ = s.Write(&span.Span{Controller: "c", Name: "o", Goid: int64(i), Result: span.ResultSuccess, Noop: true})
			// A writing reconcile in between changes nothing to the no-op count.
			_ = s.Write(&span.Span{Controller: "c", Goid: -1, Result: span.ResultSuccess})
		}
		var got []int
		for _, sp := range r.got {
			if sp.Goid >= 0 {
				got = append(got, int(sp.Goid))
			}
		}
		if len(r.got)-len(got) != tt.n {
			t.Errorf("rate %v: %d writing reconciles passed, want %d", tt.rate, len(r.got)-len(got), tt.n)
		}
		if len(got) != len(tt.want) {
			t.Errorf("rate %v: passed %v, want %v", tt.rate, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("rate %v: passed %v, want %v", tt.rate, got, tt.want)
				break
			}
		}
		if out := s.SampledOut(); out != uint64(tt.n-len(tt.want)) {
			t.Errorf("rate %v: SampledOut = %d, want %d", tt.rate, out, tt.n-len(tt.want))
		}
	}
}

func TestSamplerPerController(t *testing.T) {
	var r recorder
	s := NewSampler(SamplerOptions{NoopRate: 0.5}, &r)
	// Two no-ops of a busy controller, then one of a quiet one, then another of the quiet one.
	for _, c := range []string{"busy", "busy", "quiet", "quiet"} {
		_ = s.Write(&span.Span{Controller: c, Result: span.ResultSuccess, Noop: true})
	}
	var got []string
	for _, sp := range r.got {
		got = append(got, sp.Controller)
	}
	if len(got) != 2 || got[0] != "busy" || got[1] != "quiet" {
		t.Errorf("passed %v, want [busy quiet]: each controller counts its own no-ops", got)
	}
}
