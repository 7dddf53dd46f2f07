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
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

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

// progStats is what the kernel measured of a program (with its statistics on: enableBPFStats).
type progStats struct {
	runs    uint64
	runTime time.Duration
}

func (p progStats) perRun() float64 {
	if p.runs == 0 {
		return 0
	}
	return float64(p.runTime.Nanoseconds()) / float64(p.runs)
}

func (p progStats) sub(q progStats) progStats {
	return progStats{runs: p.runs - q.runs, runTime: p.runTime - q.runTime}
}

func readProgStats(p *ebpf.Program) (progStats, error) {
	s, err := p.Stats()
	if err != nil {
		return progStats{}, fmt.Errorf("read program stats: %w", err)
	}
	return progStats{runs: s.RunCount, runTime: s.Runtime}, nil
}

// ownPrograms returns the IDs of the eBPF programs this process holds a descriptor of.
func ownPrograms() (map[ebpf.ProgramID]bool, error) {
	infos, err := ownFDInfos("anon_inode:bpf-prog")
	if err != nil {
		return nil, err
	}
	ids := map[ebpf.ProgramID]bool{}
	for _, in := range infos {
		if id, err := strconv.ParseUint(in["prog_id"], 10, 32); err == nil {
			ids[ebpf.ProgramID(id)] = true
		}
	}
	return ids, nil
}

// ownFDInfos returns the fdinfo fields (key: value lines) of each descriptor this process
// holds of the anonymous inode kind ("anon_inode:bpf-prog", "anon_inode:bpf_link").
func ownFDInfos(kind string) ([]map[string]string, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var infos []map[string]string
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || l != kind {
			continue
		}
		f, err := os.Open("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		in := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
				in[k] = strings.TrimSpace(v)
			}
		}
		f.Close()
		infos = append(infos, in)
	}
	return infos, nil
}

// attachAgain attaches prog a second time wherever this process's uprobe_multi links attach
// it: the same executable, file offsets and cookies, through new links. Each hit then runs the
// same program twice in one trap, one consumer of the uprobe after the other (the kernel's
// handler_chain runs every consumer before the probed instruction is emulated or stepped), the
// second time with the pages the first touched in the TLB. detach closes the new links.
func attachAgain(prog *ebpf.Program) (detach func() error, err error) {
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	id, ok := info.ID()
	if !ok {
		return nil, fmt.Errorf("attach again: the kernel does not say the program's ID")
	}
	infos, err := ownFDInfos("anon_inode:bpf_link")
	if err != nil {
		return nil, err
	}
	var links []link.Link
	detach = func() error {
		var errs []error
		for _, l := range links {
			errs = append(errs, l.Close())
		}
		return errors.Join(errs...)
	}
	for _, in := range infos {
		if in["prog_id"] != strconv.FormatUint(uint64(id), 10) || in["link_type"] != "uprobe_multi" {
			continue
		}
		lid, err := strconv.ParseUint(in["link_id"], 10, 32)
		if err != nil {
			continue
		}
		l, err := link.NewFromID(link.ID(lid))
		if err != nil {
			detach()
			return nil, fmt.Errorf("attach again: %w", err)
		}
		li, err := l.Info()
		l.Close()
		if err != nil {
			detach()
			return nil, fmt.Errorf("attach again: %w", err)
		}
		um := li.UprobeMulti()
		var offs []link.UprobeMultiOffset
		if um != nil {
			offs, _ = um.Offsets()
		}
		if len(offs) == 0 {
			detach()
			return nil, fmt.Errorf("attach again: link %d: the kernel does not say its offsets and cookies", lid)
		}
		addrs, cookies := make([]uint64, len(offs)), make([]uint64, len(offs))
		for i, o := range offs {
			addrs[i], cookies[i] = o.Offset, o.Cookie
		}
		ex, err := link.OpenExecutable(um.File)
		if err != nil {
			detach()
			return nil, fmt.Errorf("attach again: %w", err)
		}
		again, err := ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: addrs, Cookies: cookies})
		if err != nil {
			detach()
			return nil, fmt.Errorf("attach again to %s: %w", um.File, err)
		}
		links = append(links, again)
	}
	if len(links) == 0 {
		return nil, fmt.Errorf("attach again: no uprobe_multi link of program %d", id)
	}
	return detach, nil
}

// emptyProgram loads the program that does nothing (bpf/empty.bpf.c), in the flavour the
// collector would use here: uprobe_multi when the kernel has it.
func emptyProgram() (*ebpf.Program, bool, error) {
	spec, err := LoadEmpty()
	if err != nil {
		return nil, false, err
	}
	multi := features.HaveBPFLinkUprobeMulti() == nil
	name := EmptyProgEmpty
	if multi {
		name = EmptyProgEmptyMulti
	}
	p, err := ebpf.NewProgram(spec.Programs[name])
	if err != nil {
		return nil, false, fmt.Errorf("load empty program: %w", err)
	}
	return p, multi, nil
}

