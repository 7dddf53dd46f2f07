// Package bpftest decides whether a test that needs real eBPF can run here: it skips with
// the reason when the kernel or the privileges do not allow it, and fails instead when
// RECONSCOPE_REQUIRE_BPF=1 (CI), so such tests never skip silently where they must run.
package bpftest

import (
	"os"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
)

var (
	once   sync.Once
	reason string
)

func probe() {
	if os.Geteuid() != 0 {
		reason = "not root: eBPF uprobes need root (or CAP_BPF and CAP_PERFMON); run make test, which uses sudo"
		return
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		reason = "cannot lift the memlock limit: " + err.Error()
		return
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Kprobe,
		License:      "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()},
	})
	if err != nil {
		reason = "the kernel refused a trivial eBPF program: " + err.Error()
		return
	}
	prog.Close()
}

// Require skips t (or fails it under RECONSCOPE_REQUIRE_BPF=1) unless eBPF uprobe programs can
// be loaded here.
func Require(t testing.TB) {
	t.Helper()
	once.Do(probe)
	if reason == "" {
		return
	}
	if os.Getenv("RECONSCOPE_REQUIRE_BPF") == "1" {
		t.Fatalf("eBPF is required (RECONSCOPE_REQUIRE_BPF=1) but unavailable: %s", reason)
	}
	t.Skipf("skipping: needs eBPF: %s (set RECONSCOPE_REQUIRE_BPF=1 to fail instead)", reason)
}
