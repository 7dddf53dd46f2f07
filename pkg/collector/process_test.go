package collector

import "testing"

// TestErrorTypeStaticItabs: a process names an error type from its executable's static itabs
// (the attachment's, shared by all its processes, at the itab's address minus the process's
// load bias) without a copy of them per process: its own cache holds only what it named
// otherwise.
func TestErrorTypeStaticItabs(t *testing.T) {
	a := &Attachment{names: map[uint64]string{0x4d2e18: "*errors.errorString", 0x4d2e40: "*errors.StatusError"}}
	const bias = 0x7f0000000000
	for _, pid := range []uint32{1, 2} {
		p := &process{pid: pid, att: a, bias: bias, names: map[uint64]string{}}
		for addr, want := range a.names {
			if got := p.errorType(addr + bias); got != want {
				t.Errorf("process %d: errorType(%#x) = %q, want %q", pid, addr+bias, got, want)
			}
		}
		if got := p.errorType(0x1234); got != "unknown" {
			t.Errorf("process %d: errorType of an itab neither static nor readable = %q, want unknown", pid, got)
		}
		if len(p.names) != 1 {
			t.Errorf("process %d caches %d names (%v), want only the one not among the static itabs", pid, len(p.names), p.names)
		}
	}
}
