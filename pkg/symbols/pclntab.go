package symbols

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
)

// Magic numbers of the Go function table (runtime.pcHeader.magic).
const (
	pclnMagic12  = 0xfffffffb // Go 1.2 – 1.15
	pclnMagic116 = 0xfffffffa // Go 1.16 – 1.17
	pclnMagic118 = 0xfffffff0 // Go 1.18 – 1.19
	pclnMagic120 = 0xfffffff1 // Go 1.20 and later
)

// pclnHeader is the decoded runtime.pcHeader at the start of .gopclntab.
type pclnHeader struct {
	addr    uint64 // virtual address of the header
	off     uint64 // file offset of the header
	size    uint64 // size of the section (upper bound of the table)
	version int    // 116, 118 or 120; 12 for Go 1.2 – 1.15
	minLC   uint64 // instruction size quantum: 1 on amd64, 4 on arm64
	nfunc   uint64
	// offsets from the header; the function name table ends where cuOff begins
	funcnameOff, cuOff, pctabOff, pclnOff uint64
}

func pclnSection(f *elf.File) *elf.Section {
	for _, name := range []string{".gopclntab", ".data.rel.ro.gopclntab"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			return s
		}
	}
	return nil
}

func (b *Binary) readPclnHeader() (*pclnHeader, error) {
	h := &pclnHeader{}
	if s := pclnSection(b.f); s != nil {
		h.addr, h.off, h.size = s.Addr, s.Offset, s.Size
	} else if addr, ok := b.symbolValue("runtime.pclntab"); ok {
		off, err := b.FileOffset(addr)
		if err != nil {
			return nil, fmt.Errorf("%w: runtime.pclntab: %v", ErrTruncated, err)
		}
		h.addr, h.off, h.size = addr, off, uint64(b.size)-off
	} else {
		return nil, fmt.Errorf("%w: it has no Go function table (.gopclntab); reconscope traces programs written in Go", ErrNotGo)
	}
	var raw [8 + 8*8]byte
	if h.size < uint64(len(raw)) || h.off > uint64(b.size) || uint64(len(raw)) > uint64(b.size)-h.off {
		return nil, fmt.Errorf("%w: the Go function table is %d bytes, too short for its header", ErrTruncated, h.size)
	}
	if _, err := b.r.ReadAt(raw[:], int64(h.off)); err != nil {
		return nil, fmt.Errorf("%w: reading the Go function table header: %v", ErrTruncated, err)
	}
	le := binary.LittleEndian
	switch le.Uint32(raw[:]) {
	case pclnMagic12:
		h.version = 12
		return h, nil
	case pclnMagic116:
		h.version = 116
	case pclnMagic118:
		h.version = 118
	case pclnMagic120:
		h.version = 120
	default:
		return nil, fmt.Errorf("%w: the Go function table has an unknown magic number %#x (a Go newer than this reconscope, or a corrupt file)", ErrUnsupportedGo, le.Uint32(raw[:]))
	}
	if raw[4] != 0 || raw[5] != 0 || (raw[6] != 1 && raw[6] != 2 && raw[6] != 4) || raw[7] != 8 {
		return nil, fmt.Errorf("%w: malformed Go function table header", ErrTruncated)
	}
	h.minLC = uint64(raw[6])
	w := func(i int) uint64 { return le.Uint64(raw[8+8*i:]) }
	h.nfunc = w(0)
	if h.version == 116 {
		h.funcnameOff, h.cuOff, h.pctabOff, h.pclnOff = w(2), w(3), w(5), w(6)
	} else {
		h.funcnameOff, h.cuOff, h.pctabOff, h.pclnOff = w(3), w(4), w(6), w(7)
	}
	if h.funcnameOff > h.size || h.pctabOff > h.size || h.pclnOff > h.size {
		return nil, fmt.Errorf("%w: Go function table offsets point past its end", ErrTruncated)
	}
	return h, nil
}

// pclnFunctions builds the function table from .gopclntab: names from funcnametab, entries
// from functab relative to moduledata.text, and each function's true end from its pcsp
// table (which covers exactly the function's code, without the alignment padding up to
// the next function), so the bounds equal the symbol sizes of an unstripped build.
func (b *Binary) pclnFunctions() (*funcTable, error) {
	funcs, _, err := b.readPcln()
	return funcs, err
}

