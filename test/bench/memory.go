package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// rssReport is what rss-agent prints.
type rssReport struct {
	VmRSS      uint64 `json:"vm_rss"` // bytes
	VmHWM      uint64 `json:"vm_hwm"`
	HeapInuse  uint64 `json:"heap_inuse"`
	GoSys      uint64 `json:"go_sys"`
	Spans      int64  `json:"spans"`
	Processes  int    `json:"processes"`
	Executable int    `json:"executables"`
	Sites      int    `json:"sites"`
}

// rss runs rss-agent (this binary, fresh each time) to measure an agent's memory while it
// traces many processes.
func rss(args []string) error {
	fs := flag.NewFlagSet("rss", flag.ExitOnError)
	var c common
	c.register(fs)
	fakectl := fs.String("fakectl", "", "fakectl binary (test/fakectl)")
	procs := fs.Int("procs", 20, "processes to trace")
	runs := fs.Int("runs", 5, "runs per variant")
	duration := fs.Duration("duration", 3*time.Second, "tracing time per run")
	interval := fs.Duration("interval", 5*time.Millisecond, "pause between two reconciles of one fakectl")
	fs.Parse(args)
	if *fakectl == "" {
		return fmt.Errorf("-fakectl is required")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	variants := []struct {
		name   string
		copies bool
	}{
		{fmt.Sprintf("%d processes of one executable", *procs), false},
		{fmt.Sprintf("%d processes of %d executables (copies of fakectl)", *procs, *procs), true},
	}
	res := make([][]rssReport, len(variants))
	start := time.Now()
	for range *runs {
		for i, v := range variants {
			a := []string{"rss-agent", "-fakectl", *fakectl, "-procs", strconv.Itoa(*procs), "-duration", duration.String(), "-interval", interval.String()}
			if v.copies {
				a = append(a, "-copies")
			}
			var out bytes.Buffer
			cmd := exec.Command(self, a...)
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("rss-agent: %w\n%s", err, out.String())
			}
			var r rssReport
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				return fmt.Errorf("rss-agent printed %q: %w", out.String(), err)
			}
			res[i] = append(res[i], r)
		}
	}
	st, err := os.Stat(*fakectl)
	if err != nil {
		return err
	}
	fmt.Printf("Command: `%s` (%s)\n\n", c.command(), time.Since(start).Round(time.Second))
	fmt.Printf(`A fresh agent process (bench rss-agent: one tracer.Tracer with the default options, spans
written as JSON lines to a discarding writer) traces %d fakectl processes (TracePID each), each
reconciling every %s, for %s; then it reads its own VmHWM (peak RSS) and VmRSS from
/proc/self/status and Go's heap figures. Median (min–max) over %d runs. fakectl is a %s
executable; once an executable is attached the agent drops the tables it read to plan its
probes (symbols.Binary.Release) and keeps its file open, its module data and its plan, so the
per-executable share of the heap stays small even for real controllers of tens of MiB.

`, *procs, *interval, *duration, *runs, mib(float64(st.Size())))
	fmt.Println("| traced | executables attached | probe sites | spans in the run | peak RSS (VmHWM) | RSS at the end | Go heap in use | Go runtime total (Sys) |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	var worst samples
	for i, v := range variants {
		var hwm, cur, heap, sys, spans samples
		for _, r := range res[i] {
			hwm = append(hwm, float64(r.VmHWM))
			cur = append(cur, float64(r.VmRSS))
			heap = append(heap, float64(r.HeapInuse))
			sys = append(sys, float64(r.GoSys))
			spans = append(spans, float64(r.Spans))
		}
		r0 := res[i][0]
		fmt.Printf("| %s | %d | %d | %s | %s | %s | %s | %s |\n", v.name, r0.Executable, r0.Sites, spans.spread(count), hwm.spread(mib), cur.spread(mib), heap.spread(mib), sys.spread(mib))
		if hwm.median() > worst.median() || len(worst) == 0 {
			worst = hwm
		}
	}
	fmt.Println()
	heapOf := func(i int) float64 {
		var h samples
		for _, r := range res[i] {
			h = append(h, float64(r.HeapInuse))
		}
		return h.median()
	}
	perExe := (heapOf(1) - heapOf(0)) / float64(*procs-1)
	fmt.Printf("Each further attached executable costs about %s of Go heap here (%s executable, its\nmodule data and plan kept while attached).\n\n", mib(perExe), mib(float64(st.Size())))
	v := Verdict{
		Figure:   fmt.Sprintf("agent peak RSS tracing %d processes (worst variant)", *procs),
		Goal:     "< 64 MiB",
		Measured: mib(worst.median()),
		Value:    worst.median(),
		Unit:     "B",
		Met:      worst.median() < 64<<20,
	}
	if !v.Met {
		v.Why = fmt.Sprintf("each attached executable keeps about %s of Go heap (its module data and plan) on top of the tracer's fixed cost (section 4)", mib(perExe))
	}
	return c.verdict(v)
}

