package main

import (
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

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
	// CPU time of the harness (the traced process, its probe hits included) and of this process
	// (the tracer's reader, decoder and assembler) during the run
	harnessCPU, readerCPU time.Duration
	wall                  time.Duration // the harness's run, until its last reconcile
}

// selfCPU is this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	recon, call, err := spanAndCallProbes()
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
				var cpu0 time.Duration
				rep, err := runHarness(*harness, []string{"-rate", strconv.FormatFloat(r, 'f', 0, 64), "-duration", duration.String(), "-workers", strconv.Itoa(*workers)},
					func(pid int) (func() error, error) {
						if _, err := t.tr.TracePID(pid); err != nil {
							return nil, fmt.Errorf("trace harness: %w", err)
						}
						cpu0 = selfCPU() // the reader's work from here, not the attach's
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
				lr.readerCPU, lr.harnessCPU, lr.wall = selfCPU()-cpu0, rep.ProcessCPU, time.Duration(rep.WallNs)
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

	// Where the CPU goes, with the default size.
	def := 4 << 20
	if _, ok := results[def]; ok {
		fmt.Printf(`CPU time of the runs with the default %s buffer, by target rate: the harness's (its whole
process: the reconciles and their probe hits, from its rusage, start-up included) per reconcile
and in cores (CPU time over the time it took to run its reconciles), and this process's (the
tracer's reader, decoder and assembler, from the harness's start until the run's spans were
assembled) as events read per CPU-second and in cores. Median (min–max) over the runs.

| target | achieved | harness CPU per reconcile | harness cores | reader events per CPU-second | reader cores |
| --- | ---: | ---: | ---: | ---: | ---: |
`, sizeName(def))
		for _, r := range rates {
			var ach, hPer, hCores, rRate, rCores samples
			for _, lr := range results[def][r] {
				ach = append(ach, lr.achieved)
				hPer = append(hPer, float64(lr.harnessCPU.Nanoseconds())/float64(max(lr.recs, 1)))
				hCores = append(hCores, lr.harnessCPU.Seconds()/lr.wall.Seconds())
				read := float64(lr.events - lr.lost)
				rRate = append(rRate, read/max(lr.readerCPU.Seconds(), 1e-9))
				rCores = append(rCores, lr.readerCPU.Seconds()/lr.wall.Seconds())
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", rate(r), rate(ach.median()), hPer.spread(ns), hCores.spread(cores), rRate.spread(perSecond), rCores.spread(cores))
		}
		fmt.Println()
	}

	for _, goal := range []float64{20000, 50000} {
		if err := c.lossVerdict(results[def][goal], def, goal, *duration); err != nil {
			return err
		}
	}
	return nil
}

func cores(v float64) string     { return fmt.Sprintf("%.2f", v) }
func perSecond(v float64) string { return fmt.Sprintf("%.0f k/s", v/1e3) }

// lossVerdict records the budget: zero loss at goal reconciles/s with the default buffer of
// def bytes, from the runs at that rate (none: no verdict).
func (c *common) lossVerdict(runsAt []lossRun, def int, goal float64, duration time.Duration) error {
	if len(runsAt) == 0 {
		return nil
	}
	var lost, ach, hPer, hCores samples
	for _, lr := range runsAt {
		lost = append(lost, float64(lr.lost))
		ach = append(ach, lr.achieved)
		hPer = append(hPer, float64(lr.harnessCPU.Nanoseconds())/float64(max(lr.recs, 1)))
		hCores = append(hCores, lr.harnessCPU.Seconds()/lr.wall.Seconds())
	}
	v := Verdict{
		Figure:   fmt.Sprintf("lost events at %.0f k reconciles/s, default %s ring buffer (4 events per reconcile)", goal/1e3, sizeName(def)),
		Goal:     fmt.Sprintf("0 lost at %.0f k/s", goal/1e3),
		Measured: fmt.Sprintf("%.0f lost (max %.0f) at %s achieved", lost.median(), lost.max(), rate(ach.median())),
		Value:    lost.median(),
		Unit:     "events lost",
		Met:      lost.max() == 0 && ach.median() >= 0.95*goal,
	}
	// The cores the traced harness alone would need at the goal, from its CPU per reconcile.
	need := hPer.median() * goal / 1e9
	short := ""
	if ach.median() < 0.95*goal {
		short = fmt.Sprintf("; the traced harness reached only %s: at %s of CPU per reconcile (its probe hits included; section 1: mostly the single-stepped RETs) it alone would need %.1f cores at %s, on a machine of %d where, shared with other work, it got %.2f", rate(ach.median()), ns(hPer.median()), need, rate(goal), runtime.NumCPU(), hCores.median())
	}
	switch {
	case lost.max() > 0:
		v.Why = fmt.Sprintf("the reader fell behind: up to %.0f of ~%.0f events per run were dropped in the kernel; the %s buffer holds %s of events at %s and the reader, sharing the busy cores with the traced process and other work, sometimes waited longer than that for a CPU (its own CPU per event: the table in section 3)%s", lost.max(), 4*ach.median()*duration.Seconds(), sizeName(def), ns(holds(def, goal)), rate(goal), short)
	case !v.Met:
		v.Why = "no event was lost" + short + ", so zero loss is shown only up to the rate reached"
	}
	return c.verdict(v)
}
