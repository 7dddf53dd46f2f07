package collector

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/symbols"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

// fakectlPlan builds test/fakectl and returns its path and the plan of the probe that traces it.
func fakectlPlan(t *testing.T) (string, *probes.Plan) {
	t.Helper()
	bin := testkit.Build(t, "./test/fakectl")
	pr, err := fakectltest.Probe()
	if err != nil {
		t.Fatal(err)
	}
	b, err := symbols.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	plan, err := probes.NewPlan(b, []*probes.Probe{pr})
	if err != nil {
		t.Fatal(err)
	}
	return bin, plan
}

// attachFakectl loads a collector and attaches fakectl's plan; it returns both and the
// executable's path and plan.
func attachFakectl(t *testing.T) (*Collector, *Attachment, string, *probes.Plan) {
	t.Helper()
	bpftest.Require(t)
	bin, plan := fakectlPlan(t)
	c, err := New(Options{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	id, err := c.FileID(bin)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Attach(bin, id, plan)
	if err != nil {
		t.Fatal(err)
	}
	return c, a, bin, plan
}

// mapLen counts a map's entries.
func mapLen(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	keys := make([]byte, m.KeySize())
	vals := make([]byte, m.ValueSize())
	n := 0
	it := m.Iterate()
	for it.Next(&keys, &vals) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAttachFailureLeavesNothing makes writing the error layouts fail half way (the kernel's
// err_layouts map is filled by the test until only some of the executable's keys fit): Attach
// fails, and the keys it did write, its site slots and its links are all gone.
func TestAttachFailureLeavesNothing(t *testing.T) {
	c, a, bin, plan := attachFakectl(t)
	n := mapLen(t, c.errs)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("fakectl has %d error layouts, want at least 2 to fail half way", n)
	}
	if left := mapLen(t, c.errs); left != 0 {
		t.Fatalf("%d error layouts left after Close", left)
	}

	// Room for all but one of the executable's keys.
	filler := int(c.errs.MaxEntries()) - (n - 1)
	for i := range filler {
		k := rbpf.TraceErrKey{Exe: ^uint32(0), Itab: uint64(i)}
		if err := c.errs.Put(&k, &rbpf.TraceErrLayout{}); err != nil {
			t.Fatalf("fill err_layouts: %v", err)
		}
	}
	if _, err := c.Attach(bin, a.ID(), plan); err == nil {
		t.Fatal("Attach succeeded with err_layouts full")
	} else {
		t.Logf("Attach: %v", err)
	}
	if got := mapLen(t, c.errs); got != filler {
		t.Errorf("err_layouts holds %d entries after the failed Attach, want the %d the test wrote: Attach left %d of its keys", got, filler, got-filler)
	}
	for _, l := range bpftest.LinksLeftOn(t, bin) {
		t.Errorf("link left on the executable: %+v", l)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i, s := range c.table {
		if s != nil {
			t.Errorf("site slot %d still taken", i)
		}
	}
	if len(c.attached) != 0 {
		t.Errorf("%d attachments left", len(c.attached))
	}
}

// memFDs lists this process's file descriptors open on /proc/PID/mem of process pid.
func memFDs(t *testing.T, pid int) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join("/proc", strconv.Itoa(pid), "mem")
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == want {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestTraceUntraceLeavesNothing: Untrace closes the process's /proc/PID/mem and takes it out of
// the kernel's PID filter; a PID the filter cannot hold is refused without leaving an entry.
func TestTraceUntraceLeavesNothing(t *testing.T) {
	c, a, bin, _ := attachFakectl(t)
	cmd := exec.Command(bin, "-start", filepath.Join(t.TempDir(), "never"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid

	// Traced once, mem is open: the check below sees it when it is there.
	if err := c.Trace(pid, a); err != nil {
		t.Fatal(err)
	}
	if len(memFDs(t, pid)) != 1 {
		t.Fatalf("a traced process has %d descriptors on its memory, want 1", len(memFDs(t, pid)))
	}
	if !c.pids.has(pid) {
		t.Fatalf("traced process %d is not in the kernel's PID filter", pid)
	}
	c.Untrace(pid)
	if c.pids.has(pid) {
		t.Errorf("Untrace left process %d in the kernel's PID filter", pid)
	}
	if fds := memFDs(t, pid); len(fds) != 0 {
		t.Fatalf("Untrace left descriptors %v open", fds)
	}

	beyond := c.pids.limit()
	if err := c.Trace(beyond, a); err == nil {
		t.Fatalf("Trace of PID %d, beyond the kernel's PID filter, succeeded", beyond)
	} else {
		t.Logf("Trace: %v", err)
	}
	c.mu.RLock()
	p := c.procs[uint32(beyond)]
	c.mu.RUnlock()
	if p != nil {
		t.Errorf("the failed Trace left process %d traced", beyond)
	}
}
