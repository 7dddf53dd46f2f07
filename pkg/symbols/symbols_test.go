package symbols

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/reconscope/reconscope/internal/bpftest"
)

var (
	objdumpMu    sync.Mutex
	objdumpCache = map[string]map[uint64][]objInsn{}
)

func objdumpOf(t testing.TB, fixtureName string) map[uint64][]objInsn {
	t.Helper()
	bin := build(t, fixtureName)
	objdumpMu.Lock()
	defer objdumpMu.Unlock()
	if d, ok := objdumpCache[bin]; ok {
		return d
	}
	d := goObjdump(t, bin)
	objdumpCache[bin] = d
	return d
}

// twinOf returns the fixture whose symbol table and disassembly describe fx: itself, or its
// unstripped twin (same addresses: -s -w only drops .symtab and DWARF).
func twinOf(fx fixture) string {
	if fx.twin != "" {
		return fx.twin
	}
	return fx.name
}

// openFixtureELF opens fixture name twice: with Open, and with debug/elf to compare with.
func openFixtureELF(t *testing.T, name string) (*Binary, *elf.File) {
	t.Helper()
	b := openFixture(t, name)
	f, err := elf.Open(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return b, f
}

// TestFirstSegment: a PIE's base, which the collector subtracts from a process's mapping, is
// the page-aligned address of the PT_LOAD segment at file offset 0, as debug/elf reads the file
// on its own; from the headers Open read, so after Close too.
func TestFirstSegment(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b, f := openFixtureELF(t, fx.name)
			want, found := uint64(0), false
			for _, p := range f.Progs {
				if p.Type == elf.PT_LOAD && p.Off == 0 {
					want, found = p.Vaddr&^(p.Align-1), true
					break
				}
			}
			if !found {
				t.Fatal("debug/elf: no PT_LOAD segment at file offset 0")
			}
			b.Close()
			got, err := b.FirstSegment()
			if err != nil || got != want {
				t.Errorf("FirstSegment() = %#x, %v; want %#x", got, err, want)
			}
		})
	}
}

func TestOpenFacts(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			if b.Arch != fx.arch {
				t.Errorf("Arch = %q, want %q", b.Arch, fx.arch)
			}
			if !strings.HasPrefix(b.GoVersion, "go1.") {
				t.Errorf("GoVersion = %q", b.GoVersion)
			}
			if b.MainModule != "github.com/reconscope/reconscope" {
				t.Errorf("MainModule = %q", b.MainModule)
			}
			if b.Stripped != fx.stripped || b.HasDWARF == fx.stripped {
				t.Errorf("Stripped = %v, HasDWARF = %v, want %v, %v", b.Stripped, b.HasDWARF, fx.stripped, !fx.stripped)
			}
			wantPIE := strings.Contains(strings.Join(fx.flags, " "), "pie")
			if b.PIE != wantPIE {
				t.Errorf("PIE = %v, want %v", b.PIE, wantPIE)
			}
			if b.Settings["GOARCH"] != fx.arch {
				t.Errorf("Settings[GOARCH] = %q", b.Settings["GOARCH"])
			}
			wantCgo := "0"
			if fx.cgo {
				wantCgo = "1"
			}
			if b.Settings["CGO_ENABLED"] != wantCgo {
				t.Errorf("Settings[CGO_ENABLED] = %q, want %q", b.Settings["CGO_ENABLED"], wantCgo)
			}
		})
	}
}

// TestFunctions checks function bounds against `go tool nm -size` (of the unstripped twin for
// stripped builds) and against debug/gosym.
func TestFunctions(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			checkFunctions(t, b, build(t, twinOf(fx)), fx.stripped)
			if _, err := b.Lookup("main.main"); err != nil {
				t.Error(err)
			}
			if _, err := b.Lookup("runtime.morestack_noctxt"); err != nil {
				t.Errorf("assembly function without .abi0: %v", err)
			}
			if _, err := b.Lookup("main.nosuchfunction"); !errors.Is(err, ErrSymbolNotFound) || !strings.Contains(err.Error(), "main.nosuchfunction") {
				t.Errorf("Lookup(missing) = %v", err)
			}
		})
	}
}

