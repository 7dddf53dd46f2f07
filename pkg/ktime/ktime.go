// Package ktime turns the kernel's monotonic timestamps (bpf_ktime_get_ns, which the probes
// stamp on every event) into wall-clock time. The tracer, which reads the kernel's clock, and
// the exporters, which print and send wall-clock times, share it.
package ktime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock turns the kernel's monotonic nanoseconds (bpf_ktime_get_ns) into wall-clock time.
type Clock struct{ offset int64 }

// NewClock measures the offset between CLOCK_REALTIME and CLOCK_MONOTONIC now.
func NewClock() Clock {
	var mono, real1, real2 unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &real1)
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &real2)
	real := (real1.Nano() + real2.Nano()) / 2
	return Clock{offset: real - mono.Nano()}
}

// ClockAt is a clock whose monotonic zero is the wall-clock time at (for fixtures whose times
// must not depend on when the test ran).
func ClockAt(at time.Time) Clock { return Clock{offset: at.UnixNano()} }

// Wall returns the wall-clock time of a monotonic timestamp.
func (c Clock) Wall(mono uint64) time.Time { return time.Unix(0, int64(mono)+c.offset).UTC() }

// Monotonic returns the kernel's monotonic clock now.
func Monotonic() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
