package reliability

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
)

// allowedHelpers are the only kernel helpers the probe programs may call: map access, reading
// user memory, the clock, the current process and the attach cookie, and the ring buffer.
// Nothing that writes to a process (bpf_probe_write_user), signals it (bpf_send_signal*),
// changes what a function returns (bpf_override_return) or reads kernel memory.
var allowedHelpers = []asm.BuiltinFunc{
	asm.FnMapLookupElem, asm.FnMapUpdateElem, asm.FnMapDeleteElem,
	asm.FnProbeReadUser,
	asm.FnKtimeGetNs, asm.FnGetCurrentPidTgid, asm.FnGetAttachCookie,
	asm.FnRingbufReserve, asm.FnRingbufSubmit, asm.FnRingbufQuery,
}

// identityHelpers are the helpers the two programs that identify an executable (on_exec, at
// sched_process_exec, and identify, run by the agent on a page it mapped) may call besides:
// the current task, its mapping of the code (bpf_find_vma) and kernel reads (CO-RE) of that
// file's device and inode. They read the kernel's bookkeeping of the new process, never the
// process's memory, and run in no traced function.
var identityHelpers = []asm.BuiltinFunc{asm.FnGetCurrentTaskBtf, asm.FnFindVma, asm.FnProbeReadKernel}

// identitySections are those two programs' sections.
var identitySections = []string{"raw_tracepoint/sched_process_exec", "raw_tracepoint/identify"}

// TestProgramsOnlyRead: the committed eBPF objects (for amd64 and arm64 alike, bpf2go
// compiles the same source) call only the helpers above and are entry-style uprobe programs
// (section uprobe or uprobe.multi; the collector attaches them with link.Uprobe and
// link.UprobeMulti at entry and RET sites, never as uretprobes), plus the two programs that
// identify an executable (identityHelpers). The kernel then loads them: the verifier accepts
// them as they are.
func TestProgramsOnlyRead(t *testing.T) {
	bpftest.Require(t)
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []string{"trace_x86_bpfel.o", "trace_arm64_bpfel.o"} {
		spec, err := ebpf.LoadCollectionSpec(filepath.Join(root, "bpf", obj))
		if err != nil {
			t.Fatal(err)
		}
		if len(spec.Programs) == 0 {
			t.Fatalf("%s: no program in the object", obj)
		}
		for name, p := range spec.Programs {
			identity := slices.Contains(identitySections, p.SectionName)
			if p.SectionName != "uprobe" && p.SectionName != "uprobe.multi" && !identity {
				t.Errorf("%s: program %s in section %q: want uprobe, uprobe.multi or one of %v", obj, name, p.SectionName, identitySections)
			}
			if strings.Contains(p.SectionName, "ret") {
				t.Errorf("program %s is a return probe (%s)", name, p.SectionName)
			}
			used := map[asm.BuiltinFunc]int{}
			for _, ins := range p.Instructions {
				if ins.IsKfuncCall() {
					t.Errorf("program %s calls a kfunc: %v", name, ins)
				}
				if ins.IsBuiltinCall() {
					fn := asm.BuiltinFunc(ins.Constant)
					used[fn]++
					if !slices.Contains(allowedHelpers, fn) && !(identity && slices.Contains(identityHelpers, fn)) {
						t.Errorf("program %s calls %v, which is not on the list of helpers it may use", name, fn)
					}
				}
			}
			var names []string
			for fn, n := range used {
				names = append(names, fmt.Sprintf("%v×%d", fn, n))
			}
			slices.Sort(names)
			t.Logf("%s: %s (%s, %d instructions): %s", obj, name, p.SectionName, len(p.Instructions), strings.Join(names, " "))
		}
	}
	// The kernel's verifier accepts this machine's object as it is.
	spec, err := rbpf.LoadTrace()
	if err != nil {
		t.Fatal(err)
	}
	for _, drop := range []string{rbpf.TraceProgProbeSite, rbpf.TraceProgProbeSiteMulti} {
		s := spec.Copy()
		delete(s.Programs, drop)
		coll, err := ebpf.NewCollection(s)
		if err != nil {
			t.Fatalf("load without %s: %v", drop, err)
		}
		coll.Close()
	}
}
