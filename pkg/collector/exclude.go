package collector

import (
	"fmt"

	rbpf "github.com/reconscope/reconscope/bpf"
)

// Exclude makes the kernel skip the spans of one controller instance of process pid: key is
// the value a span entry's key slot held (span.Span.Key: a work queue's processing set, a
// controller's receiver). From then on the entry exits before reserving a record, nothing
// inside the span is recorded either, and the kernel counts the exit (Counters.Excluded).
// The keys go with the process (Untrace). Excluding a key twice changes nothing.
func (c *Collector) Exclude(pid uint32, key uint64) error {
	return c.controller(pid, key, func(p *process, k *rbpf.TraceCtlKey) error {
		if p.excluded[key] {
			return nil
		}
		if err := c.excluded.Update(k, uint32(1), 0); err != nil {
			return fmt.Errorf("exclude a controller of process %d in the kernel (its spans are dropped by the agent instead): %w", pid, err)
		}
		if p.excluded == nil {
			p.excluded = map[uint64]bool{}
		}
		p.excluded[key] = true
		return nil
	})
}

// forgetExcluded removes process p's keys from the kernel's excluded map.
func (c *Collector) forgetExcluded(p *process) {
	for key := range p.excluded {
		k := rbpf.TraceCtlKey{Pid: p.pid, Ptr: key}
		_ = c.excluded.Delete(&k)
	}
}
