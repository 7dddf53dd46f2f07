package collector

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// pidFilter is the kernel's PID filter (traced_pids, bpf/include/hit.h): one bit per host PID,
// set for the traced processes, mapped into this process. Bits are set and cleared with atomic
// ORs and ANDs, as the kernel's on_exec sets them at exec, so that neither side's write undoes
// the other's in a word they share.
type pidFilter struct {
	mem   []byte
	words []uint64 // mem, a word per 64 PIDs
}

// mapPIDFilter maps the kernel's filter, an array of one BPF_F_MMAPABLE value.
func mapPIDFilter(m *ebpf.Map) (*pidFilter, error) {
	size := int(m.ValueSize())
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the kernel's PID filter: %w", err)
	}
	return &pidFilter{mem: mem, words: unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), size/8)}, nil
}

// limit is the first PID the filter cannot hold: PID_MAX_LIMIT, which no PID reaches.
func (f *pidFilter) limit() int { return len(f.words) * 64 }

// add sets pid's bit; pid is from 1 to limit()-1 (the caller checks).
func (f *pidFilter) add(pid int) {
	atomic.OrUint64(&f.words[pid/64], 1<<(pid%64))
}

func (f *pidFilter) remove(pid int) {
	if pid > 0 && pid < f.limit() {
		atomic.AndUint64(&f.words[pid/64], ^(uint64(1) << (pid % 64)))
	}
}

func (f *pidFilter) has(pid int) bool {
	return pid > 0 && pid < f.limit() && atomic.LoadUint64(&f.words[pid/64])&(1<<(pid%64)) != 0
}

func (f *pidFilter) close() error {
	f.words = nil
	return unix.Munmap(f.mem)
}
