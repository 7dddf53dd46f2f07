package symbols

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// BenchmarkOpenLarge measures what `inspect` and an attach do on a big binary: Open,
// Functions, Lookup, EntrySite, ReturnSites and FieldOffset("runtime.g", "goid"). Point
// RECONSCOPE_BENCH_BINARY at one (the test bed's kube-apiserver is 170 MB); the function
// looked up is RECONSCOPE_BENCH_FUNC (default k8s.io/client-go/rest.(*Request).Do).
// Budget (DESIGN.md §6): < 1 s and < 150 MB allocated per operation.
func BenchmarkOpenLarge(b *testing.B) {
	path := os.Getenv("RECONSCOPE_BENCH_BINARY")
	if path == "" {
		b.Skip("set RECONSCOPE_BENCH_BINARY to a large Go binary")
	}
	fn := os.Getenv("RECONSCOPE_BENCH_FUNC")
	if fn == "" {
		fn = "k8s.io/client-go/rest.(*Request).Do"
	}
	b.ReportAllocs()
	for b.Loop() {
		bin, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		funcs, err := bin.Functions()
		if err != nil || len(funcs) == 0 {
			b.Fatal(len(funcs), err)
		}
		f, err := bin.Lookup(fn)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bin.EntrySite(f); err != nil {
			b.Fatal(err)
		}
		if _, err := bin.ReturnSites(f); err != nil {
			b.Fatal(err)
		}
		off, err := bin.FieldOffset("runtime.g", "goid")
		if err != nil || off.Value == 0 {
			b.Fatal(off, err)
		}
		bin.Close()
	}
}

// TestLargeStrippedTwin compares a big binary with its -s -w build (say the test bed's
// kube-controller-manager and kube-controller-manager-stripped): the same functions with the
// same bounds, the same itabs, and field offsets from the table equal to those from DWARF.
// Set RECONSCOPE_BENCH_BINARY and RECONSCOPE_BENCH_STRIPPED.
func TestLargeStrippedTwin(t *testing.T) {
	plainPath, strippedPath := os.Getenv("RECONSCOPE_BENCH_BINARY"), os.Getenv("RECONSCOPE_BENCH_STRIPPED")
	if plainPath == "" || strippedPath == "" {
		t.Skip("set RECONSCOPE_BENCH_BINARY and RECONSCOPE_BENCH_STRIPPED to a big binary and its -s -w build")
	}
	plain, err := Open(plainPath)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	stripped, err := Open(strippedPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stripped.Close()
	fp, err := plain.Functions()
	if err != nil {
		t.Fatal(err)
	}
	fs, err := stripped.Functions()
	if err != nil {
		t.Fatal(err)
	}
	byEntry := map[uint64]Function{}
	for _, f := range fp {
		byEntry[f.Entry] = f
	}
	names := map[string]int{}
	for _, f := range fs {
		names[f.Name]++
	}
	for _, f := range fs {
		g, ok := byEntry[f.Entry]
		if strings.HasPrefix(f.Name, "go:") {
			continue // linker markers: size 1 in .symtab
		}
		if !ok || g.End != f.End || !sameFuncName(f.Name, g.Name, names) {
			t.Errorf("stripped %+v, unstripped %+v", f, g)
		}
	}
	ip, err := plain.Itabs()
	if err != nil {
		t.Fatal(err)
	}
	is, err := stripped.Itabs()
	if err != nil {
		t.Fatal(err)
	}
	if len(ip) != len(is) {
		t.Errorf("%d itabs unstripped, %d stripped", len(ip), len(is))
	}
	for addr, name := range ip {
		if is[addr] != name {
			t.Errorf("itab %#x: %q unstripped, %q stripped", addr, name, is[addr])
		}
	}
	for _, q := range [][2]string{
		{"runtime.g", "goid"},
		{"k8s.io/client-go/rest.Request", "verb"},
		{"k8s.io/apimachinery/pkg/api/errors.StatusError", "ErrStatus.Message"},
		{"k8s.io/apimachinery/pkg/types.NamespacedName", "Name"},
	} {
		d, err1 := plain.FieldOffset(q[0], q[1])
		s, err2 := stripped.FieldOffset(q[0], q[1])
		if err1 != nil || err2 != nil || d.Value != s.Value {
			t.Errorf("%s.%s: DWARF %+v (%v), stripped %+v (%v)", q[0], q[1], d, err1, s, err2)
		}
	}
	t.Logf("%d functions, %d itabs agree", len(fs), len(is))
}

// TestLargeObjdump checks the entry and return sites of 2000 functions spread over a big
// binary (RECONSCOPE_BENCH_BINARY, unstripped) against go tool objdump.
func TestLargeObjdump(t *testing.T) {
	path := os.Getenv("RECONSCOPE_BENCH_BINARY")
	if path == "" {
		t.Skip("set RECONSCOPE_BENCH_BINARY to a big unstripped Go binary")
	}
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Stripped {
		t.Skip("objdump needs the symbol table")
	}
	funcs, err := b.Functions()
	if err != nil {
		t.Fatal(err)
	}
	var sample []Function
	var names []string
	for i := 0; i < len(funcs); i += len(funcs)/2000 + 1 {
		f := funcs[i]
		if strings.HasSuffix(f.Name, ".abi0") || strings.ContainsAny(f.Name, " ") || !strings.Contains(f.Name, ".") {
			continue // assembly (AVX-512 that objdump cannot decode), generic shapes, C
		}
		sample = append(sample, f)
		names = append(names, regexp.QuoteMeta(f.Name))
	}
	// One objdump per batch of names: a single argument may not exceed 128 KiB.
	dump := map[uint64][]objInsn{}
	for len(names) > 0 {
		n, size := 0, 0
		for n < len(names) && size+len(names[n]) < 100<<10 {
			size += len(names[n]) + 1
			n++
		}
		out, err := exec.Command(goTool(t), "tool", "objdump", "-s", "^("+strings.Join(names[:n], "|")+")$", path).Output()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range parseObjdump(out) {
			dump[k] = v
		}
		names = names[n:]
	}
	checked := 0
	for _, f := range sample {
		insns := dump[f.Entry]
		for len(insns) > 0 && insns[len(insns)-1].addr >= f.End {
			insns = insns[:len(insns)-1]
		}
		if len(insns) == 0 || hasUndecodable(insns) {
			continue
		}
		var want, got []uint64
		for _, in := range insns {
			if in.text == "RET" || strings.HasPrefix(in.text, "RET ") {
				want = append(want, in.addr)
			}
		}
		rets, err := b.ReturnSites(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rets {
			got = append(got, s.Addr)
		}
		if !equalAddrs(got, want) {
			t.Errorf("%s: return sites %#x, objdump %#x", f.Name, got, want)
		}
		e, err := b.EntrySite(f)
		if err != nil {
			t.Fatal(err)
		}
		if w := objdumpEntrySite(insns, b.Arch); e.Addr != w {
			t.Errorf("%s: entry site %#x, objdump %#x", f.Name, e.Addr, w)
		}
		checked++
	}
	if checked < 1500 {
		t.Errorf("only %d functions checked", checked)
	}
	t.Logf("%d functions agree with objdump", checked)
}
