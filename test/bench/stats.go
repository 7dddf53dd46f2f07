package main

import (
	"fmt"
	"math"
	"slices"
)

// samples are the values of one figure over repeated runs.
type samples []float64

func (s samples) sorted() []float64 { c := slices.Clone(s); slices.Sort(c); return c }

func (s samples) median() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := s.sorted()
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func (s samples) min() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	return slices.Min(s)
}

func (s samples) max() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	return slices.Max(s)
}

// spread formats "median (min–max)" with f.
func (s samples) spread(f func(float64) string) string {
	if len(s) == 0 {
		return "n/a"
	}
	if len(s) == 1 {
		return f(s[0])
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.median()), f(s.min()), f(s.max()))
}

// ns formats nanoseconds: "412 ns", "15.40 µs", "577 ms", "1.23 s".
func ns(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "n/a"
	case a >= 1e9:
		return fmt.Sprintf("%.2f s", v/1e9)
	case a >= 1e7:
		return fmt.Sprintf("%.0f ms", v/1e6)
	case a >= 1e6:
		return fmt.Sprintf("%.1f ms", v/1e6)
	case a >= 1e5:
		return fmt.Sprintf("%.0f µs", v/1e3)
	case a >= 1e3:
		return fmt.Sprintf("%.2f µs", v/1e3)
	default:
		return fmt.Sprintf("%.0f ns", v)
	}
}

// nsAtMost is the verdict on a time in nanoseconds whose budget is at most limit ns.
func nsAtMost(figure string, v, limit float64) Verdict {
	return Verdict{Figure: figure, Goal: fmt.Sprintf("≤ %g ns", limit), Measured: ns(v), Value: v, Unit: "ns", Met: v <= limit}
}

// ratio formats a ratio "1.04×".
func ratio(v float64) string { return fmt.Sprintf("%.3f×", v) }

// bytes formats a size in MiB.
func mib(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }

// count formats an integer-valued figure.
func count(v float64) string { return fmt.Sprintf("%.0f", v) }

// rate formats a per-second figure: "20.0 k/s".
func rate(v float64) string {
	if v >= 1e6 {
		return fmt.Sprintf("%.2f M/s", v/1e6)
	}
	return fmt.Sprintf("%.1f k/s", v/1e3)
}