// checkFunctions compares b.Functions() with nm of twin (b itself or its unstripped build at
// the same addresses) and with debug/gosym.
func checkFunctions(t *testing.T, b *Binary, twin string, stripped bool) {
	t.Helper()
	funcs, err := b.Functions()
	if err != nil {
		t.Fatal(err)
	}
	byEntry := map[uint64]Function{}
	names := map[string]int{}
	for i, f := range funcs {
		if i > 0 && funcs[i-1].Entry > f.Entry {
			t.Fatalf("not sorted at %d", i)
		}
		names[f.Name]++
		if names[f.Name] == 2 && f.Name != "go:buildid" {
			// A function and its ABI wrapper under one name: a probe on the name would land
			// on both (or on the wrapper, before it loads g).
			t.Errorf("two functions named %s", f.Name)
		}
		if f.End <= f.Entry {
			t.Errorf("%s: empty bounds [%#x, %#x)", f.Name, f.Entry, f.End)
		}
		byEntry[f.Entry] = f
	}
	table := gosymTable(t, b)
	inPcln := map[uint64]bool{}
	for _, gf := range table.Funcs {
		inPcln[gf.Entry] = true
	}

	// nm: every text symbol with a size is a function with that size (stripped builds have
	// the Go functions only: C functions of cgo builds are in .symtab alone).
	checked := 0
	for _, s := range goNM(t, twin) {
		if (s.kind != "T" && s.kind != "t") || s.size == 0 || strings.HasPrefix(s.name, "go:") {
			continue // go:textfipsstart and friends are markers
		}
		if stripped && !inPcln[s.addr] {
			continue
		}
		f, ok := byEntry[s.addr]
		if !ok {
			t.Errorf("nm symbol %s at %#x: no function there", s.name, s.addr)
			continue
		}
		if f.Size() != s.size {
			t.Errorf("%s: size %d, nm says %d", s.name, f.Size(), s.size)
		}
		if !sameFuncName(f.Name, s.name, names) {
			t.Errorf("at %#x: name %q, nm says %q", s.addr, f.Name, s.name)
		}
		checked++
	}
	if checked < 1000 {
		t.Errorf("only %d functions checked against nm", checked)
	}

	// debug/gosym: the same entries; our end never beyond its end (gosym's End is the next
	// function's entry, padding included).
	for _, gf := range table.Funcs {
		if strings.HasPrefix(gf.Name, "go:") {
			continue
		}
		f, ok := byEntry[gf.Entry]
		if !ok {
			t.Errorf("gosym function %s at %#x: not found", gf.Name, gf.Entry)
			continue
		}
		if normName(f.Name) != normName(gf.Name) {
			t.Errorf("at %#x: name %q, gosym says %q", gf.Entry, f.Name, gf.Name)
		}
		if f.End > gf.End || f.End+64 < gf.End {
			t.Errorf("%s: end %#x, gosym end %#x", gf.Name, f.End, gf.End)
		}
	}
	if len(table.Funcs) < 1000 {
		t.Errorf("gosym found only %d functions", len(table.Funcs))
	}
}

// sameFuncName says whether our name for a function is the one .symtab gives it (nm):
// equal up to normBrackets, or, for an assembly function of a stripped build, without the
// ".abi0" that .symtab adds whenever Go code declares the function (which .gopclntab cannot
// tell) as long as no other function has the name (names counts the names of our table).
// The ABI0 half of a pair of same-named functions must carry the suffix, as in .symtab.
func sameFuncName(ours, nm string, names map[string]int) bool {
	if normBrackets(ours) == normBrackets(nm) {
		return true
	}
	return normBrackets(ours) == normBrackets(strings.TrimSuffix(nm, ".abi0")) && names[ours] == 1
}

// normName drops the differences between .symtab and .gopclntab names: the ".abi0" suffix
// of assembly functions, the middle dot of some compiler-generated names, and the contents of
// brackets, which Go 1.18 – 1.20 abbreviate to "[...]" in .gopclntab.
func normName(name string) string {
	return normBrackets(strings.TrimSuffix(name, ".abi0"))
}