// attachEmptyTimes is attachEmpty, done a second time at the same offsets when twice: each hit
// then runs prog twice in one trap (attachAgain).
func attachEmptyTimes(prog *ebpf.Program, multi bool, exe string, offsets []uint64, twice bool) (func() error, error) {
	detach, err := attachEmpty(prog, multi, exe, offsets)
	if err != nil || !twice {
		return detach, err
	}
	again, err := attachEmpty(prog, multi, exe, offsets)
	if err != nil {
		detach()
		return nil, err
	}
	return func() error { return errors.Join(again(), detach()) }, nil
}

// attachEmpty puts prog on the file offsets of exe, the way the collector attaches its own.
func attachEmpty(prog *ebpf.Program, multi bool, exe string, offsets []uint64) (func() error, error) {
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		return nil, err
	}
	var links []link.Link
	closeAll := func() error {
		var errs []error
		for _, l := range links {
			errs = append(errs, l.Close())
		}
		return errors.Join(errs...)
	}
	if multi {
		l, err := ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: offsets, Cookies: make([]uint64, len(offsets))})
		if err != nil {
			return nil, fmt.Errorf("attach empty program: %w", err)
		}
		links = append(links, l)
		return closeAll, nil
	}
	for _, off := range offsets {
		l, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: off})
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("attach empty program: %w", err)
		}
		links = append(links, l)
	}
	return closeAll, nil
}

// Readers of an event-only program's records (eventOnly).
const (
	readRing = iota // a ringbuf.Reader on the ring buffer, as the agent's reader
	readPerf        // a perf.Reader on the perf event array (rec_perf_multi)
	readNone        // nothing reads: the ring buffer must hold every record of the run
)

// eventOnly loads the event-only program name (one of empty.bpf.c's event_* and rec_*
// programs) with a ring buffer of size bytes (a perf event array of size bytes per CPU for
// readPerf) and drains what it emits from a goroutine, as the agent's reader would; pid is the
// traced process, for the programs that filter on it. stop stops both.
func eventOnly(name string, size int, reader int, pid int) (prog *ebpf.Program, stop func(), err error) {
	spec, err := LoadEmpty()
	if err != nil {
		return nil, nil, err
	}
	for n := range spec.Programs {
		if n != name {
			delete(spec.Programs, n)
		}
	}
	spec.Maps[EmptyMapEvents].MaxEntries = uint32(size)
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("load event-only program: %w", err)
	}
	if name == EmptyProgRecExitMulti || name == EmptyProgRecTwiceExitMulti {
		// the traced process, in the PID filter of the early-exit copies (one bit per PID)
		filter := make([]byte, coll.Maps[EmptyMapTracedPids].ValueSize())
		filter[pid/8] |= 1 << (pid % 8)
		if err := coll.Maps[EmptyMapTracedPids].Put(uint32(0), filter); err != nil {
			coll.Close()
			return nil, nil, err
		}
	}
	type deadlineReader interface {
		SetDeadline(time.Time)
		Close() error
	}
	var rd deadlineReader
	var read func() error
	switch reader {
	case readRing:
		r, err := ringbuf.NewReader(coll.Maps[EmptyMapEvents])
		if err != nil {
			coll.Close()
			return nil, nil, err
		}
		var rec ringbuf.Record
		rd, read = r, func() error { return r.ReadInto(&rec) }
	case readPerf:
		// woken at a quarter full, as the collector's ring buffer reader is
		r, err := perf.NewReaderWithOptions(coll.Maps[EmptyMapPerfEvents], size, perf.ReaderOptions{Watermark: size / 4})
		if err != nil {
			coll.Close()
			return nil, nil, err
		}
		var rec perf.Record
		rd, read = r, func() error { return r.ReadInto(&rec) }
	default:
		return coll.Programs[name], func() { coll.Close() }, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			rd.SetDeadline(time.Now().Add(collector.PollInterval))
			if err := read(); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	}()
	return coll.Programs[name], func() { rd.Close(); <-done; coll.Close() }, nil
}

// enableBPFStats turns the kernel's run-time statistics of eBPF programs on (BPF_ENABLE_STATS)
// and returns what turns them off. The kernel counts who enabled them: another process writing
// kernel.bpf_stats_enabled (another benchmark ending) cannot turn them off under this one, and
// they end with this process.
func enableBPFStats() (restore func(), err error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable the kernel's eBPF run-time statistics: %w", err)
	}
	return func() { c.Close() }, nil
}
