package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	rbpf "github.com/reconscope/reconscope/bpf"
)

// WatchExecs reports the PID of every process that calls execve on this host, from the raw
// tracepoint sched_process_exec (no tracefs, no kprobes needed), until ctx ends. Discovery uses
// it to look at a new program at once. The channel drops PIDs while its reader is behind: it is
// a prompt, the periodic /proc scan stays the complete record.
func (c *Collector) WatchExecs(ctx context.Context) (<-chan int, error) {
	prog := c.coll.Programs[rbpf.TraceProgOnExec]
	if prog == nil {
		return nil, errors.New("exec notifications: not loaded (this kernel has no raw tracepoints for eBPF, Linux 4.17+)")
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: prog})
	if err != nil {
		return nil, fmt.Errorf("attach raw tracepoint sched_process_exec: %w", permission(err))
	}
	rd, err := ringbuf.NewReader(c.coll.Maps[rbpf.TraceMapExecs])
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("open exec ring buffer: %w", err)
	}
	out := make(chan int, 256)
	stop := context.AfterFunc(ctx, func() { rd.Close() })
	go func() {
		defer close(out)
		defer stop()
		defer l.Close()
		var rec ringbuf.Record
		for {
			if err := rd.ReadInto(&rec); err != nil {
				if !errors.Is(err, os.ErrClosed) && !errors.Is(err, ringbuf.ErrClosed) {
					c.log.Warn("exec notifications stopped; discovery relies on its /proc scan", "err", err)
				}
				return
			}
			if len(rec.RawSample) < 4 {
				continue
			}
			select {
			case out <- int(binary.NativeEndian.Uint32(rec.RawSample)):
			default:
			}
		}
	}()
	return out, nil
}
