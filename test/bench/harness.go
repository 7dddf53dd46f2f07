package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/symbols"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/bench/loopreport"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

// harnessReport is the JSON line test/bench/testdata/reconcileloop prints at the end, and the
// process's CPU time.
type harnessReport struct {
	loopreport.Report
	// ProcessCPU is the harness process's whole CPU time (user + system, from its rusage), set
	// by runHarness: in paced mode the harness does not time itself.
	ProcessCPU time.Duration `json:"-"`
}

// harnessWarmup is reconcileloop's default -warmup: reconciles before its timed loop.
const harnessWarmup = 2000

// runHarness starts the harness, lets attach set up tracing of its PID while it waits for its
// start file, lets it run to the end, calls the returned detach, and returns its report.
func runHarness(bin string, args []string, attach func(pid int) (detach func() error, err error)) (harnessReport, error) {
	var rep harnessReport
	dir, err := os.MkdirTemp("", "reconscope-bench-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	startFile := filepath.Join(dir, "start")
	cmd := exec.Command(bin, append([]string{"-start", startFile}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return rep, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var detach func() error
	if attach != nil {
		if detach, err = attach(cmd.Process.Pid); err != nil {
			return rep, err
		}
	}
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		return rep, err
	}
	werr := cmd.Wait()
	if detach != nil {
		if err := detach(); err != nil {
			return rep, err
		}
	}
	if werr != nil {
		return rep, fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), werr, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		return rep, fmt.Errorf("%s printed %q: %w", filepath.Base(bin), out.String(), err)
	}
	rep.ProcessCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return rep, nil
}

// reconcileProbe is the catalog's controller-runtime v0.23+ reconcile probe pointed at the fake
// controller's Reconcile (test/fakectl/controller), which reconcileloop calls, as the tracer's
// tests do.
func reconcileProbe() (*probes.Probe, error) {
	p, err := fakectltest.Probe()
	if err != nil {
		return nil, err
	}
	p.ID = "bench/reconcile"
	return p, nil
}

// spanAndCallProbes are reconcileProbe and callProbe: a span and a call inside it.
func spanAndCallProbes() (recon, call *probes.Probe, err error) {
	if recon, err = reconcileProbe(); err != nil {
		return nil, nil, err
	}
	if call, err = callProbe(); err != nil {
		return nil, nil, err
	}
	return recon, call, nil
}

// roundFlags are the flags of a benchmark that runs the harness in rounds, each round every
// configuration once: traced and empty-program runs of nTraced items, untraced runs of
// nUntraced.
type roundFlags struct {
	harness                    *string
	rounds, nTraced, nUntraced *int
}

// parseRounds parses the arguments of the benchmark command name, which runs the harness in
// rounds with an empty program beside reconscope's: the common flags and the round flags, of
// which -harness is required; items says what a run counts (reconciles, goroutines).
func parseRounds(name string, args []string, items string, nTraced, nUntraced int) (*overheadBench, roundFlags, error) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	o := &overheadBench{}
	o.register(fs)
	r := roundFlags{
		harness:   fs.String("harness", "", "reconcileloop binary"),
		rounds:    fs.Int("rounds", 7, "rounds; each runs every configuration once"),
		nTraced:   fs.Int("n-traced", nTraced, items+" per traced or empty-program run"),
		nUntraced: fs.Int("n-untraced", nUntraced, items+" per untraced run"),
	}
	fs.Parse(args)
	if *r.harness == "" {
		return nil, r, fmt.Errorf("-harness is required")
	}
	return o, r, nil
}

// callProbe is the catalog's client-go request probe (a call: five strings read through the
// receiver at entry, the error at return) pointed at reconcileloop's (*RestRequest).request.
func callProbe() (*probes.Probe, error) {
	return benchCallProbe("client-go/request", "bench/request", `^main\.\(\*RestRequest\)\.request$`,
		func(p *probes.Probe) *probes.Layout { return &p.Entry }, "main.RestRequest")
}

// cacheGetProbe is the catalog's controller-runtime cache Get probe (the key's strings from
// registers at entry, the object's pointer kept; the object's UID and resourceVersion read
// through it at return, with the error) pointed at reconcileloop's (*informerCache).Get.
func cacheGetProbe() (*probes.Probe, error) {
	return benchCallProbe("controller-runtime/cache-get", "bench/cache-get", `^main\.\(\*informerCache\)\.Get$`,
		func(p *probes.Probe) *probes.Layout { return &p.Return }, "main.ObjectMeta")
}

// benchCallProbe copies the catalog's probe id as benchID, pointed at the functions symbol
// matches in package main, the struct of the string fields of layout read as fieldType.
func benchCallProbe(id, benchID, symbol string, layout func(*probes.Probe) *probes.Layout, fieldType string) (*probes.Probe, error) {
	for _, p := range probes.Catalog() {
		if p.ID == id {
			c := *p
			c.ID, c.Module = benchID, ""
			c.Symbol = regexp.MustCompile(symbol)
			l := layout(&c)
			for i := range l.Strings {
				if l.Strings[i].Base != probes.None {
					l.Strings[i].Field.Type = fieldType
				}
			}
			return &c, nil
		}
	}
	return nil, fmt.Errorf("the catalog has no probe %s", id)
}

