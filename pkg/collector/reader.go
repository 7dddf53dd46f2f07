package collector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
)

// The kernel's event kinds and flags (bpf/include/events.h), as event.kind and event.flags hold them.
const (
	flagReconcileID = uint8(rbpf.TraceEventFlagEVENT_F_RECONCILE_ID)
	flagErrorMsg    = uint8(rbpf.TraceEventFlagEVENT_F_ERROR_MSG)
	flagNoEntry     = uint8(rbpf.TraceEventFlagEVENT_F_NO_ENTRY)
	flagNested      = uint8(rbpf.TraceEventFlagEVENT_F_NESTED)
	eventEntry      = uint8(rbpf.TraceEventKindEVENT_ENTRY)
	eventDeferred   = uint8(rbpf.TraceEventKindEVENT_DEFERRED)
	// strExtra is STR_EXTRA, the last string: the reconcile ID or the error message.
	strExtra = len(rbpf.TraceEvent{}.StrLen) - 1
)

// PollInterval bounds how long an event waits in the ring buffer when the kernel did not
// wake the reader (records are submitted without a wakeup below the threshold). Each poll
// wakes the Go runtime's monitor thread, which then polls every 20µs to 10ms for a while: at
// 50ms that cost the agent more CPU than reading the records of kube-controller-manager at
// work, and at 200ms a fifth of its CPU per reconcile there (0.82× at 500ms, BENCHMARKS.md,
// section 5). Losses do not depend on it (the kernel wakes the reader each time a quarter of
// the buffer fills), only how soon a span is written does: within half a second, a tenth of
// the OpenTelemetry batch exporter's default delay.
const PollInterval = 500 * time.Millisecond

// IdlePollInterval is the longest wait between two polls: after a poll that found no record
// the wait doubles, up to this, and a record brings it back to PollInterval. An agent on a node
// whose controllers are at rest is woken once a second instead of five times; the first record
// after a rest is read up to this late, unless the kernel wakes the reader.
const IdlePollInterval = time.Second

// ReadStats counts what the reader saw.
type ReadStats struct {
	Events    uint64
	Malformed uint64 // records too short or naming an unknown site
}

// Run reads the ring buffer until ctx ends or Close is called and hands each decoded event
// to handle, on this goroutine. idle, when not nil, is called after every poll interval
// without events, so the caller can expire old state.
//
// Between two drains of the ring buffer Run waits in the Go runtime's network poller (the
// ring buffer's file descriptor is pollable), not in a blocking epoll_wait: a goroutine
// blocked in a system call for longer than 10ms has its processor handed off by the
// runtime's monitor thread, which then keeps polling every 20µs, and on a VM that polling
// was a third of the agent's CPU time (BENCHMARKS.md, section 5). Where the descriptor cannot
// be polled that way, Run waits in the reader as before.
func (c *Collector) Run(ctx context.Context, handle func(span.Event), idle func()) (ReadStats, error) {
	w, werr := newReadyWaiter(c.coll.Maps[rbpf.TraceMapEvents].FD())
	if werr != nil {
		c.log.Debug("ring buffer: waiting in epoll_wait, not in the runtime's poller", "err", werr)
		return c.runBlocking(ctx, handle, idle)
	}
	// ctx's end wakes the wait below, which drains what the ring buffer still holds (records
	// submitted without a wakeup in the last poll interval) before Run returns: a stop loses
	// no record the kernel wrote before it.
	stop := context.AfterFunc(ctx, w.close)
	defer stop()
	defer w.close()
	var rec ringbuf.Record
	var raw probes.Raw
	// A deadline already past: ReadInto returns the records in the buffer, then
	// os.ErrDeadlineExceeded, without waiting.
	c.reader.SetDeadline(time.Unix(1, 0))
	timedOut := false
	interval := PollInterval
	for {
		read := false
		for {
			err := c.reader.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
					return c.ReadStats(), nil
				}
				return c.ReadStats(), fmt.Errorf("read ring buffer: %w", err)
			}
			c.handleRecord(rec.RawSample, &raw, handle)
			read = true
		}
		if timedOut && idle != nil {
			idle()
		}
		if w.closed.Load() {
			return c.ReadStats(), nil // drained after the stop
		}
		if read {
			interval = PollInterval
		} else if timedOut {
			interval = min(2*interval, IdlePollInterval)
		}
		err := w.wait(interval)
		timedOut = errors.Is(err, os.ErrDeadlineExceeded)
		if err != nil && !timedOut {
			if errors.Is(err, os.ErrClosed) {
				continue // drain, then return
			}
			return c.ReadStats(), fmt.Errorf("wait for the ring buffer: %w", err)
		}
	}
}

// runBlocking is Run waiting in the reader's own epoll_wait.
func (c *Collector) runBlocking(ctx context.Context, handle func(span.Event), idle func()) (ReadStats, error) {
	stop := context.AfterFunc(ctx, func() { c.reader.Close() })
	defer stop()
	var rec ringbuf.Record
	var raw probes.Raw
	for {
		c.reader.SetDeadline(time.Now().Add(PollInterval))
		err := c.reader.ReadInto(&rec)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if idle != nil {
					idle()
				}
				continue
			}
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return c.ReadStats(), nil
			}
			return c.ReadStats(), fmt.Errorf("read ring buffer: %w", err)
		}
		c.handleRecord(rec.RawSample, &raw, handle)
	}
}

