package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/probes"
)

// parseSize reads "64K", "4M", "4096".
func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.Atoi(s)
	return n * mult, err
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// reconcileBytes is one harness reconcile's room in the ring buffer: the reconcile's and the
// call's entries read strings (a whole struct event each), their returns do not (struct
// event_head each, no error), and each record has the ring buffer's 8-byte header.
var reconcileBytes = 2*(int(unsafe.Sizeof(rbpf.TraceEvent{}))+8) + 2*(int(unsafe.Sizeof(rbpf.TraceEventHead{}))+8)

// holds is how long a ring buffer of size bytes takes to fill at rate reconciles per second
// of 4 events each, in nanoseconds.
func holds(size int, rate float64) float64 {
	return float64(size) / (float64(reconcileBytes) * rate) * 1e9
}

type lossRun struct {
	target   float64
	achieved float64
	lost     uint64
	events   uint64 // probe hits in the traced process during the run
	recs     int
	spans    int64
}

// loss finds, per ring-buffer size, the highest reconcile rate traced with no lost event.
func loss(args []string) error {
	fs := flag.NewFlagSet("loss", flag.ExitOnError)
	var c common
	c.register(fs)
	harness := fs.String("harness", "", "reconcileloop binary")
	sizesF := fs.String("sizes", "64K,256K,1M,4M", "ring-buffer sizes")
	ratesF := fs.String("rates", "2000,5000,10000,20000", "reconciles per second to try")
	repeats := fs.Int("repeats", 3, "runs per size and rate")
	duration := fs.Duration("duration", 2*time.Second, "length of one run")
	workers := fs.Int("workers", 4, "harness worker goroutines")
	fs.Parse(args)
	if *harness == "" {
		return fmt.Errorf("-harness is required")
	}
	var sizes []int
	for _, s := range strings.Split(*sizesF, ",") {
		n, err := parseSize(s)
		if err != nil {
			return fmt.Errorf("size %q: %w", s, err)
		}
		sizes = append(sizes, n)
	}
	var rates []float64
	for _, s := range strings.Split(*ratesF, ",") {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("rate %q: %w", s, err)
		}
		rates = append(rates, r)
	}
	recon, err := reconcileProbe()
	if err != nil {
		return err
	}
	call, err := callProbe()
	if err != nil {
		return err
	}
	catalog := []*probes.Probe{recon, call}

	results := map[int]map[float64][]lossRun{}
	start := time.Now()
	for _, size := range sizes {
		results[size] = map[float64][]lossRun{}
		t, err := startTracing(catalog, collector.Options{RingBufferSize: size})
		if err != nil {
			return err
		}
		for _, r := range rates {
			for range *repeats {
				var lr lossRun
				before := t.tr.Stats().Kernel
				spans0 := t.spans.Load()
				rep, err := runHarness(*harness, []string{"-rate", strconv.FormatFloat(r, 'f', 0, 64), "-duration", duration.String(), "-workers", strconv.Itoa(*workers)},
					func(pid int) (func() error, error) {
						if _, err := t.tr.TracePID(pid); err != nil {
							return nil, fmt.Errorf("trace harness: %w", err)
						}
						return nil, nil
					})
				if err != nil {
					t.stop()
					return err
				}
				after := t.tr.Stats().Kernel
				lr.target, lr.achieved, lr.recs = r, rep.Rate, rep.N
				lr.lost = after.LostRingBuffer - before.LostRingBuffer
				lr.events = after.Hits - before.Hits
				lr.spans = t.waitSpans(spans0+int64(rep.N), 3*time.Second) - spans0
				results[size][r] = append(results[size][r], lr)
			}
		}
		if _, _, err := t.stop(); err != nil {
			return err
		}
	}

	fmt.Printf("Command: `%s` (%s)\n\n", c.command(), time.Since(start).Round(time.Second))
	fmt.Printf(`The harness (reconcileloop -rate R -duration %s -workers %d) paces R reconciles per second over
%d goroutines; each reconcile hits the reconcile probe and the call probe, so 4 events per
reconcile (two entries with strings, two returns without: %d bytes of ring buffer). One tracer per ring-buffer size reads the ring buffer in this process, as
the agent would (the reader is woken when a quarter of the buffer is full, else polls every %s).
Each cell: events lost (median, max over %d runs) and the rate the harness achieved (median).
"Lost" is the kernel's exact count (tracer.Stats().Kernel.LostRingBuffer).

`, *duration, *workers, *workers, reconcileBytes, collector.PollInterval, *repeats)
	head := []string{"ring buffer"}
	for _, r := range rates {
		head = append(head, rate(r)+" target")
	}
	head = append(head, "highest zero-loss rate", fmt.Sprintf("time the buffer holds at %s", rate(rates[len(rates)-1])))
	fmt.Printf("| %s |\n", strings.Join(head, " | "))
	fmt.Printf("| --- |%s\n", strings.Repeat(" ---: |", len(head)-1))
	best := map[int]float64{}
	for _, size := range sizes {
		row := []string{sizeName(size)}
		for _, r := range rates {
			var lost, ach samples
			zero := true
			for _, lr := range results[size][r] {
				lost = append(lost, float64(lr.lost))
				ach = append(ach, lr.achieved)
				zero = zero && lr.lost == 0
			}
			row = append(row, fmt.Sprintf("%.0f lost (max %.0f), %s", lost.median(), lost.max(), rate(ach.median())))
			if zero && ach.median() >= 0.95*r {
				best[size] = max(best[size], r)
			} else if zero {
				best[size] = max(best[size], ach.median())
			}
		}
		b := "below " + rate(rates[0])
		if best[size] > 0 {
			b = rate(best[size])
		}
		row = append(row, b, ns(holds(size, rates[len(rates)-1])))
		fmt.Printf("| %s |\n", strings.Join(row, " | "))
	}
	fmt.Println()
	fmt.Printf(`Whether events are lost depends on how long the reader can go without a CPU: a buffer of S bytes
holds S / (%d B × rate) of events (last column); woken when a quarter of it is full, the reader
must get a CPU and drain it before the rest fills. On this shared machine (see the load average above) the reader, in the benchmark
process, sometimes waits longer than that; a dedicated core, or the agent's CPU request in the
DaemonSet, shortens that wait.

`, reconcileBytes)

	// Budget: zero loss at 20 k reconciles/s with the default size.
	def := 4 << 20
	goal := 20000.0
	runsAt, ok := results[def][goal]
	if !ok {
		return nil
	}
	var lost, ach samples
	for _, lr := range runsAt {
		lost = append(lost, float64(lr.lost))
		ach = append(ach, lr.achieved)
	}
	v := Verdict{
		Figure:   "lost events at 20 k reconciles/s, default 4 MiB ring buffer (4 events per reconcile)",
		Goal:     "0 lost at 20 k/s",
		Measured: fmt.Sprintf("%.0f lost (max %.0f) at %s achieved", lost.median(), lost.max(), rate(ach.median())),
		Value:    lost.median(),
		Unit:     "events lost",
		Met:      lost.max() == 0 && ach.median() >= 0.95*goal,
	}
	switch {
	case lost.max() > 0:
		v.Why = fmt.Sprintf("the reader fell behind: up to %.0f of ~%.0f events per run were dropped in the kernel; the 4 MiB buffer holds %s of events at 20 k reconciles/s and the reader, sharing 2 busy cores with the traced process and other work, sometimes waited longer than that for a CPU", lost.max(), 4*ach.median()*duration.Seconds(), ns(holds(def, goal)))
	case !v.Met:
		v.Why = fmt.Sprintf("the traced harness could not reach 20 k reconciles/s: it ran %s; each traced reconcile costs the process several µs of probe hits (section 1, mostly the single-stepped RETs) on a 2-core machine shared with other work, so zero loss is shown only up to the rate reached", rate(ach.median()))
	}
	return c.verdict(v)
}
