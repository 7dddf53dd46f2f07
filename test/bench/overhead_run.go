package main

// One run of the overhead bench: a way of running the harness (ohConfig), what it measured
// (ohRun), and the run again while it loses too many events.

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cilium/ebpf"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/probes"
)

// ohKind is what a run of the harness attaches, if anything.
type ohKind int

const (
	untraced ohKind = iota
	traced
	emptyAt
	eventOnlyAt // stats runs only: the program that just emits an event
	notTraced   // stats runs only: reconscope's program attached, the process not traced
	callsOnly   // stats runs only: reconscope's program at call sites alone, the process traced
)

// ohConfig is one way of running the harness.
type ohConfig struct {
	key      string
	label    string
	attached string
	hits     int // probe hits per reconcile
	kind     ohKind
	harness  string
	n        int
	catalog  []*probes.Probe
	offsets  []uint64
	program  string        // eventOnlyAt: the program (EmptyProgEventOnlyMulti, EmptyProgEventHeadOnlyMulti)
	ringSize int           // eventOnlyAt: the buffer's size when not the traced runs' (0)
	reader   int           // eventOnlyAt: readRing, readPerf or readNone
	only     *probes.Probe // callsOnly: the probe whose sites alone are attached
	twice    bool          // the program attached a second time at the same sites (attachAgain, attachEmptyTimes)
}

// ohRun is what one run of a configuration measured.
type ohRun struct {
	rep   harnessReport
	hits  uint64 // kernel counter: probe hits in the traced process
	lost  uint64
	spans int64
	prog  progStats // the program's kernel run time (stats runs only)
}

type overheadBench struct {
	common
	prog  *ebpf.Program // the empty program
	multi bool
	ring  int // ring-buffer size of the traced runs
}

func (o *overheadBench) run(cfg ohConfig) (ohRun, error) {
	var r ohRun
	args := []string{"-n", strconv.Itoa(cfg.n)}
	var attach func(int) (func() error, error)
	switch cfg.kind {
	case traced:
		attach = func(pid int) (func() error, error) {
			t, err := traceHarness(cfg.catalog, collector.Options{RingBufferSize: o.ring}, pid)
			if err != nil {
				return nil, err
			}
			again := func() error { return nil }
			if cfg.twice {
				if t.prog == nil {
					err = fmt.Errorf("the tracer's probe program was not found")
				} else {
					again, err = attachAgain(t.prog)
				}
				if err != nil {
					t.stop()
					return nil, err
				}
			}
			return func() error {
				aerr := again()
				r.spans = t.waitSpans(int64(cfg.n+harnessWarmup), 5*time.Second)
				st, ps, err := t.stop()
				r.hits, r.lost, r.prog = st.Kernel.Hits, st.Kernel.LostRingBuffer, ps
				return errors.Join(aerr, err)
			}, nil
		}
	case eventOnlyAt:
		attach = func(pid int) (func() error, error) {
			size := o.ring
			if cfg.ringSize != 0 {
				size = cfg.ringSize
			}
			prog, closeProg, err := eventOnly(cfg.program, size, cfg.reader, pid)
			if err != nil {
				return nil, err
			}
			detach, err := attachEmptyTimes(prog, true, cfg.harness, cfg.offsets, cfg.twice)
			if err != nil {
				closeProg()
				return nil, err
			}
			return func() error {
				err := detach()
				r.prog, _ = readProgStats(prog)
				closeProg()
				return err
			}, nil
		}
	case notTraced, callsOnly:
		attach = func(pid int) (func() error, error) {
			if cfg.kind == notTraced {
				pid = 0
			}
			stop, err := attachCollector(cfg.catalog, cfg.only, cfg.harness, pid, cfg.twice, collector.Options{RingBufferSize: o.ring})
			if err != nil {
				return nil, err
			}
			return func() (err error) {
				r.prog, err = stop()
				return err
			}, nil
		}
	case emptyAt:
		attach = func(pid int) (func() error, error) {
			before, _ := readProgStats(o.prog)
			detach, err := attachEmptyTimes(o.prog, o.multi, cfg.harness, cfg.offsets, cfg.twice)
			if err != nil {
				return nil, err
			}
			return func() error {
				err := detach()
				after, _ := readProgStats(o.prog)
				r.prog = after.sub(before)
				return err
			}, nil
		}
	}
	rep, err := runHarness(cfg.harness, args, attach)
	r.rep = rep
	if err != nil {
		return r, fmt.Errorf("%s: %w", cfg.label, err)
	}
	return r, nil
}

// maxLostShare is the share of a traced run's events that may be lost before the run is
// done again: a lost event skips the program's work and would flatter it.
const maxLostShare = 0.001

// runValid runs cfg, again (at most twice more) while it loses more than maxLostShare of its
// events: the reader runs in this process on a shared machine and can be starved for a while.
func (o *overheadBench) runValid(cfg ohConfig, retries *int) (ohRun, error) {
	for attempt := 0; ; attempt++ {
		r, err := o.run(cfg)
		if err != nil || cfg.kind != traced || float64(r.lost) <= maxLostShare*float64(r.hits) || attempt == 2 {
			return r, err
		}
		*retries++
	}
}
