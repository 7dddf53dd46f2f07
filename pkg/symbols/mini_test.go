package symbols

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

var miniVariants = []miniOpts{
	{}, {symtab: true}, {arm64: true}, {arm64: true, symtab: true}, {dwarf: true}, {arm64: true, symtab: true, dwarf: true},
}

// miniOpts selects a variant of the synthetic Go executable.
type miniOpts struct {
	arm64  bool
	symtab bool
	dwarf  bool // uncompressed .debug_info/.debug_abbrev describing runtime.g
	// version is the Go version in the build info ("go1.26.8" if empty).
	version string
	// machine overrides the ELF machine (0: from arm64).
	machine elf.Machine
	// modinfo adds lines to the module information (deps, build settings).
	modinfo string
}

// Layout of the synthetic executable: one PT_LOAD maps the whole file at miniBase.
const (
	miniBase     = 0x400000
	miniText     = 0x100 // two functions: main.A (with a stack check) and main.B (leaf)
	miniFuncB    = 0x20  // offset of main.B from the text start
	miniPcln     = 0x200
	miniModule   = 0x400
	miniTypes    = 0x700
	miniItab     = 0x800
	miniItablink = 0x840
	miniBuildinf = 0x880
	miniTail     = 0xc00 // .symtab, .strtab, .shstrtab, section headers
)