// normBrackets drops the middle dot of some compiler-generated names and the contents of
// brackets (see normName), keeping the ".abi0" suffix.
func normBrackets(name string) string {
	name = strings.ReplaceAll(name, "·", ".")
	var sb strings.Builder
	depth := 0
	for _, r := range name {
		switch {
		case r == '[':
			if depth == 0 {
				sb.WriteString("[...]")
			}
			depth++
		case r == ']' && depth > 0:
			depth--
		case depth == 0:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// gosymTable builds debug/gosym's view of the binary's pclntab, giving it the text start
// from the symbol table of the unstripped twin or from moduledata.
func gosymTable(t *testing.T, b *Binary) *gosym.Table {
	t.Helper()
	f, err := elf.Open(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := pclnSection(f).Data()
	if err != nil {
		t.Fatal(err)
	}
	md, err := b.modData()
	if err != nil {
		t.Fatal(err)
	}
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, md.text))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// TestSites checks every function's return sites and entry site against go tool objdump,
// and that the file offset of each site holds the instruction's bytes.
func TestSites(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			checkSites(t, b, objdumpOf(t, twinOf(fx)), true)
		})
	}
}

// checkSites compares the sites of every function with objdump's listing (of b or of its twin
// at the same addresses); withBytes also compares the file bytes at each site.
func checkSites(t *testing.T, b *Binary, dump map[uint64][]objInsn, withBytes bool) {
	t.Helper()
	var file []byte
	if withBytes {
		var err error
		if file, err = os.ReadFile(b.Path); err != nil {
			t.Fatal(err)
		}
	}
	funcs, err := b.Functions()
	if err != nil {
		t.Fatal(err)
	}
	checkedEntries, withPrologue, undecodable := 0, 0, 0
	for _, f := range funcs {
		insns, ok := dump[f.Entry]
		if !ok {
			continue
		}
		// objdump lists arm64 functions up to the next symbol, alignment padding (zero
		// words, "?") included: keep the function's own instructions.
		for len(insns) > 0 && insns[len(insns)-1].addr >= f.End {
			insns = insns[:len(insns)-1]
		}
		if len(insns) == 0 {
			continue
		}
		if b.Arch == "amd64" && hasUndecodable(insns) {
			// objdump's older x86asm cannot decode some AVX-512 instructions of a few assembly
			// functions and resynchronises differently: no common truth there. (arm64 words
			// stay aligned whatever a decoder knows, so arm64 is always compared.)
			undecodable++
			continue
		}
		// Return sites: exactly objdump's RETs.
		var want []uint64
		for _, in := range insns {
			if in.text == "RET" || strings.HasPrefix(in.text, "RET ") {
				want = append(want, in.addr)
			}
		}
		rets, err := b.ReturnSites(f)
		if err != nil {
			t.Fatalf("ReturnSites(%s): %v", f.Name, err)
		}
		var got []uint64
		for _, s := range rets {
			got = append(got, s.Addr)
			if withBytes {
				checkSiteBytes(t, file, s, insns, b.Arch)
			}
		}
		if !equalAddrs(got, want) {
			t.Errorf("%s: return sites %#x, objdump RETs %#x", f.Name, got, want)
		}

		checkCalls(t, b, f, insns, funcs)

		// Entry site: the instruction after the stack-check branch.
		wantEntry := objdumpEntrySite(insns, b.Arch)
		if wantEntry != insns[0].addr {
			withPrologue++
		}
		s, err := b.EntrySite(f)
		if err != nil {
			t.Fatalf("EntrySite(%s): %v", f.Name, err)
		}
		if s.Addr != wantEntry {
			t.Errorf("%s: entry site %#x (%s), objdump says %#x", f.Name, s.Addr, s.Insn, wantEntry)
		}
		if withBytes {
			checkSiteBytes(t, file, s, insns, b.Arch)
		}
		checkedEntries++
	}
	if checkedEntries < 1000 || withPrologue < 300 || undecodable > 60 {
		t.Errorf("checked %d functions, %d with a stack check, skipped %d with undecodable bytes", checkedEntries, withPrologue, undecodable)
	}
	t.Logf("checked %d functions, %d with a stack check, skipped %d with undecodable bytes", checkedEntries, withPrologue, undecodable)
}