// rssAgent is one measured agent: it starts the fakectl processes, traces them, and prints
// an rssReport.
func rssAgent(args []string) error {
	fs := flag.NewFlagSet("rss-agent", flag.ExitOnError)
	fakectl := fs.String("fakectl", "", "fakectl binary")
	procs := fs.Int("procs", 20, "processes")
	copies := fs.Bool("copies", false, "run each process from its own copy of the executable")
	duration := fs.Duration("duration", 3*time.Second, "tracing time")
	interval := fs.Duration("interval", 5*time.Millisecond, "fakectl -interval")
	fs.Parse(args)

	dir, err := os.MkdirTemp("", "reconscope-bench-rss-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	stop := filepath.Join(dir, "stop")
	var cmds []*exec.Cmd
	defer func() {
		_ = os.WriteFile(stop, nil, 0o644)
		for _, c := range cmds {
			done := make(chan struct{})
			go func() { _ = c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = c.Process.Kill()
				<-done
			}
		}
	}()
	for i := range *procs {
		bin := *fakectl
		if *copies {
			bin = filepath.Join(dir, fmt.Sprintf("fakectl-%02d", i))
			if err := copyFile(*fakectl, bin); err != nil {
				return err
			}
		}
		c := exec.Command(bin, "-n", "1000000000", "-workers", "1", "-interval", interval.String(), "-stop", stop)
		c.Stdout, c.Stderr = io.Discard, os.Stderr
		if err := c.Start(); err != nil {
			return err
		}
		cmds = append(cmds, c)
	}
	recon, err := reconcileProbe()
	if err != nil {
		return err
	}
	w := &countingJSON{w: exporter.NewJSONWriter(io.Discard, ktime.NewClock())}
	tr, err := tracer.New(tracer.Options{Catalog: []*probes.Probe{recon}, Writer: w, Logger: quiet})
	if err != nil {
		return err
	}
	defer tr.Close()
	for _, c := range cmds {
		if _, err := tr.TracePID(c.Process.Pid); err != nil {
			return fmt.Errorf("trace fakectl %d: %w", c.Process.Pid, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	<-ctx.Done()
	var r rssReport
	r.VmRSS, r.VmHWM, err = procStatus()
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapInuse, r.GoSys = ms.HeapInuse, ms.Sys
	if err := <-done; err != nil {
		return err
	}
	st := tr.Stats()
	r.Spans, r.Processes, r.Sites = w.n.Load(), st.Processes, st.Sites
	r.Executable = 1
	if *copies {
		r.Executable = *procs
	}
	return jsonOut(r)
}

// countingJSON writes spans as JSON lines, as `trace --output json` does (here to nowhere),
// and counts them.
type countingJSON struct {
	w *exporter.JSONWriter
	n atomic.Int64
}

func (c *countingJSON) Write(s *span.Span) error { c.n.Add(1); return c.w.Write(s) }

func jsonOut(v any) error { return json.NewEncoder(os.Stdout).Encode(v) }

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// procStatus reads VmRSS and VmHWM of this process, in bytes.
func procStatus() (rss, hwm uint64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %s: %w", k, err)
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, errors.New("no VmRSS or VmHWM in /proc/self/status")
	}
	return rss, hwm, sc.Err()
}

// inspect times `reconscope-agent inspect` on big binaries: wall time, CPU time and peak RSS
// (the child's rusage, what /usr/bin/time -v prints).
func inspect(args []string) error {
	fs := flag.NewFlagSet("inspect", flag.ExitOnError)
	var c common
	c.register(fs)
	agent := fs.String("agent", "", "reconscope-agent binary")
	runs := fs.Int("runs", 5, "runs per binary")
	fs.Parse(args)
	if *agent == "" || fs.NArg() == 0 {
		return fmt.Errorf("want -agent and binaries to inspect")
	}
	bins := fs.Args()
	type meas struct{ wall, cpu, maxrss samples }
	res := make([]meas, len(bins))
	start := time.Now()
	for range *runs {
		for i, b := range bins {
			cmd := exec.Command(*agent, "inspect", b)
			cmd.Stdout = io.Discard
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			t0 := time.Now()
			err := cmd.Run()
			wall := time.Since(t0)
			var ee *exec.ExitError
			if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 3) { // 3: not traceable, still inspected
				return fmt.Errorf("inspect %s: %w\n%s", c.show(b), err, c.show(stderr.String()))
			}
			ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			if !ok {
				return errors.New("no rusage")
			}
			cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			res[i].wall = append(res[i].wall, float64(wall))
			res[i].cpu = append(res[i].cpu, float64(cpu))
			res[i].maxrss = append(res[i].maxrss, float64(ru.Maxrss<<10))
		}
	}
	fmt.Printf("Command: `%s` (%s)\n\n", c.command(), time.Since(start).Round(time.Second))
	fmt.Printf("`reconscope-agent inspect BINARY` (the release build from `make build`), each binary %d times,\ninterleaved; wall time, CPU time (user + system) and peak RSS from the child's rusage (what\n`/usr/bin/time -v` reports). Median (min–max).\n\n", *runs)
	fmt.Println("| binary | size | wall | CPU | peak RSS |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: |")
	for i, b := range bins {
		st, err := os.Stat(b)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", c.show(b), mib(float64(st.Size())), res[i].wall.spread(ns), res[i].cpu.spread(ns), res[i].maxrss.spread(mib))
	}
	fmt.Println()
	for i, b := range bins {
		wall, cpu := res[i].wall.median(), res[i].cpu.median()
		v := Verdict{
			Figure:   "`inspect` time, " + filepath.Base(b),
			Goal:     "< 1 s",
			Measured: fmt.Sprintf("%s wall, %s CPU", ns(wall), ns(cpu)),
			Value:    wall,
			Unit:     "ns",
			Met:      wall < 1e9,
		}
		switch {
		case !v.Met && cpu < 1e9:
			v.Why = fmt.Sprintf("its CPU time is %s: the rest of the wall time is waiting for a CPU on this shared 2-core machine", ns(cpu))
		case !v.Met:
			v.Why = "the whole binary's function table is read and every catalog symbol pattern is matched against it; BenchmarkOpenLarge in section 4 shows the allocations"
		}
		if err := c.verdict(v); err != nil {
			return err
		}
	}
	return nil
}