// tracing is one tracer.Tracer, running, that counts the spans it finishes.
type tracing struct {
	tr     *tracer.Tracer
	cancel context.CancelFunc
	done   chan error
	spans  atomic.Int64
	prog   *ebpf.Program // the tracer's probe program, for the kernel's run-time stats
}

func (t *tracing) Write(*span.Span) error { t.spans.Add(1); return nil }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func startTracing(catalog []*probes.Probe, opts collector.Options) (*tracing, error) {
	before, err := ownPrograms()
	if err != nil {
		return nil, err
	}
	t := &tracing{done: make(chan error, 1)}
	t.tr, err = tracer.New(tracer.Options{Catalog: catalog, Collector: opts, Writer: t, Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("start tracer: %w", err)
	}
	if t.prog, err = probeProgram(before); err != nil {
		t.tr.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go func() { t.done <- t.tr.Run(ctx) }()
	return t, nil
}

// traceHarness starts a tracer with catalog and traces process pid with it.
func traceHarness(catalog []*probes.Probe, opts collector.Options, pid int) (*tracing, error) {
	t, err := startTracing(catalog, opts)
	if err != nil {
		return nil, err
	}
	if _, err := t.tr.TracePID(pid); err != nil {
		t.stop()
		return nil, fmt.Errorf("trace harness: %w", err)
	}
	return t, nil
}

// probeProgram returns the collector's probe program among the programs this process holds
// now and did not hold before (ownPrograms), for its kernel run-time stats.
func probeProgram(before map[ebpf.ProgramID]bool) (*ebpf.Program, error) {
	after, err := ownPrograms()
	if err != nil {
		return nil, err
	}
	for id := range after {
		if before[id] {
			continue
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil && strings.HasPrefix(info.Name, "probe_site") {
			return p, nil
		}
		p.Close()
	}
	return nil, nil
}

// attachCollector attaches the collector's program to exe with catalog's plan, only the sites
// of probe only when it is not nil (a plan needs a span probe, this need not), and traces
// process pid, or none when pid is 0: then every hit in exe's processes leaves the program at
// its PID filter. Nothing reads the ring buffer. stop detaches it and returns the program's
// kernel run-time stats. With twice, the program is attached a second time at the same sites
// (attachAgain): each hit runs it twice.
func attachCollector(catalog []*probes.Probe, only *probes.Probe, exe string, pid int, twice bool, opts collector.Options) (stop func() (progStats, error), err error) {
	before, err := ownPrograms()
	if err != nil {
		return nil, err
	}
	col, err := collector.New(opts)
	if err != nil {
		return nil, fmt.Errorf("load collector: %w", err)
	}
	bin, err := symbols.Open(exe)
	if err != nil {
		col.Close()
		return nil, err
	}
	defer bin.Close()
	plan, err := probes.NewPlan(bin, catalog)
	if err != nil {
		col.Close()
		return nil, err
	}
	if only != nil {
		plan.Sites = slices.DeleteFunc(plan.Sites, func(s probes.Site) bool { return s.Probe != only })
	}
	id, err := col.FileID(exe)
	if err != nil {
		col.Close()
		return nil, err
	}
	att, err := col.Attach(exe, id, plan)
	if err != nil {
		col.Close()
		return nil, fmt.Errorf("attach: %w", err)
	}
	if pid != 0 {
		if err := col.Trace(pid, att); err != nil {
			col.Close()
			return nil, fmt.Errorf("trace harness: %w", err)
		}
	}
	prog, err := probeProgram(before)
	if err != nil || prog == nil {
		col.Close()
		return nil, fmt.Errorf("find the collector's program: %v", err)
	}
	again := func() error { return nil }
	if twice {
		if again, err = attachAgain(prog); err != nil {
			prog.Close()
			col.Close()
			return nil, err
		}
	}
	return func() (progStats, error) {
		aerr := again()
		ps, err := readProgStats(prog)
		prog.Close()
		return ps, errors.Join(aerr, err, col.Close())
	}, nil
}

// waitSpans waits until at least want spans were finished, or their count stops moving.
func (t *tracing) waitSpans(want int64, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	last, since := t.spans.Load(), time.Now()
	for time.Now().Before(deadline) {
		n := t.spans.Load()
		if n >= want {
			return n
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > 400*time.Millisecond {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	return t.spans.Load()
}

// stop ends Run, reads the counters and frees everything.
func (t *tracing) stop() (tracer.Stats, progStats, error) {
	t.cancel()
	err := <-t.done
	st := t.tr.Stats()
	var ps progStats
	if t.prog != nil {
		ps, _ = readProgStats(t.prog)
		t.prog.Close()
	}
	if cerr := t.tr.Close(); err == nil {
		err = cerr
	}
	return st, ps, err
}