// checkCalls compares fn's direct calls with objdump's `CALL name(SB)` (and, to addresses
// without a symbol, `CALL 0x…`) lines: the same addresses, each calling what objdump names.
func checkCalls(t *testing.T, b *Binary, fn Function, insns []objInsn, funcs []Function) {
	t.Helper()
	want := map[uint64]string{} // a function's name, or a target address without a symbol
	for _, in := range insns {
		op, ok := strings.CutPrefix(in.text, "CALL ")
		switch {
		case !ok:
		case strings.HasSuffix(op, "(SB)"):
			want[in.addr] = strings.TrimSuffix(op, "(SB)")
		case strings.HasPrefix(op, "0x") && !strings.Contains(op, "("): // cgo's calls into the PLT
			want[in.addr] = op
		}
	}
	calls, err := b.Calls(fn)
	if err != nil {
		t.Fatalf("Calls(%s): %v", fn.Name, err)
	}
	for _, c := range calls {
		name, ok := want[c.Addr]
		if !ok {
			t.Errorf("%s: call at %#x (%s) is not a CALL of a symbol in objdump's listing", fn.Name, c.Addr, c.Insn)
			continue
		}
		delete(want, c.Addr)
		if strings.HasPrefix(name, "0x") {
			if name != "0x"+strconv.FormatUint(c.Target, 16) {
				t.Errorf("%s: call at %#x targets %#x, objdump says %s", fn.Name, c.Addr, c.Target, name)
			}
			continue
		}
		callee, found := b.FunctionAt(c.Target)
		if !found || callee.Entry != c.Target || normName(callee.Name) != normName(name) {
			t.Errorf("%s: call at %#x targets %#x (%s), objdump says %s", fn.Name, c.Addr, c.Target, callee.Name, name)
		}
	}
	for addr, name := range want {
		t.Errorf("%s: objdump's CALL %s at %#x is not among Calls", fn.Name, name, addr)
	}
}

// objdumpEntrySite finds, in objdump's text, the instruction after the stack-check branch.
func objdumpEntrySite(insns []objInsn, arch string) uint64 {
	guard := false
	for i, in := range insns {
		if i >= maxPrologue || i+1 >= len(insns) {
			break
		}
		switch arch {
		case "amd64":
			if strings.HasPrefix(in.text, "CMPQ ") && (strings.HasSuffix(in.text, ", 0x10(R14)") || strings.HasSuffix(in.text, ", 0x10(CX)")) {
				guard = true
			}
			if guard && strings.HasPrefix(in.text, "JBE ") {
				return insns[i+1].addr
			}
			if strings.HasPrefix(in.text, "CALL ") || strings.HasPrefix(in.text, "JMP ") || in.text == "RET" {
				return insns[0].addr
			}
		case "arm64":
			if in.text == "MOVD 16(R28), R16" {
				guard = true
			}
			if guard && strings.HasPrefix(in.text, "BLS ") {
				return insns[i+1].addr
			}
			if strings.HasPrefix(in.text, "CALL ") || strings.HasPrefix(in.text, "JMP ") || strings.HasPrefix(in.text, "B ") || in.text == "RET" {
				return insns[0].addr
			}
		}
	}
	return insns[0].addr
}

func checkSiteBytes(t *testing.T, file []byte, s Site, insns []objInsn, arch string) {
	t.Helper()
	for _, in := range insns {
		if in.addr != s.Addr {
			continue
		}
		want := in.bytes
		if arch == "arm64" && len(want) == 4 {
			// objdump prints the instruction word, not its little-endian bytes.
			want = []byte{want[3], want[2], want[1], want[0]}
		}
		end := s.FileOffset + uint64(len(want))
		if end > uint64(len(file)) || !bytes.Equal(file[s.FileOffset:end], want) {
			t.Errorf("site %#x: file offset %#x does not hold the instruction bytes % x", s.Addr, s.FileOffset, want)
		}
		// The operands may be spelled differently (objdump names data symbols, and its x86asm
		// is older): compare the mnemonic.
		if mnemonic(s.Insn) != mnemonic(in.text) && in.text != "?" {
			t.Errorf("site %#x: Insn %q, objdump says %q", s.Addr, s.Insn, in.text)
		}
		return
	}
	t.Errorf("site %#x is not an instruction boundary in objdump's listing", s.Addr)
}