// ArgsSize returns the argument size .gopclntab records for fn: for ABI0 functions their
// arguments and results on the stack; for ABIInternal functions (Go's, since the register
// ABI) the spill area of the register arguments only: results in registers are not counted,
// so it does not tell apart two versions of a function whose result struct gained a field
// (MethodResultSize does).
func (b *Binary) ArgsSize(fn Function) (int, error) {
	t, err := b.pclnArgs()
	if err != nil {
		return 0, err
	}
	funcs, args := t.funcs.funcs, t.args
	i, found := slices.BinarySearchFunc(funcs, fn.Entry, func(f funcEntry, e uint64) int {
		return cmp.Compare(f.entry, e)
	})
	if !found {
		return 0, fmt.Errorf("argument size of %s in %s: %w: no function of the Go function table starts at %#x", fn.Name, b.name(), ErrSymbolNotFound, fn.Entry)
	}
	return int(args[i]), nil
}

// pclnTable is .gopclntab's function table with each function's argument size.
type pclnTable struct {
	funcs *funcTable
	args  []int32
}

// readPcln reads every function of .gopclntab and its argument size, in table order
// (ascending entry). It reads .gopclntab (function table, _func records, pc-value tables:
// 27 MiB of kube-controller-manager's 41 MiB) through a small block cache and keeps each
// function's bounds and the place of its name, not the name table (13 MiB more), so that
// inspecting a big binary does not hold its tables in memory.
func (b *Binary) readPcln() (*funcTable, []int32, error) {
	h, err := b.pclnHeader()
	if err != nil {
		return nil, nil, err
	}
	// The name table stays in the file: names are read when asked.
	namesEnd := h.cuOff
	if namesEnd < h.funcnameOff || namesEnd > h.size {
		namesEnd = h.size
	}
	if h.off > uint64(b.size) || namesEnd > uint64(b.size)-h.off {
		return nil, nil, fmt.Errorf("%w: the Go function table's names run past the end of the file", ErrTruncated)
	}
	funcnames := newNameRegion(b, h.off+h.funcnameOff, namesEnd-h.funcnameOff)
	pctab := newBlockReader(b.r, int64(h.off+h.pctabOff), int64(h.size-h.pctabOff))
	functab := newBlockReader(b.r, int64(h.off+h.pclnOff), int64(h.size-h.pclnOff))
	entrySize := uint64(8)
	if h.version == 116 {
		entrySize = 16
	}
	if h.nfunc == 0 || h.nfunc > uint64(functab.size)/entrySize-1 || uint64(functab.size) < (h.nfunc+1)*entrySize {
		return nil, nil, fmt.Errorf("%w: the Go function table claims %d functions", ErrTruncated, h.nfunc)
	}
	u32 := func(off uint64) (uint32, bool) {
		s, ok := functab.at(off, 4)
		if !ok {
			return 0, false
		}
		return binary.LittleEndian.Uint32(s), true
	}
	u64 := func(off uint64) (uint64, bool) {
		s, ok := functab.at(off, 8)
		if !ok {
			return 0, false
		}
		return binary.LittleEndian.Uint64(s), true
	}
	var text textMapper
	if h.version != 116 {
		md, err := b.modData()
		if err != nil {
			return nil, nil, err
		}
		text = md.textMapper()
	}
	entry := func(i uint64) (uint64, bool) {
		if h.version == 116 {
			return u64(i * entrySize)
		}
		off, ok := u32(i * entrySize)
		return text.addr(uint64(off)), ok
	}
	funcs := make([]funcEntry, 0, h.nfunc)
	asm := make([]bool, 0, h.nfunc)
	args := make([]int32, 0, h.nfunc)
	for i := uint64(0); i < h.nfunc; i++ {
		start, ok1 := entry(i)
		next, ok2 := entry(i + 1)
		var funcOff uint64
		var ok3 bool
		if h.version == 116 {
			funcOff, ok3 = u64(i*entrySize + 8)
		} else {
			var f32 uint32
			f32, ok3 = u32(i*entrySize + 4)
			funcOff = uint64(f32)
		}
		// _func: entry (uintptr before 1.18, uint32 offset since), nameOff int32, args,
		// deferreturn, pcsp uint32, ...
		base := uint64(4)
		if h.version == 116 {
			base = 8
		}
		nameOff, ok4 := u32(funcOff + base)
		argSize, _ := u32(funcOff + base + 4)
		pcsp, ok5 := u32(funcOff + base + 12)
		// funcID and flag follow the nine uint32 fields after the entry (and startLine
		// since Go 1.20).
		flagOff := funcOff + base + 8*4
		if h.version == 120 {
			flagOff += 4
		}
		flags, _ := u32(flagOff) // funcID, flag, pad, nfuncdata; 0 if cut off
		if !(ok1 && ok2 && ok3 && ok4 && ok5) || uint64(nameOff) >= funcnames.size() {
			return nil, nil, fmt.Errorf("%w: function %d of the Go function table points outside it", ErrTruncated, i)
		}
		end := next
		if next > start {
			if n, ok := pctab.tableLen(uint64(pcsp), h.minLC, next-start); ok && n > 0 {
				end = start + n
			}
		} else {
			end = start
		}
		funcs = append(funcs, funcEntry{entry: start, end: end, name: nameOff})
		asm = append(asm, byte(flags>>8)&funcFlagAsm != 0)
		args = append(args, int32(argSize))
	}
	t := &funcTable{funcs: funcs, names: funcnames}
	b.nameABI0(t, asm)
	return t, args, nil
}

