package collector

import (
	"fmt"

	rbpf "github.com/reconscope/reconscope/bpf"
)

// The values of the kernel's call_detail map (enum call_detail_mode in bpf/trace.bpf.c).
const (
	callDetailCalls     = uint32(rbpf.TraceCallDetailModeCALL_DETAIL_CALLS)
	callDetailReconcile = uint32(rbpf.TraceCallDetailModeCALL_DETAIL_RECONCILE)
)

// SetCallDetail says whether the spans of one controller instance of process pid (key: the
// value its span entry's key slot held, span.Span.Key, as for Exclude) record the calls of
// gated sites (AttachCalls). The kernel reads it at each span's entry: a span in flight keeps
// the detail it began with. The keys go with the process (Untrace).
func (c *Collector) SetCallDetail(pid uint32, key uint64, calls bool) error {
	return c.controller(pid, key, func(p *process, k *rbpf.TraceCtlKey) error {
		if err := c.detail.Update(k, detailMode(calls), 0); err != nil {
			return fmt.Errorf("set the detail of a controller of process %d in the kernel: %w", pid, err)
		}
		if p.detail == nil {
			p.detail = map[uint64]bool{}
		}
		p.detail[key] = calls
		return nil
	})
}

// detailMode is the kernel's call_detail value of a controller that records its calls or not.
func detailMode(calls bool) uint32 {
	if calls {
		return callDetailCalls
	}
	return callDetailReconcile
}

// controller calls f with process pid's state and the kernel's key of its controller instance
// key, under the collector's lock, unless key is 0 (no instance) or the process is no longer
// traced: the shared start of SetCallDetail and Exclude.
func (c *Collector) controller(pid uint32, key uint64, f func(*process, *rbpf.TraceCtlKey) error) error {
	if key == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[pid]
	if p == nil {
		return nil // untraced meanwhile
	}
	return f(p, &rbpf.TraceCtlKey{Pid: pid, Ptr: key})
}

// SetCallDetailDefault says whether the spans of controller instances SetCallDetail was not
// told of record the calls of gated sites: true while some controller whose instance is not
// known yet is to be traced at detail calls (its first spans then have their calls; user space
// strips them from the spans of the others, and tells the kernel their instances).
func (c *Collector) SetCallDetailDefault(calls bool) error {
	var k rbpf.TraceCtlKey
	if err := c.detail.Update(&k, detailMode(calls), 0); err != nil {
		return fmt.Errorf("set the default detail in the kernel: %w", err)
	}
	return nil
}

// forgetDetail removes process p's keys from the kernel's call_detail map.
func (c *Collector) forgetDetail(p *process) {
	for key := range p.detail {
		k := rbpf.TraceCtlKey{Pid: p.pid, Ptr: key}
		_ = c.detail.Delete(&k)
	}
}
