// Package bpftest decides whether a test that needs real eBPF, or anything else of the machine
// (root, a tool, a kernel feature, a mount, a free port), can run here: it skips with the reason
// when the machine does not allow it, and fails instead when RECONSCOPE_REQUIRE_BPF=1 (CI), so
// such tests never skip silently where they must run.
//
// The rule for every test of the module: a skip because something of the machine is missing
// goes through [Require] or [SkipOrFail]. Only skips a person asks for stay plain t.Skip: -short,
// and tests that run only when a variable names their input (a benchmark binary, old Go
// toolchains, rewriting a corpus).
package bpftest

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
)

// RequireEnv is the variable that, set to 1 (CI sets it), turns every skip for a missing piece
// of the machine into a failure.
const RequireEnv = "RECONSCOPE_REQUIRE_BPF"

// Required says whether a test that cannot run here must fail (RECONSCOPE_REQUIRE_BPF=1).
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// SkipOrFail skips t, saying why (format and args: what is missing and how to get it), or fails
// it when RECONSCOPE_REQUIRE_BPF=1: under CI a test runs or fails, it never skips. For what the
// test needs of this machine; not for a skip the person running the tests asked for (-short).
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("cannot run here, and %s=1 makes that a failure: %s", RequireEnv, reason)
		return
	}
	t.Skipf("skipping: %s (set %s=1 to fail instead)", reason, RequireEnv)
}

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
	SkipOrFail(t, "needs eBPF: %s", reason)
}