// funcFlagAsm is abi.FuncFlagAsm: the function was written in assembly (Go 1.18+).
const funcFlagAsm = 1 << 2

// nameABI0 gives the ABI0 half of every ABI pair its ".abi0" suffix, as the linker does in
// .symtab. .gopclntab names a Go function and its ABI0 wrapper (made for callers in
// assembly, such as runtime.goexit1's caller runtime.goexit) alike, and an assembly function
// and its ABIInternal wrapper alike; without the suffix a probe on "runtime.goexit1" would
// match both, and the wrapper's first instruction runs before it loads g into R14. The ABI0
// half is the assembly function when one of the two is one; otherwise it is the wrapper:
// the one whose code calls (or tail-jumps to) the other.
func (b *Binary) nameABI0(t *funcTable, asm []bool) {
	// Functions with the same name, found by sorting their names' hashes (the table's lookup
	// index, 8 bytes a function; a map of the names cost 50 for kube-controller-manager's
	// 150 000).
	t.sameStoredName(func(group []int) { b.nameABI0Group(t, asm, group) })
}

// nameABI0Group names the ABI0 halves among functions of one name, given in table order: each
// is paired with the one holding the plain name so far.
func (b *Binary) nameABI0Group(t *funcTable, asm []bool, group []int) {
	if len(group) < 2 {
		return
	}
	j := group[0]
	for _, i := range group[1:] {
		abi0 := -1
		switch {
		case asm[i] && !asm[j]:
			abi0 = i
		case asm[j] && !asm[i]:
			abi0 = j
		case b.calls(t.bounds(i), t.funcs[j].entry):
			abi0 = i
		case b.calls(t.bounds(j), t.funcs[i].entry):
			abi0 = j
		}
		if abi0 >= 0 {
			t.funcs[abi0].abi0 = true
			if abi0 == j {
				j = i
			}
		}
	}
}

// maxWrapperSize bounds the code searched for a wrapper's call to the function it wraps.
const maxWrapperSize = 4096

// calls reports whether fn's code calls or jumps directly to target.
func (b *Binary) calls(fn Function, target uint64) bool {
	if fn.End <= fn.Entry || fn.End-fn.Entry > maxWrapperSize {
		return false
	}
	code, err := b.readVA(fn.Entry, fn.End-fn.Entry)
	if err != nil {
		return false
	}
	return slices.Contains(branchTargets(b.Arch, code, fn.Entry), target)
}

// pcSum returns the number of code bytes the pc-value table at the start of p covers: the
// sum of its pc deltas. It gives up (false) on a malformed table or one longer than limit;
// short says that p ended before the table did.
func pcSum(p []byte, quantum, limit uint64) (n uint64, ok, short bool) {
	var pc uint64
	first := true
	for steps := 0; steps < 1<<20; steps++ {
		uv, n := uvarint(p)
		if n <= 0 {
			return 0, false, len(p) < binary.MaxVarintLen64
		}
		p = p[n:]
		if uv == 0 && !first {
			return pc, true, false
		}
		first = false
		d, n := uvarint(p)
		if n <= 0 {
			return 0, false, len(p) < binary.MaxVarintLen64
		}
		p = p[n:]
		pc += d * quantum
		if pc > limit {
			return 0, false, false
		}
	}
	return 0, false, false
}