func mnemonic(insn string) string {
	f := strings.Fields(insn)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func hasUndecodable(insns []objInsn) bool {
	for _, in := range insns {
		if in.text == "?" && !bytes.Equal(in.bytes, []byte{0, 0, 0, 0}) { // arm64 pads functions with zero words
			return true
		}
	}
	return false
}

func equalAddrs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPrologueShapes checks the entry site of the fixture functions written for each
// prologue shape.
func TestPrologueShapes(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			for _, tc := range []struct {
				fn        string
				wantEntry bool // entry site is the function's first instruction
			}{
				{"main.leaf", true},
				{"main.largeFrame", false},
				{"main.hugeFrame", false},
				{"main.main", false},
				{"main.run", false},
			} {
				f, err := b.Lookup(tc.fn)
				if err != nil {
					t.Fatal(err)
				}
				s, err := b.EntrySite(f)
				if err != nil {
					t.Fatal(err)
				}
				if (s.Addr == f.Entry) != tc.wantEntry {
					t.Errorf("%s: entry site %#x %q, function entry %#x", tc.fn, s.Addr, s.Insn, f.Entry)
				}
				if !tc.wantEntry {
					want := "PUSHQ BP"
					if fx.arch == "arm64" {
						want = "MOVD.W R30, "
					}
					if !strings.HasPrefix(s.Insn, want) {
						t.Errorf("%s: entry site instruction %q, want %q…", tc.fn, s.Insn, want)
					}
				}
			}
		})
	}
}

// TestGenericMatch finds the shape instantiation of the generic Reconcile method.
func TestGenericMatch(t *testing.T) {
	re := regexp.MustCompile(`^main\.\(\*Controller\[.*\]\)\.Reconcile$`)
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			fs, err := b.Match(re)
			if err != nil {
				t.Fatal(err)
			}
			// The shape instantiation holds the body; the instantiation for main.Request is the
			// wrapper that passes the dictionary.
			if len(fs) != 2 || !strings.Contains(fs[0].Name, "[go.shape.struct {") || fs[1].Name != "main.(*Controller[main.Request]).Reconcile" {
				t.Fatalf("Match = %+v, want the shape instantiation and its wrapper", fs)
			}
			rets, err := b.ReturnSites(fs[0])
			if err != nil || len(rets) < 2 {
				t.Errorf("ReturnSites = %v, %v; want several RETs", rets, err)
			}
			if _, err := b.Match(regexp.MustCompile(`^nothing\.matches$`)); !errors.Is(err, ErrSymbolNotFound) {
				t.Errorf("Match(nothing) error = %v", err)
			}
			// Field offsets of the generic type, named without its type arguments.
			if !b.HasDWARF {
				return
			}
			off, err := b.FieldOffset("main.Controller", "count")
			if err != nil || off.Value != 16 || off.Source != "dwarf" {
				t.Errorf("FieldOffset(main.Controller, count) = %+v, %v; want 16 from dwarf", off, err)
			}
		})
	}
}

// TestFileOffset maps each function's entry through the program headers and compares with
// the section layout.
func TestFileOffset(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b, f := openFixtureELF(t, fx.name)
			text := f.Section(".text")
			fn, err := b.Lookup("main.main")
			if err != nil {
				t.Fatal(err)
			}
			off, err := b.FileOffset(fn.Entry)
			if err != nil {
				t.Fatal(err)
			}
			if want := text.Offset + fn.Entry - text.Addr; off != want {
				t.Errorf("FileOffset(%#x) = %#x, want %#x", fn.Entry, off, want)
			}
			if _, err := b.FileOffset(0x10); !errors.Is(err, ErrNotMapped) {
				t.Errorf("FileOffset(0x10) = %v, want ErrNotMapped", err)
			}
		})
	}
}

