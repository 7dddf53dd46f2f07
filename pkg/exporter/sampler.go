package exporter

import (
	"math"
	"sync"
	"time"

	"github.com/reconscope/reconscope/pkg/span"
)

// SamplerOptions configures NewSampler.
type SamplerOptions struct {
	// NoopRate is the fraction of no-op reconciles passed on, from 0 (none) to 1 (all).
	// Exactly floor(n*NoopRate) of a controller's first n sampled no-op reconciles pass,
	// evenly spread.
	NoopRate float64
	// SlowThreshold passes every reconcile that lasted at least this long. Zero: no
	// reconcile passes for being slow.
	SlowThreshold time.Duration
}

// Sampler passes on every reconcile worth keeping and a deterministic fraction of the no-op
// ones. It implements Writer.
//
// Always passed: errors, abandoned reconciles, incomplete ones (their no-op flag may be wrong),
// slow ones (Duration >= SlowThreshold) and any that wrote (not Noop). No-op reconciles pass at
// NoopRate, counted per controller so a busy controller does not crowd out a quiet one.
// A reconcile not passed is "sampled out", counted by SampledOut: a choice, not a loss. Put
// Metrics before the sampler so metrics count every reconcile.
type Sampler struct {
	next Writer
	rate float64
	slow time.Duration

	mu         sync.Mutex
	seen       map[string]uint64 // no-op reconciles considered, per controller
	sampledOut uint64
}

// NewSampler returns a Sampler writing what it passes to next.
func NewSampler(opts SamplerOptions, next Writer) *Sampler {
	rate := opts.NoopRate
	if math.IsNaN(rate) || rate < 0 {
		rate = 0
	}
	rate = min(rate, 1)
	return &Sampler{
		next: next,
		rate: rate,
		slow: opts.SlowThreshold,
		seen: map[string]uint64{},
	}
}

// Write implements Writer.
func (s *Sampler) Write(sp *span.Span) error {
	if !s.keep(sp) {
		return nil
	}
	return s.next.Write(sp)
}

// SampledOut returns how many reconciles were not passed on.
func (s *Sampler) SampledOut() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sampledOut
}

func (s *Sampler) keep(sp *span.Span) bool {
	switch {
	case sp.Result == span.ResultError, sp.Result == span.ResultAbandoned, sp.ErrorType != "":
		return true
	case sp.Incomplete, !sp.Noop:
		return true
	case s.slow > 0 && sp.Duration >= s.slow:
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.seen[sp.Controller] + 1
	s.seen[sp.Controller] = n
	// The n-th no-op passes when floor(n*rate) steps up: exactly floor(n*rate) of n pass.
	// The epsilon absorbs float rounding (3 * 0.1 is 0.30000000000000004, 3 * (1/3) may fall short).
	if math.Floor(float64(n)*s.rate+1e-9) > math.Floor(float64(n-1)*s.rate+1e-9) {
		return true
	}
	s.sampledOut++
	return false
}