// miniGoELF builds a small, valid Go-like ELF executable by hand: a Go 1.20+ pclntab with
// two functions, a moduledata, type descriptors for error and *errors.errorString, one itab,
// build info, and optionally a symbol table. It is the unit-test fixture that needs no
// toolchain, and the seed of the fuzz corpus.
func miniGoELF(o miniOpts) []byte {
	le := binary.LittleEndian
	buf := make([]byte, miniTail)
	put64 := func(off int, v uint64) { le.PutUint64(buf[off:], v) }
	put32 := func(off int, v uint32) { le.PutUint32(buf[off:], v) }

	// .text
	var code []byte
	var sizeA, sizeB uint32
	minLC := byte(1)
	if o.arm64 {
		minLC = 4
		for _, w := range []uint32{
			0xf9400b90, // MOVD 16(R28), R16
			0xeb3063ff, // CMP R16, RSP
			0x54000069, // BLS +12
			0xf81f0ffe, // MOVD.W R30, -16(RSP)
			0xd65f03c0, // RET
			0x17fffffb, // JMP -20 (to the entry: the morestack path, abridged)
		} {
			code = le.AppendUint32(code, w)
		}
		sizeA = uint32(len(code))
		for len(code) < miniFuncB {
			code = append(code, 0)
		}
		code = le.AppendUint32(code, 0xd65f03c0) // main.B: RET
		sizeB = 4
	} else {
		code = []byte{
			0x49, 0x3b, 0x66, 0x10, // CMPQ SP, 0x10(R14)
			0x76, 0x03, // JBE +3
			0x55,       // PUSHQ BP
			0x5d,       // POPQ BP
			0xc3,       // RET
			0xeb, 0xf5, // JMP to the entry
		}
		sizeA = uint32(len(code))
		for len(code) < miniFuncB {
			code = append(code, 0xcc)
		}
		code = append(code, 0x31, 0xc0, 0xc3) // main.B: XORL AX, AX; RET
		sizeB = 3
	}
	copy(buf[miniText:], code)
	textStart, etext := uint64(miniBase+miniText), uint64(miniBase+miniText+miniFuncB)+uint64(sizeB)

	// .gopclntab: header, funcnametab, pctab, functab with _func records.
	const (
		funcnameOff = 72
		pctabOff    = 88
		pclnOff     = 104
	)
	p := miniPcln
	put32(p, pclnMagic120)
	buf[p+6], buf[p+7] = minLC, 8
	put64(p+8, 2) // nfunc
	for i, v := range []uint64{0, 0, funcnameOff, funcnameOff + 14, funcnameOff + 14, pctabOff, pclnOff} {
		put64(p+16+8*i, v) // nfiles, textStart (unused), funcname, cu, filetab, pctab, pcln
	}
	copy(buf[p+funcnameOff:], "main.A\x00main.B\x00")
	// pctab: byte 0 unused, then the pcsp tables (value +1 over the whole function).
	copy(buf[p+pctabOff:], []byte{0, 2, byte(sizeA / uint32(minLC)), 0, 2, byte(sizeB / uint32(minLC)), 0})
	ft := p + pclnOff
	funcA, funcB := uint32(24), uint32(24+44)
	put32(ft, 0)
	put32(ft+4, funcA)
	put32(ft+8, miniFuncB)
	put32(ft+12, funcB)
	put32(ft+16, miniFuncB+sizeB) // end of the last function
	for i, f := range []struct{ off, entry, name, pcsp uint32 }{{funcA, 0, 0, 1}, {funcB, miniFuncB, 7, 4}} {
		_ = i
		put32(ft+int(f.off), f.entry)
		put32(ft+int(f.off)+4, f.name)
		put32(ft+int(f.off)+16, f.pcsp)
	}

	// Type data: error (interface), errors.errorString (struct, name shared with its
	// pointer type through TFlagExtraStar), *errors.errorString (pointer to it).
	const (
		typErr      = miniTypes + 0x00
		typStruct   = miniTypes + 0x40
		typPtr      = miniTypes + 0x80
		nameErr     = 0xc0 // name offsets relative to the types base
		namePtrStr  = 0xc8
		kindPointer = 22
	)
	for _, ty := range []struct {
		at    int
		str   uint32
		tflag byte
		kind  byte
	}{{typErr, nameErr, 0, 20}, {typStruct, namePtrStr, tflagExtraStar, 25}, {typPtr, namePtrStr, 0, kindPointer}} {
		buf[ty.at+abiTypeTFlagOff] = ty.tflag
		buf[ty.at+23] = ty.kind
		put32(ty.at+abiTypeStrOff, ty.str)
	}
	put64(typPtr+abiTypeSize, miniBase+typStruct) // PtrType.Elem
	copy(buf[miniTypes+nameErr:], []byte{0, 5, 'e', 'r', 'r', 'o', 'r'})
	copy(buf[miniTypes+namePtrStr:], append([]byte{0, 19}, "*errors.errorString"...))

	// itab{inter, _type, hash, fun[0]} and .itablink pointing at it.
	put64(miniItab, miniBase+typErr)
	put64(miniItab+8, miniBase+typPtr)
	put64(miniItab+24, textStart+miniFuncB)
	put64(miniItablink, miniBase+miniItab)

	// .go.module: runtime.firstmoduledata (Go 1.26 layout).
	m := miniModule
	put64(m, miniBase+miniPcln)
	put64(m+8, miniBase+miniPcln+funcnameOff)
	put64(m+8*mdText, textStart)
	put64(m+8*mdEtext, etext)
	put64(m+8*37, miniBase+miniTypes)      // types
	put64(m+8*38, miniBase+miniItab)       // etypes
	put64(m+8*42, uint64(miniBase+m+56*8)) // textsectmap.ptr
	put64(m+8*43, 1)                       // len
	put64(m+8*44, 1)                       // cap
	put64(m+8*48, miniBase+miniItablink)   // itablinks.ptr
	put64(m+8*49, 1)
	put64(m+8*50, 1)
	put64(m+56*8+8, etext-textStart) // textsect{vaddr 0, end, baseaddr}
	put64(m+56*8+16, textStart)

	// .go.buildinfo: header, then the version and the framed modinfo, varint-prefixed.
	goarch := "amd64"
	if o.arm64 {
		goarch = "arm64"
	}
	bi := append([]byte(buildInfoMagic), 8, 2)
	bi = append(bi, make([]byte, 32-len(bi))...)
	version := o.version
	if version == "" {
		version = "go1.26.8"
	}
	bi = binary.AppendUvarint(bi, uint64(len(version)))
	bi = append(bi, version...)
	mod := "0w\xaf\x0c\x92t\x08\x02A\xe1\xc1\x07\xe6\xd6\x18\xe6" +
		"path\tmini\nmod\tmini\t(devel)\t\n" + o.modinfo + "build\tGOARCH=" + goarch + "\n" +
		"\xf92C1\x86\x18 r\x00\x82B\x10A\x16\xd8\xf2"
	bi = binary.AppendUvarint(bi, uint64(len(mod)))
	bi = append(bi, mod...)
	if len(bi) > miniTail-miniBuildinf {
		panic("miniGoELF: build info does not fit")
	}
	copy(buf[miniBuildinf:], bi)

	// Non-allocated tail: symbol table, string tables, section headers.
	shstr := "\x00.text\x00.gopclntab\x00.go.module\x00.rodata\x00.itablink\x00.go.buildinfo\x00.symtab\x00.strtab\x00.shstrtab\x00.debug_abbrev\x00.debug_info\x00"
	nameOf := func(s string) uint32 { return uint32(bytes.Index([]byte(shstr), []byte("\x00"+s+"\x00")) + 1) }
	strtab := "\x00main.A\x00main.B\x00go:itab.*errors.errorString,error\x00"
	var symtab []byte
	if o.symtab {
		symtab = make([]byte, 24) // null symbol
		sym := func(name, shndx uint32, info byte, value, size uint64) {
			e := make([]byte, 24)
			le.PutUint32(e, name)
			e[4] = info
			le.PutUint16(e[6:], uint16(shndx))
			le.PutUint64(e[8:], value)
			le.PutUint64(e[16:], size)
			symtab = append(symtab, e...)
		}
		sym(1, 1, byte(elf.STT_FUNC), textStart, uint64(sizeA))
		sym(8, 1, byte(elf.STT_FUNC), textStart+miniFuncB, uint64(sizeB))
		sym(15, 4, byte(elf.STT_OBJECT), miniBase+miniItab, 32)
	}
	var abbrevs, info []byte
	if o.dwarf {
		abbrevs, info = miniDWARF()
	}
	abbrevOff := len(buf)
	buf = append(buf, abbrevs...)
	infoOff := len(buf)
	buf = append(buf, info...)
	symOff := len(buf)
	buf = append(buf, symtab...)
	strOff := len(buf)
	buf = append(buf, strtab...)
	shstrOff := len(buf)
	buf = append(buf, shstr...)
	for len(buf)%8 != 0 {
		buf = append(buf, 0)
	}
	type sh struct {
		name            string
		typ             elf.SectionType
		flags           elf.SectionFlag
		off, size, link uint64
		entsize         uint64
	}
	alloc := elf.SHF_ALLOC
	sections := []sh{
		{"", elf.SHT_NULL, 0, 0, 0, 0, 0},
		{".text", elf.SHT_PROGBITS, alloc | elf.SHF_EXECINSTR, miniText, uint64(len(code)), 0, 0},
		{".gopclntab", elf.SHT_PROGBITS, alloc, miniPcln, miniModule - miniPcln, 0, 0},
		{".go.module", elf.SHT_PROGBITS, alloc | elf.SHF_WRITE, miniModule, miniTypes - miniModule, 0, 0},
		{".rodata", elf.SHT_PROGBITS, alloc, miniTypes, miniItablink - miniTypes, 0, 0},
		{".itablink", elf.SHT_PROGBITS, alloc, miniItablink, 8, 0, 0},
		{".go.buildinfo", elf.SHT_PROGBITS, alloc | elf.SHF_WRITE, miniBuildinf, uint64(len(bi)), 0, 0},
	}
	if o.dwarf {
		sections = append(sections,
			sh{".debug_abbrev", elf.SHT_PROGBITS, 0, uint64(abbrevOff), uint64(len(abbrevs)), 0, 0},
			sh{".debug_info", elf.SHT_PROGBITS, 0, uint64(infoOff), uint64(len(info)), 0, 0})
	}
	if o.symtab {
		strIndex := uint64(len(sections) + 1)
		sections = append(sections,
			sh{".symtab", elf.SHT_SYMTAB, 0, uint64(symOff), uint64(len(symtab)), strIndex, 24},
			sh{".strtab", elf.SHT_STRTAB, 0, uint64(strOff), uint64(len(strtab)), 0, 0})
	}
	sections = append(sections, sh{".shstrtab", elf.SHT_STRTAB, 0, uint64(shstrOff), uint64(len(shstr)), 0, 0})
	shoff := len(buf)
	for _, s := range sections {
		e := make([]byte, 64)
		if s.name != "" {
			le.PutUint32(e, nameOf(s.name))
		}
		le.PutUint32(e[4:], uint32(s.typ))
		le.PutUint64(e[8:], uint64(s.flags))
		if s.flags&alloc != 0 {
			le.PutUint64(e[16:], miniBase+s.off)
		}
		le.PutUint64(e[24:], s.off)
		le.PutUint64(e[32:], s.size)
		le.PutUint32(e[40:], uint32(s.link))
		le.PutUint64(e[48:], 8)
		le.PutUint64(e[56:], s.entsize)
		buf = append(buf, e...)
	}

	// ELF header and the one program header.
	copy(buf, elf.ELFMAG)
	buf[elf.EI_CLASS], buf[elf.EI_DATA], buf[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1
	le.PutUint16(buf[16:], uint16(elf.ET_EXEC))
	machine := elf.EM_X86_64
	if o.arm64 {
		machine = elf.EM_AARCH64
	}
	if o.machine != 0 {
		machine = o.machine
	}
	le.PutUint16(buf[18:], uint16(machine))
	le.PutUint32(buf[20:], 1)
	put64(24, textStart)
	put64(32, 64)            // phoff
	put64(40, uint64(shoff)) // shoff
	le.PutUint16(buf[52:], 64)
	le.PutUint16(buf[54:], 56)
	le.PutUint16(buf[56:], 1)
	le.PutUint16(buf[58:], 64)
	le.PutUint16(buf[60:], uint16(len(sections)))
	le.PutUint16(buf[62:], uint16(len(sections)-1))
	ph := buf[64:]
	le.PutUint32(ph, uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(ph[8:], 0)
	le.PutUint64(ph[16:], miniBase)
	le.PutUint64(ph[24:], miniBase)
	le.PutUint64(ph[32:], miniTail)
	le.PutUint64(ph[40:], miniTail)
	le.PutUint64(ph[48:], 0x1000)
	return buf
}

// miniDWARF returns .debug_abbrev and .debug_info (DWARF 5) for one unit "runtime" holding
// runtime.g {stack runtime.stack @0; goid uintptr @152} and runtime.stack {lo @0; hi @8}, the
// shape of the Go linker's output (names inline, type references as section offsets).
func miniDWARF() (abbrevs, info []byte) {
	const (
		cu, st, member, typedef, base = 1, 2, 3, 4, 5
		formString, formUdata         = 0x08, 0x0f
		formRefAddr, formFlag         = 0x10, 0x0c
	)
	abbrevs = []byte{
		cu, dwTagCompileUnit, 1, dwAtName, formString, 0, 0,
		st, dwTagStructureType, 1, dwAtName, formString, 0x0b, formUdata, 0, 0,
		member, dwTagMember, 0, dwAtName, formString, dwAtDataMemberLocation, formUdata, dwAtType, formRefAddr,
		0x83, 0x52, formFlag, 0, 0, // DW_AT_go_embedded_field (0x2903) as uleb128
		typedef, dwTagTypedef, 0, dwAtName, formString, dwAtType, formRefAddr, 0, 0,
		base, 0x24, 0, dwAtName, formString, 0, 0,
		0,
	}
	var d []byte
	str := func(s string) { d = append(d, s...); d = append(d, 0) }
	var patches []struct {
		at     int
		target *int
	}
	ref := func(target *int) {
		patches = append(patches, struct {
			at     int
			target *int
		}{len(d), target})
		d = append(d, 0, 0, 0, 0)
	}
	var stackStruct, stackTypedef, uintptrBase int
	d = append(d, 0, 0, 0, 0, 5, 0, 1, 8, 0, 0, 0, 0) // length (patched), v5, DW_UT_compile, addr 8, abbrev 0
	d = append(d, cu)
	str("runtime")
	stackStruct = len(d)
	d = append(d, st)
	str("runtime.stack")
	d = append(d, 16)
	for _, m := range []struct {
		name string
		loc  byte
	}{{"lo", 0}, {"hi", 8}} {
		d = append(d, member)
		str(m.name)
		d = append(d, m.loc)
		ref(&uintptrBase)
		d = append(d, 0)
	}
	d = append(d, 0)
	stackTypedef = len(d)
	d = append(d, typedef)
	str("runtime.stack")
	ref(&stackStruct)
	d = append(d, st)
	str("runtime.g")
	d = append(d, 0xa0, 0x01) // 160
	d = append(d, member)
	str("stack")
	d = append(d, 0)
	ref(&stackTypedef)
	d = append(d, 0)
	d = append(d, member)
	str("goid")
	d = append(d, 0x98, 0x01) // 152
	ref(&uintptrBase)
	d = append(d, 0)
	d = append(d, 0) // end of runtime.g
	uintptrBase = len(d)
	d = append(d, base)
	str("uintptr")
	d = append(d, 0) // end of the unit
	for _, p := range patches {
		binary.LittleEndian.PutUint32(d[p.at:], uint32(*p.target))
	}
	binary.LittleEndian.PutUint32(d, uint32(len(d)-4))
	return abbrevs, d
}

// TestMiniELF parses the synthetic executable: every question has a known answer, and no
// toolchain is needed.
func TestMiniELF(t *testing.T) {
	for _, o := range miniVariants {
		name := map[bool]string{false: "amd64", true: "arm64"}[o.arm64] + map[bool]string{false: "-stripped", true: ""}[o.symtab] + map[bool]string{false: "", true: "-dwarf"}[o.dwarf]
		t.Run(name, func(t *testing.T) {
			b, err := OpenBytes(miniGoELF(o))
			if err != nil {
				t.Fatal(err)
			}
			wantArch := map[bool]string{false: "amd64", true: "arm64"}[o.arm64]
			if b.Arch != wantArch || b.GoVersion != "go1.26.8" || b.MainModule != "mini" || b.Stripped == o.symtab || b.HasDWARF != o.dwarf || b.PIE {
				t.Errorf("facts: arch %s, %s, main %s, stripped %v, DWARF %v, PIE %v", b.Arch, b.GoVersion, b.MainModule, b.Stripped, b.HasDWARF, b.PIE)
			}
			funcs, err := b.Functions()
			if err != nil {
				t.Fatal(err)
			}
			text := uint64(miniBase + miniText)
			if len(funcs) != 2 || funcs[0].Name != "main.A" || funcs[0].Entry != text || funcs[1].Name != "main.B" || funcs[1].Entry != text+miniFuncB {
				t.Fatalf("Functions() = %+v", funcs)
			}
			a, err := b.Lookup("main.A")
			if err != nil {
				t.Fatal(err)
			}
			entry, err := b.EntrySite(a)
			if err != nil {
				t.Fatal(err)
			}
			wantEntry, wantInsn, wantRet := text+6, "PUSHQ BP", text+8
			if o.arm64 {
				wantEntry, wantInsn, wantRet = text+12, "MOVD.W R30, -16(RSP)", text+16
			}
			if entry.Addr != wantEntry || entry.Insn != wantInsn || entry.FileOffset != wantEntry-miniBase {
				t.Errorf("EntrySite(main.A) = %+v, want %#x %q", entry, wantEntry, wantInsn)
			}
			rets, err := b.ReturnSites(a)
			if err != nil || len(rets) != 1 || rets[0].Addr != wantRet || rets[0].Insn != "RET" {
				t.Errorf("ReturnSites(main.A) = %+v, %v; want one RET at %#x", rets, err, wantRet)
			}
			fb, _ := b.Lookup("main.B")
			if s, err := b.EntrySite(fb); err != nil || s.Addr != fb.Entry {
				t.Errorf("EntrySite(leaf main.B) = %+v, %v; want its entry", s, err)
			}
			itabs, err := b.Itabs()
			if err != nil || len(itabs) != 1 || itabs[miniBase+miniItab] != "*errors.errorString" {
				t.Errorf("Itabs() = %v, %v", itabs, err)
			}
			list, _ := b.ItabList()
			if len(list) != 1 || list[0].Interface != "error" {
				t.Errorf("ItabList() = %+v", list)
			}
			if n, err := b.TypeName(miniBase + miniTypes + 0x40); err != nil || n != "errors.errorString" {
				t.Errorf("TypeName(struct with TFlagExtraStar) = %q, %v", n, err)
			}
			wantSource := map[bool]string{false: "table", true: "dwarf"}[o.dwarf]
			off, err := b.FieldOffset("runtime.g", "goid")
			if err != nil || off.Source != wantSource || off.Value != 152 {
				t.Errorf("FieldOffset(runtime.g, goid) = %+v, %v; want 152 from %s", off, err, wantSource)
			}
			if o.dwarf {
				off, err := b.FieldOffset("runtime.g", "stack.hi")
				if err != nil || off.Value != 8 {
					t.Errorf("FieldOffset(runtime.g, stack.hi) = %+v, %v; want 8", off, err)
				}
			}
		})
	}
}

// TestUnsupported opens synthetic executables that are Go programs reconscope cannot trace.
func TestUnsupported(t *testing.T) {
	for _, c := range []struct {
		name string
		o    miniOpts
		want error
	}{
		{"go1.16", miniOpts{version: "go1.16.15"}, ErrUnsupportedGo},
		{"go1.17-arm64", miniOpts{arm64: true, version: "go1.17.13"}, ErrUnsupportedGo},
		{"riscv64", miniOpts{machine: elf.EM_RISCV}, ErrUnsupportedGo},
		{"go1.17-amd64", miniOpts{version: "go1.17.13"}, nil},
		{"devel", miniOpts{version: "devel go1.27-abcdef Tue Nov 3 2026"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := OpenBytes(miniGoELF(c.o))
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Open = %v, want %v", err, c.want)
			}
			if err != nil && !strings.Contains(err.Error(), "reconscope") {
				t.Errorf("the message does not say what to do: %v", err)
			}
			if b != nil {
				b.Close()
			}
		})
	}
}

// TestConcurrentUse asks every question from several goroutines at once (run with -race).
func TestConcurrentUse(t *testing.T) {
	b, err := OpenBytes(miniGoELF(miniOpts{symtab: true, dwarf: true}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for range 8 {
		go func() {
			f, err := b.Lookup("main.A")
			if err == nil {
				_, err = b.EntrySite(f)
			}
			if err == nil {
				_, err = b.ReturnSites(f)
			}
			if err == nil {
				_, err = b.Itabs()
			}
			if err == nil {
				_, err = b.FieldOffset("runtime.g", "goid")
			}
			if err == nil {
				_, err = b.Functions()
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestKubernetesRelease: a Kubernetes release build replaces its staging modules by
// directories (recorded as v0.0.0) and sets its release in the linker flags: the staging
// modules take the published version, which the offsets table answers for; other modules keep
// theirs.
func TestKubernetesRelease(t *testing.T) {
	modinfo := "dep\tk8s.io/client-go\tv0.0.0\n=>\t./staging/src/k8s.io/client-go\t\t\n" +
		"dep\tk8s.io/klog/v2\tv2.130.1\th1:abc=\n" +
		"build\t-ldflags=\"-s -w -X 'k8s.io/component-base/version.gitVersion=v1.36.3' -X k8s.io/component-base/version.gitMajor=1\"\n"
	b, err := OpenBytes(miniGoELF(miniOpts{modinfo: modinfo}))
	if err != nil {
		t.Fatal(err)
	}
	for m, want := range map[string]string{"k8s.io/client-go": "v0.36.3", "k8s.io/klog/v2": "v2.130.1"} {
		if got := b.Modules[m]; got != want {
			t.Errorf("Modules[%s] = %q, want %q", m, got, want)
		}
	}
	off, err := b.FieldOffset("k8s.io/client-go/rest.Request", "verb")
	if err != nil || off.Source != "table" || !strings.HasPrefix(off.Version, "v0.36.") {
		t.Errorf("FieldOffset(rest.Request, verb) = %+v, %v; want a table entry of the v0.36 series", off, err)
	}

	for _, c := range []struct{ ldflags, want string }{
		{"-X k8s.io/client-go/pkg/version.gitVersion=v1.37.2", "v0.37.2"},
		{"-X k8s.io/component-base/version.gitVersion=v1.37.0-alpha.1", "v0.37.0"},
		{"-X 'k8s.io/component-base/version.gitVersion=v1.37.2+k3s1' -s", "v0.37.2"},
		{"-X main.version=v1.2.3", ""},
		{"", ""},
	} {
		if got := stagingVersion(c.ldflags); got != c.want {
			t.Errorf("stagingVersion(%q) = %q, want %q", c.ldflags, got, c.want)
		}
	}
}