// TestFieldOffsets checks runtime.g.goid and the error types: from DWARF in unstripped builds,
// from the table in stripped ones, and that both agree.
func TestFieldOffsets(t *testing.T) {
	cases := []struct{ typ, field string }{
		{"runtime.g", "goid"},
		{"errors.errorString", "s"},
		{"fmt.wrapError", "msg"},
		{"fmt.wrapError", "err"},
	}
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			twin := openFixture(t, twinOf(fx))
			for _, c := range cases {
				got, err := b.FieldOffset(c.typ, c.field)
				if err != nil {
					t.Fatalf("FieldOffset(%s, %s): %v", c.typ, c.field, err)
				}
				wantSource := "dwarf"
				if fx.stripped {
					wantSource = "table"
				}
				if got.Source != wantSource {
					t.Errorf("FieldOffset(%s, %s).Source = %q, want %q", c.typ, c.field, got.Source, wantSource)
				}
				want, err := twin.FieldOffset(c.typ, c.field)
				if err != nil || want.Value != got.Value {
					t.Errorf("FieldOffset(%s, %s) = %d, DWARF of the twin says %d (%v)", c.typ, c.field, got.Value, want.Value, err)
				}
				// The table must agree with DWARF too.
				if tab, ok := lookupTable(c.typ, c.field, "std", b.GoVersion, b.Arch); !ok || tab.Value != want.Value {
					t.Errorf("table for %s.%s = %+v (%v), DWARF says %d", c.typ, c.field, tab, ok, want.Value)
				}
			}
			if b.Arch == "amd64" {
				if off, _ := b.FieldOffset("runtime.g", "goid"); off.Value != 152 {
					t.Errorf("runtime.g.goid = %d, DESIGN.md measured 152 for Go 1.26", off.Value)
				}
			}
			// Nested path through a struct-typed field.
			if !fx.stripped {
				lo, err := b.FieldOffset("runtime.g", "stack.hi")
				if err != nil || lo.Value != 8 {
					t.Errorf("FieldOffset(runtime.g, stack.hi) = %+v, %v; want 8", lo, err)
				}
				if _, err := b.FieldOffset("runtime.g", "nosuchfield"); !errors.Is(err, ErrOffsetUnknown) || !strings.Contains(err.Error(), "nosuchfield") {
					t.Errorf("missing field: %v", err)
				}
				if _, err := b.FieldOffset("runtime.g", "m.id"); !errors.Is(err, ErrOffsetUnknown) || !strings.Contains(err.Error(), "pointer") {
					t.Errorf("path through a pointer: %v", err)
				}
			}
			// No controller packages in this program.
			_, err := b.FieldOffset("sigs.k8s.io/controller-runtime/pkg/internal/controller.Controller", "Name")
			if !errors.Is(err, ErrOffsetUnknown) || !strings.Contains(err.Error(), "controller.Controller") {
				t.Errorf("FieldOffset of a type not in the binary: %v", err)
			}
			_, err = b.Lookup("sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[...]).Reconcile")
			if !errors.Is(err, ErrSymbolNotFound) {
				t.Errorf("Lookup of a controller function: %v", err)
			}
		})
	}
}