func uvarint(s []byte) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

// textMapper turns a function's entry offset (relative to runtime.text) into an address,
// through the text section map when the linker split the text (large arm64 binaries).
type textMapper struct {
	text  uint64
	sects []textSect
}

type textSect struct{ vaddr, end, baseaddr uint64 }

func (t textMapper) addr(off uint64) uint64 {
	if len(t.sects) > 1 {
		for _, s := range t.sects {
			if off >= s.vaddr && off < s.end {
				return s.baseaddr + off - s.vaddr
			}
		}
	}
	return t.text + off
}

// FunctionNameAt returns the name of the Go function whose code holds addr (an address in the
// ELF file), from .gopclntab, stripped or not, by a binary search of its function table read
// from the file: a few small reads, none of the tables Release drops. It returns an error
// wrapping ErrSymbolNotFound when no Go function holds addr.
func (b *Binary) FunctionNameAt(addr uint64) (string, error) {
	h, err := b.pclnHeader()
	if err != nil {
		return "", err
	}
	if h.version == 12 {
		return "", fmt.Errorf("function at %#x in %s: %w", addr, b.name(), ErrUnsupportedGo)
	}
	var text textMapper
	if h.version != 116 {
		md, err := b.modData()
		if err != nil {
			return "", err
		}
		text = md.textMapper()
	}
	entrySize := uint64(8)
	if h.version == 116 {
		entrySize = 16
	}
	functab := h.off + h.pclnOff
	var buf [8]byte
	word := func(off uint64, n int) (uint64, error) {
		if _, err := b.r.ReadAt(buf[:n], int64(off)); err != nil {
			return 0, fmt.Errorf("%w: reading the Go function table at %#x: %v", ErrTruncated, off, err)
		}
		if n == 4 {
			return uint64(binary.LittleEndian.Uint32(buf[:])), nil
		}
		return binary.LittleEndian.Uint64(buf[:]), nil
	}
	entry := func(i uint64) (uint64, error) {
		if h.version == 116 {
			return word(functab+i*entrySize, 8)
		}
		off, err := word(functab+i*entrySize, 4)
		return text.addr(off), err
	}
	// The last function i with entry(i) <= addr < entry(i+1); entry(nfunc) is the end of text.
	var searchErr error
	i := sort.Search(int(h.nfunc), func(i int) bool {
		e, err := entry(uint64(i))
		if err != nil && searchErr == nil {
			searchErr = err
		}
		return e > addr
	}) - 1
	if searchErr != nil {
		return "", searchErr
	}
	notFound := fmt.Errorf("function at %#x in %s: %w: no Go function holds it", addr, b.name(), ErrSymbolNotFound)
	if i < 0 {
		return "", notFound
	}
	if end, err := entry(uint64(i) + 1); err != nil {
		return "", err
	} else if addr >= end {
		return "", notFound
	}
	var funcOff uint64
	base := uint64(4) // _func: entryOff uint32 (uintptr before 1.18), nameOff int32, ...
	if h.version == 116 {
		funcOff, err = word(functab+uint64(i)*entrySize+8, 8)
		base = 8
	} else {
		funcOff, err = word(functab+uint64(i)*entrySize+4, 4)
	}
	if err != nil {
		return "", err
	}
	nameOff, err := word(functab+funcOff+base, 4)
	if err != nil {
		return "", err
	}
	start := h.off + h.funcnameOff + nameOff
	if nameOff >= h.size-h.funcnameOff || start >= uint64(b.size) {
		return "", fmt.Errorf("%w: function %d's name lies outside the Go function table", ErrTruncated, i)
	}
	name := make([]byte, min(512, uint64(b.size)-start))
	n, _ := b.r.ReadAt(name, int64(start))
	name = name[:n]
	end := bytes.IndexByte(name, 0)
	if end < 0 {
		return "", fmt.Errorf("%w: function %d's name is longer than %d bytes", ErrTruncated, i, len(name))
	}
	return string(name[:end]), nil
}