// handleRecord decodes one record and hands its event to handle.
func (c *Collector) handleRecord(b []byte, raw *probes.Raw, handle func(span.Event)) {
	c.events.Add(1)
	site, ok := c.decode(b, raw)
	if !ok {
		c.malformed.Add(1)
		return
	}
	dec := site.Probe.DecodeEntry
	if site.Kind == probes.SiteReturn || raw.Deferred {
		dec = site.Probe.DecodeReturn
	}
	ev := dec(raw)
	ev.SingleStepped = !site.Emulated
	handle(ev)
}

// ReadStats returns what the reader counted so far; safe while Run runs.
func (c *Collector) ReadStats() ReadStats {
	return ReadStats{Events: c.events.Load(), Malformed: c.malformed.Load()}
}

// Record sizes, from the generated types: a record is a struct event_head alone (no strings)
// or a whole struct event, which starts with the same fields (bpf/include/events.h).
var (
	headSize  = int(unsafe.Sizeof(rbpf.TraceEventHead{}))
	eventSize = int(unsafe.Sizeof(rbpf.TraceEvent{}))
)

// decode turns one ring-buffer record into raw, resolving the error type through the traced
// process (tracing first a process the kernel admitted at exec that is not known here yet). It
// returns the record's site, or false for a malformed record.
func (c *Collector) decode(b []byte, raw *probes.Raw) (*probes.Site, bool) {
	if len(b) < headSize {
		return nil, false
	}
	e := (*rbpf.TraceEventHead)(unsafe.Pointer(&b[0]))
	c.mu.RLock()
	var site *probes.Site
	var owner *Attachment
	if int(e.Site) < len(c.table) {
		site = c.table[e.Site]
	}
	if int(e.Site) < len(c.owner) {
		owner = c.owner[e.Site]
	}
	p := c.procs[e.Pid]
	c.mu.RUnlock()
	if site == nil {
		return nil, false
	}
	if p == nil && owner != nil {
		p = c.adopt(e.Pid, owner) // admitted at exec, its notification not handled yet
	}
	DecodeEvent(b, raw)
	raw.Function = site.Function.Name
	if slot := site.Layout().Key; site.Kind == probes.SiteEntry && site.Probe.Role == probes.RoleSpan && slot >= 0 {
		raw.Key = e.Args[slot]
	}
	if errSlot := site.Layout().Err; site.Kind == probes.SiteReturn && errSlot >= 0 {
		if itab := e.Args[errSlot]; itab != 0 {
			raw.ErrorType = "unknown"
			if p != nil {
				raw.ErrorType = p.errorType(itab)
			}
		}
	}
	if site.Layout().Values[0].Base == probes.Frames && p != nil {
		raw.Worker = p.worker(e.Vals)
	}
	if slot := site.ItabSlot(); slot >= 0 {
		if itab := e.Args[slot]; itab != 0 && p != nil {
			raw.ItabType = p.errorType(itab)
		}
	}
	if slot := site.Layout().Type; slot >= 0 {
		if typ := e.Args[slot]; typ != 0 && p != nil {
			raw.ObjectType = p.objectType(typ)
		}
	}
	return site, true
}

// DecodeEvent copies the kernel's record into raw (fields, flags, and the strings of a whole
// struct event); it is pure. A record shorter than struct event_head is malformed (false).
func DecodeEvent(b []byte, raw *probes.Raw) bool {
	if len(b) < headSize {
		return false
	}
	h := (*rbpf.TraceEventHead)(unsafe.Pointer(&b[0]))
	*raw = probes.Raw{
		Entry:     h.Kind == eventEntry,
		Deferred:  h.Kind == eventDeferred,
		PID:       h.Pid,
		Time:      h.Ktime,
		G:         h.G,
		Goid:      h.Goid,
		SpanStart: h.SpanStart,
		Nested:    h.Flags&flagNested != 0,
		NoEntry:   h.Flags&flagNoEntry != 0,
		Args:      h.Args,
		Vals:      h.Vals,
	}
	if len(b) < eventSize {
		return true // the head alone: the site read no strings
	}
	e := (*rbpf.TraceEvent)(unsafe.Pointer(&b[0]))
	for i := 0; i < strExtra; i++ {
		raw.Str[i], raw.Truncated[i] = cString(e.Str[i][:], e.StrLen[i])
	}
	extra, trunc := cString(e.Str[strExtra][:], e.StrLen[strExtra])
	switch {
	case e.Flags&flagReconcileID != 0:
		raw.ReconcileID = extra
	case e.Flags&flagErrorMsg != 0:
		raw.ErrorMsg = extra
		if trunc {
			raw.ErrorMsg += "…" // long messages are cut; the span stays complete
		}
	}
	return true
}

// cString is the string the kernel copied into b (STR_MAX bytes, a row of event.str), whose
// original length was n: truncated when n is longer than b.
func cString(b []int8, n uint16) (string, bool) {
	l := int(n)
	trunc := false
	if l > len(b) {
		l, trunc = len(b), true
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), l)), trunc
}
