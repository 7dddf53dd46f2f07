package main

// The bench's own eBPF programs beside the collector's: what the kernel measured of a program,
// the programs and links this process holds, and the programs of bpf/empty.bpf.c (the empty
// one and the event-only ones) loaded and attached as the collector would.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/reconscope/reconscope/pkg/collector"
)

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