// TestItabs finds the error itabs in stripped and unstripped builds alike, at the addresses
// of the go:itab symbols of the unstripped twin.
func TestItabs(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			itabs, err := b.Itabs()
			if err != nil {
				t.Fatal(err)
			}
			// Symbols of the twin: go:itab.<type>,<interface>.
			symItabs := map[uint64]string{}
			for _, s := range goNM(t, build(t, twinOf(fx))) {
				if strings.HasPrefix(s.name, "go:itab.") {
					symItabs[s.addr] = strings.TrimPrefix(s.name, "go:itab.")
				}
			}
			list, err := b.ItabList()
			if err != nil {
				t.Fatal(err)
			}
			found := map[string]uint64{}
			for _, it := range list {
				sym, ok := symItabs[it.Addr]
				if !ok {
					t.Errorf("itab %#x (%s, %s) has no go:itab symbol", it.Addr, it.Type, it.Interface)
					continue
				}
				if !strings.HasSuffix(runtimeSpelling(sym), ","+it.Interface) {
					t.Errorf("itab %#x: interface %q, symbol %q", it.Addr, it.Interface, sym)
				}
				if it.Interface == "error" {
					found[it.Type] = it.Addr
				}
				if itabs[it.Addr] != it.Type {
					t.Errorf("Itabs()[%#x] = %q, ItabList says %q", it.Addr, itabs[it.Addr], it.Type)
				}
			}
			if len(list) != len(symItabs) {
				t.Errorf("%d itabs, %d go:itab symbols", len(list), len(symItabs))
			}
			for _, want := range []string{"*errors.errorString", "*fmt.wrapError"} {
				addr, ok := found[want]
				if !ok {
					t.Errorf("no error itab for %s; have %v", want, found)
					continue
				}
				if !strings.HasPrefix(runtimeSpelling(symItabs[addr]), want+",") {
					t.Errorf("itab of %s at %#x, symbol there is %q", want, addr, symItabs[addr])
				}
				// ItabTypeName reads the itab as if from process memory (here: the file's bytes).
				name, err := b.ItabTypeName(memOf(t, b), 0, addr)
				if err != nil || name != want {
					t.Errorf("ItabTypeName(%#x) = %q, %v; want %q", addr, name, err, want)
				}
				name, err = b.ItabTypeName(memOf(t, b), 0x7f0000000000, addr+0x7f0000000000)
				if err == nil {
					t.Errorf("ItabTypeName at a biased address without the mapping = %q", name)
				}
			}
		})
	}
}

// runtimeSpelling turns symbol spelling of type names (import paths) into the runtime's
// (package names): "*internal/bisect.parseError" -> "*bisect.parseError".
func runtimeSpelling(s string) string {
	return regexp.MustCompile(`[\w.-]+(/[\w.-]+)*/([\w-]+\.)`).ReplaceAllString(s, "$2")
}

// memOf returns a reader of the binary's virtual memory as linked (the file's segments).
func memOf(t *testing.T, b *Binary) vaReader {
	t.Helper()
	return vaReader{b}
}

func TestItabsAgreeStripped(t *testing.T) {
	for _, pair := range [][2]string{{"plain", "stripped"}, {"pie", "pie-stripped"}, {"cgo", "cgo-stripped"}, {"arm64", "arm64-stripped"}} {
		t.Run(pair[1], func(t *testing.T) {
			a, err := openFixture(t, pair[0]).Itabs()
			if err != nil {
				t.Fatal(err)
			}
			b, err := openFixture(t, pair[1]).Itabs()
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != len(b) || len(a) < 10 {
				t.Fatalf("%d itabs unstripped, %d stripped", len(a), len(b))
			}
			for addr, name := range a {
				if b[addr] != name {
					t.Errorf("itab %#x: %q unstripped, %q stripped", addr, name, b[addr])
				}
			}
		})
	}
}

func TestTypeName(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			list, err := b.ItabList()
			if err != nil {
				t.Fatal(err)
			}
			typeOf := func(typ, iface string) uint64 {
				for _, it := range list {
					if it.Type == typ && it.Interface == iface {
						p, err := b.readPtr(it.Addr + 8)
						if err != nil {
							t.Fatal(err)
						}
						return p
					}
				}
				t.Fatalf("no itab (%s, %s)", typ, iface)
				return 0
			}
			for _, tc := range []struct{ typ, iface string }{
				{"*errors.errorString", "error"},
				{"*fmt.wrapError", "error"},
				{"*main.Controller[main.Request]", "main.Reconciler[main.Request]"},
			} {
				ptr := typeOf(tc.typ, tc.iface)
				if got, err := b.TypeName(ptr); err != nil || got != tc.typ {
					t.Errorf("TypeName(%#x) = %q, %v; want %q", ptr, got, err, tc.typ)
				}
				// abi.PtrType.Elem follows the abi.Type header: the named type, whose name
				// shares the pointer's string with TFlagExtraStar set.
				elem, err := b.readPtr(ptr + abiTypeSize)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := b.TypeName(elem); err != nil || got != tc.typ[1:] {
					t.Errorf("TypeName(elem of %s) = %q, %v; want %q", tc.typ, got, err, tc.typ[1:])
				}
			}
			if _, err := b.TypeName(0x10); !errors.Is(err, ErrNotMapped) {
				t.Errorf("TypeName(0x10) = %v, want ErrNotMapped", err)
			}
		})
	}
}

