package symbols

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// moduledata holds the fields of runtime.firstmoduledata that reconscope needs. The struct
// is the runtime's own index of the binary, present in stripped binaries too: it gives the
// text start (which .gopclntab no longer stores since Go 1.26, and which differs from the
// .text section start in cgo binaries), the base that type names are relative to, and the
// itab list.
type moduledata struct {
	addr          uint64
	text, etext   uint64
	types, etypes uint64
	sects         []textSect
	itablinks     uint64 // address of the []*itab backing array; 0 if not found
	nitabs        uint64
	// itabs, itabsEnd: Go 1.27+ has no itablinks: the linker lays the itabs out one after
	// another in the type data, at types+itaboffset for itabsize bytes.
	itabs, itabsEnd uint64
}

func (md *moduledata) textMapper() textMapper {
	return textMapper{text: md.text, sects: md.sects}
}

// Word indexes into runtime.moduledata (64-bit). The prefix up to etext is the same since
// Go 1.16; what follows moved as fields were added (covctrs in 1.20, rodata and gofunc in
// 1.18, epclntab later), so the later fields are located by version and then validated.
const (
	mdText  = 22 // text uintptr
	mdEtext = 23
)

func (b *Binary) readModuledata() (*moduledata, error) {
	h, err := b.pclnHeader()
	if err != nil {
		return nil, err
	}
	addr, err := b.findModuledata(h)
	if err != nil {
		return nil, err
	}
	const nwords = 56
	raw, err := b.readVA(addr, nwords*8)
	if err != nil {
		return nil, fmt.Errorf("%w: reading runtime.firstmoduledata: %v", ErrTruncated, err)
	}
	relocs := map[uint64]uint64(nil)
	if b.PIE {
		relocs = b.relocs()
	}
	w := func(i int) uint64 {
		v := binary.LittleEndian.Uint64(raw[8*i:])
		if v == 0 && relocs != nil {
			v = relocs[addr+uint64(8*i)]
		}
		return v
	}
	md := &moduledata{addr: addr, text: w(mdText), etext: w(mdEtext)}
	if md.text == 0 || md.etext < md.text {
		return nil, fmt.Errorf("%w: runtime.firstmoduledata has no text range", ErrTruncated)
	}

	// Go 1.27+: types, typedesclen, etypes, itaboffset, itabsize after gcbss (word 36), then
	// rodata, gofunc, epclntab and textsectmap; typelinks and itablinks are gone.
	go127 := false
	if b.goMinor >= 27 || b.goMinor == 0 {
		t, e, off, size := w(37), w(39), w(40), w(41)
		if t != 0 && t <= e && e-t <= uint64(b.size) && b.mapped(t) && off+size <= e-t && w(38) <= e-t {
			md.types, md.etypes = t, e
			if size > 0 {
				md.itabs, md.itabsEnd = t+off, t+off+size
			}
			go127 = true
		}
	}
	// Before: types, etypes after gcbss. Go 1.20+ has covctrs/ecovctrs before end.
	typesIdx := []int{37, 35}
	if b.goMinor >= 17 && b.goMinor < 20 {
		typesIdx = []int{35, 37}
	}
	for _, i := range typesIdx {
		if go127 {
			break
		}
		t, e := w(i), w(i+1)
		if t != 0 && t <= e && e-t <= uint64(b.size) && b.mapped(t) {
			md.types, md.etypes = t, e
			break
		}
	}
	// textsectmap, then typelinks, then itablinks (three slice headers in a row; Go 1.27+:
	// textsectmap only).
	var tsIdx []int
	switch {
	case go127:
		tsIdx = []int{45}
	case b.goMinor >= 20 || b.goMinor == 0:
		tsIdx = []int{42, 41, 39, 37}
	case b.goMinor >= 18:
		tsIdx = []int{39, 41, 42, 37}
	default:
		tsIdx = []int{37, 39, 41, 42}
	}
	for _, i := range tsIdx {
		if i+8 >= nwords {
			continue
		}
		p, l, c := w(i), w(i+1), w(i+2)
		if p == 0 || l != c || l == 0 || l > 256 {
			continue
		}
		secs, err := b.readVA(p, l*24)
		if err != nil {
			continue
		}
		sects := make([]textSect, l)
		for j := range sects {
			sects[j] = textSect{
				vaddr:    binary.LittleEndian.Uint64(secs[24*j:]),
				end:      binary.LittleEndian.Uint64(secs[24*j+8:]),
				baseaddr: binary.LittleEndian.Uint64(secs[24*j+16:]),
			}
		}
		if sects[0].vaddr != 0 || sects[0].baseaddr != md.text {
			continue
		}
		md.sects = sects
		if go127 {
			break
		}
		ip, il, ic := w(i+6), w(i+7), w(i+8)
		if ip != 0 && il == ic && il <= uint64(b.size)/8 && b.mapped(ip) {
			md.itablinks, md.nitabs = ip, il
		}
		break
	}
	if md.types == 0 {
		if t, ok := b.symbolValue("runtime.types"); ok {
			md.types = t
			md.etypes, _ = b.symbolValue("runtime.etypes")
		}
	}
	return md, nil
}

// mapped reports whether addr lies in the file image of a loadable segment.
func (b *Binary) mapped(addr uint64) bool {
	_, err := b.FileOffset(addr)
	return err == nil
}

// findModuledata locates runtime.firstmoduledata: the .go.module section (Go 1.26+), the
// symbol table, or else a scan of the data sections for a word pointing at the pclntab
// header followed by one pointing at its funcnametab.
func (b *Binary) findModuledata(h *pclnHeader) (uint64, error) {
	check := func(addr uint64) bool {
		p0, err0 := b.readPtr(addr)
		p1, err1 := b.readPtr(addr + 8)
		return err0 == nil && err1 == nil && p0 == h.addr && p1 == h.addr+h.funcnameOff
	}
	if s := b.f.Section(".go.module"); s != nil && check(s.Addr) {
		return s.Addr, nil
	}
	if addr, ok := b.symbolValue("runtime.firstmoduledata"); ok && check(addr) {
		return addr, nil
	}
	for _, s := range b.f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_WRITE == 0 || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		data, err := b.sectionBytes(s)
		if err != nil {
			continue
		}
		for i := 0; i+16 <= len(data); i += 8 {
			if binary.LittleEndian.Uint64(data[i:]) == h.addr && binary.LittleEndian.Uint64(data[i+8:]) == h.addr+h.funcnameOff {
				return s.Addr + uint64(i), nil
			}
		}
	}
	if b.PIE {
		relocs := b.relocs()
		for off, v := range relocs {
			if v == h.addr && relocs[off+8] == h.addr+h.funcnameOff {
				return off, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: runtime.firstmoduledata not found (a Go toolchain this reconscope does not know?)", ErrUnsupportedGo)
}