// TestBadInput feeds files that are not traceable Go programs: each gets the right sentinel
// error and a message, never a panic.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goBin, err := os.ReadFile(build(t, "plain"))
	if err != nil {
		t.Fatal(err)
	}
	// A Go binary whose function table header was overwritten.
	corrupt := bytes.Clone(goBin)
	if f, err := elf.NewFile(bytes.NewReader(goBin)); err == nil {
		s := f.Section(".gopclntab")
		binary.LittleEndian.PutUint32(corrupt[s.Offset:], 0xdeadbeef)
	}
	cases := []struct {
		name string
		path string
		want error
	}{
		{"bin-ls", "/bin/ls", ErrNotGo},
		{"text", write("script.sh", []byte("#!/bin/sh\necho hello\n")), ErrNotELF},
		{"empty", write("empty", nil), ErrNotELF},
		{"first-4KiB", write("head4k", goBin[:4096]), ErrTruncated},
		{"first-half", write("half", goBin[:len(goBin)/2]), ErrTruncated},
		{"elf-header-only", write("hdr", goBin[:40]), ErrTruncated},
		{"corrupt-pclntab", write("corrupt", corrupt), ErrUnsupportedGo},
		{"directory", dir, ErrNotELF},
		{"missing", dir + "/does-not-exist", os.ErrNotExist},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.path == "/bin/ls" {
				if _, err := os.Stat(c.path); err != nil {
					bpftest.SkipOrFail(t, "no /bin/ls here")
				}
			}
			b, err := Open(c.path)
			if err == nil {
				b.Close()
				t.Fatalf("Open(%s) succeeded", c.name)
			}
			if !errors.Is(err, c.want) {
				t.Errorf("Open(%s) = %v, want %v", c.name, err, c.want)
			}
			if len(err.Error()) < 20 {
				t.Errorf("message too terse: %q", err)
			}
		})
	}
}

// TestOpenProcessExe opens a running process's executable through its /proc/PID/exe link, as
// the tracer does (under its proc root).
func TestOpenProcessExe(t *testing.T) {
	b, err := Open(filepath.Join("/proc", strconv.Itoa(os.Getpid()), "exe"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Lookup("github.com/reconscope/reconscope/pkg/symbols.TestOpenProcessExe"); err != nil {
		t.Error(err)
	}
}

func TestOpenBytes(t *testing.T) {
	data, err := os.ReadFile(build(t, "stripped"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	f, err := b.Lookup("main.main")
	if err != nil {
		t.Error(err)
	}
	if err := b.Close(); err != nil {
		t.Error(err)
	}
	if f.Name != "main.main" {
		t.Errorf("a function returned before Close changed: %+v", f)
	}
	if _, err := b.Functions(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Functions after Close: %v", err)
	}
	if _, err := b.EntrySite(f); err == nil {
		t.Error("EntrySite after Close succeeded")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestReleaseDWARF: once the DWARF is let go, the offsets already asked are answered as before
// (from the cache), and one not asked yet is read again from the DWARF, with the value a
// binary that never let it go gives.
func TestReleaseDWARF(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			if !b.HasDWARF {
				t.Skip("no DWARF")
			}
			fresh := openFixture(t, fx.name)
			asked, err := b.FieldOffset("runtime.g", "goid")
			if err != nil {
				t.Fatal(err)
			}
			b.ReleaseDWARF()
			if again, err := b.FieldOffset("runtime.g", "goid"); err != nil || again != asked {
				t.Errorf("FieldOffset(runtime.g, goid) after ReleaseDWARF = %+v, %v; want %+v", again, err, asked)
			}
			got, err := b.FieldOffset("main.Controller", "count")
			want, werr := fresh.FieldOffset("main.Controller", "count")
			if err != nil || werr != nil || got != want || got.Source != "dwarf" {
				t.Errorf("FieldOffset(main.Controller, count) after ReleaseDWARF = %+v, %v; a binary that kept its DWARF says %+v, %v", got, err, want, werr)
			}
		})
	}
}
