package symbols

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// This file (the units), dwarf_struct.go (the struct types) and dwarf_form.go (the bytes)
// answer "at which offset is field F of struct T" from .debug_info without decoding all of it.
// The Go linker puts every type DIE into the compile unit named "runtime"
// (cmd/link/internal/ld/dwarf.go: movetomodule), so the reader streams the (usually
// compressed) section unit by unit, skips every unit but that one, keeps it in memory with an
// index of its struct types, and stops there. debug/dwarf would need the whole decompressed
// section and a full decode for the same answer.

// DWARF constants (DWARF 5, section 7).
const (
	dwTagCompileUnit   = 0x11
	dwTagMember        = 0x0d
	dwTagStructureType = 0x13
	dwTagTypedef       = 0x16

	dwAtName               = 0x03
	dwAtDataMemberLocation = 0x38
	dwAtType               = 0x49
	dwAtGoEmbeddedField    = 0x2903

	dwOpPlusUconst = 0x23
)

var errDWARF = errors.New("malformed DWARF")

type abbrev struct {
	tag      uint64
	children bool
	attrs    []abbrevAttr
}

type abbrevAttr struct {
	attr, form uint64
	implicit   int64
}

// dwarfUnit is one compile unit kept in memory.
type dwarfUnit struct {
	off      uint64 // section offset of the unit header
	data     []byte // the whole unit, header included
	first    int    // offset in data of the first DIE
	version  int
	addrSize int
	offSize  int
	abbrevs  map[uint64]*abbrev
	name     string

	// structs indexes the unit's top-level struct types: name -> section offset, plus
	// generic types under their name without type arguments (the first instantiation that
	// is not a GC shape).
	structs map[string]uint64
}

type dwarfReader struct {
	b    *Binary
	info *elf.Section

	mu         sync.Mutex
	abbrevData []byte
	abbrevs    map[uint64]map[uint64]*abbrev
	str        []byte
	units      []*dwarfUnit // kept units in section order

	stream   *bufio.Reader
	pos      uint64 // section offset of the next unit in stream
	complete bool   // the whole section was streamed once: every kept unit is in units
}

func (b *Binary) openDWARF() (*dwarfReader, error) {
	d := &dwarfReader{b: b, abbrevs: map[uint64]map[uint64]*abbrev{}}
	if s := b.f.Section(".debug_info"); s != nil {
		d.info = s
	} else if s := b.f.Section(".zdebug_info"); s != nil {
		d.info = s
	} else {
		return nil, nil
	}
	abbrevs, err := b.debugSection("abbrev")
	if err != nil {
		return nil, err
	}
	if abbrevs == nil {
		return nil, fmt.Errorf("%w: .debug_info without .debug_abbrev", errDWARF)
	}
	d.abbrevData = abbrevs
	return d, nil
}

// debugSection returns the decompressed bytes of .debug_<name> (SHF_COMPRESSED or the older
// .zdebug_<name>), or nil when there is none.
func (b *Binary) debugSection(name string) ([]byte, error) {
	for _, n := range []string{".debug_" + name, ".zdebug_" + name} {
		if s := b.f.Section(n); s != nil {
			r, err := b.openDebug(s)
			if err != nil {
				return nil, err
			}
			return readAllBounded(r, 1<<30)
		}
	}
	return nil, nil
}

func readAllBounded(r io.Reader, limit uint64) ([]byte, error) {
	if limit > 1<<30 {
		limit = 1 << 30
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(r, int64(limit))); err != nil {
		return nil, fmt.Errorf("%w: %v", errDWARF, err)
	}
	return buf.Bytes(), nil
}

// openDebug returns a reader of the section's decompressed bytes: debug/elf undoes both
// SHF_COMPRESSED (zlib or zstd) and the older .zdebug_ framing ("ZLIB", size, zlib stream).
func (b *Binary) openDebug(s *elf.Section) (r io.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("%w: section %s: %v", errDWARF, s.Name, p)
		}
	}()
	if s.Flags&elf.SHF_COMPRESSED == 0 && !strings.HasPrefix(s.Name, ".zdebug") &&
		(s.Offset > uint64(b.size) || s.Size > uint64(b.size)-s.Offset) {
		return nil, fmt.Errorf("%w: section %s runs past the end of the file", ErrTruncated, s.Name)
	}
	return s.Open(), nil
}

// unitAt returns the unit containing the section offset off, streaming (again) to keep it
// if it is not kept yet. Go keeps every type in one unit, so this rarely streams.
func (d *dwarfReader) unitAt(off uint64) (*dwarfUnit, error) {
	if u := d.kept(off); u != nil {
		return u, nil
	}
	if off < d.pos || d.complete {
		d.stream, d.pos, d.complete = nil, 0, false
	}
	for !d.complete {
		start := d.pos
		keep := false
		u, err := d.nextUnitIf(func(total uint64) bool {
			keep = off >= start && off-start < total
			return keep
		}, nil)
		if err != nil {
			return nil, err
		}
		if keep && u != nil {
			return u, nil
		}
	}
	return nil, fmt.Errorf("%w: reference to offset %#x outside .debug_info", errDWARF, off)
}

// kept returns the kept unit containing the section offset off.
func (d *dwarfReader) kept(off uint64) *dwarfUnit {
	for _, u := range d.units {
		if off >= u.off && off-u.off < uint64(len(u.data)) {
			return u
		}
	}
	return nil
}

// nextUnit reads the next unit header from the stream and keeps the unit when keep(name)
// says so (returning it), otherwise skips it (returning nil).
func (d *dwarfReader) nextUnit(keep func(name string) bool) (*dwarfUnit, error) {
	return d.nextUnitIf(nil, keep)
}

func (d *dwarfReader) nextUnitIf(keepLen func(total uint64) bool, keepName func(name string) bool) (*dwarfUnit, error) {
	if d.stream == nil {
		r, err := d.b.openDebug(d.info)
		if err != nil {
			return nil, err
		}
		d.stream = bufio.NewReaderSize(r, 64<<10)
		d.pos = 0
	}
	head, err := d.stream.Peek(4)
	if err == io.EOF && len(head) == 0 {
		d.complete, d.stream = true, nil
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading unit header at %#x: %v", errDWARF, d.pos, err)
	}
	length := uint64(binary.LittleEndian.Uint32(head))
	hdrLen := uint64(4)
	if length == 0xffffffff {
		head, err = d.stream.Peek(12)
		if err != nil {
			return nil, fmt.Errorf("%w: reading unit header at %#x: %v", errDWARF, d.pos, err)
		}
		length = binary.LittleEndian.Uint64(head[4:])
		hdrLen = 12
	} else if length >= 0xfffffff0 {
		return nil, fmt.Errorf("%w: reserved unit length at %#x", errDWARF, d.pos)
	}
	if length > 1<<40 || (d.info.Size > 0 && length > d.info.Size) {
		return nil, fmt.Errorf("%w: unit at %#x claims %d bytes", errDWARF, d.pos, length)
	}
	total := hdrLen + length
	start := d.pos
	if u := d.kept(start); u != nil {
		// Kept on an earlier pass over the stream.
		if _, err := d.stream.Discard(int(total)); err != nil {
			return nil, fmt.Errorf("%w: skipping unit at %#x: %v", errDWARF, start, err)
		}
		d.pos += total
		return u, nil
	}
	keep := false
	if keepLen != nil {
		keep = keepLen(total)
	}
	if !keep && keepName != nil {
		// Parse the header and the unit DIE's name from a peek.
		n := int(min(total, uint64(d.stream.Size())))
		peek, err := d.stream.Peek(n)
		if err != nil && len(peek) < n {
			return nil, fmt.Errorf("%w: unit at %#x: %v", errDWARF, start, err)
		}
		u, err := d.parseUnitHeader(start, peek)
		if err == nil {
			u.name, _ = d.unitName(u)
			keep = keepName(u.name)
		}
	}
	if !keep {
		if _, err := d.stream.Discard(int(total)); err != nil {
			return nil, fmt.Errorf("%w: skipping unit at %#x: %v", errDWARF, start, err)
		}
		d.pos += total
		return nil, nil
	}
	// Keep it: read the whole unit into a buffer of its size. A corrupt file could claim more
	// than it holds: deflate expands at most ~1032:1, so a claim beyond that ratio to the
	// section's size in the file only gets a small start and grows as data really arrives.
	var data []byte
	if limit := 1100*d.info.FileSize + 1<<20; total <= limit {
		data = make([]byte, total)
		if _, err := io.ReadFull(d.stream, data); err != nil {
			return nil, fmt.Errorf("%w: reading unit at %#x: %v", errDWARF, start, err)
		}
	} else {
		buf := bytes.NewBuffer(make([]byte, 0, 1<<20))
		if _, err := io.CopyN(buf, d.stream, int64(total)); err != nil {
			return nil, fmt.Errorf("%w: reading unit at %#x: %v", errDWARF, start, err)
		}
		data = buf.Bytes()
	}
	d.pos += total
	u, err := d.parseUnitHeader(start, data)
	if err != nil {
		return nil, err
	}
	u.name, _ = d.unitName(u)
	d.units = append(d.units, u)
	return u, nil
}

func (d *dwarfReader) parseUnitHeader(off uint64, data []byte) (*dwarfUnit, error) {
	u := &dwarfUnit{off: off, data: data, offSize: 4}
	r := dwarfBuf{data: data}
	l := r.u32()
	if l == 0xffffffff {
		r.u64()
		u.offSize = 8
	}
	u.version = int(r.u16())
	var abbrevOff uint64
	switch {
	case u.version >= 2 && u.version <= 4:
		abbrevOff = r.offset(u.offSize)
		u.addrSize = int(r.u8())
	case u.version == 5:
		unitType := r.u8()
		u.addrSize = int(r.u8())
		abbrevOff = r.offset(u.offSize)
		switch unitType {
		case 4, 5: // skeleton, split_compile: dwo_id
			r.u64()
		case 2, 6: // type, split_type: signature, type offset
			r.u64()
			r.offset(u.offSize)
		}
	default:
		return nil, fmt.Errorf("%w: unit at %#x has DWARF version %d", errDWARF, off, u.version)
	}
	if r.err || (u.addrSize != 4 && u.addrSize != 8) {
		return nil, fmt.Errorf("%w: bad unit header at %#x", errDWARF, off)
	}
	u.first = r.pos
	abbrevs, err := d.abbrevTable(abbrevOff)
	if err != nil {
		return nil, err
	}
	u.abbrevs = abbrevs
	return u, nil
}

func (d *dwarfReader) abbrevTable(off uint64) (map[uint64]*abbrev, error) {
	if t, ok := d.abbrevs[off]; ok {
		return t, nil
	}
	if off >= uint64(len(d.abbrevData)) {
		return nil, fmt.Errorf("%w: abbreviation table offset %#x past .debug_abbrev", errDWARF, off)
	}
	t := map[uint64]*abbrev{}
	r := dwarfBuf{data: d.abbrevData, pos: int(off)}
	for !r.err {
		code := r.uleb()
		if code == 0 {
			break
		}
		a := &abbrev{tag: r.uleb(), children: r.u8() != 0}
		for !r.err {
			attr, form := r.uleb(), r.uleb()
			if attr == 0 && form == 0 {
				break
			}
			at := abbrevAttr{attr: attr, form: form}
			if form == formImplicitConst {
				at.implicit = r.sleb()
			}
			a.attrs = append(a.attrs, at)
		}
		t[code] = a
	}
	if r.err {
		return nil, fmt.Errorf("%w: abbreviation table at %#x", errDWARF, off)
	}
	d.abbrevs[off] = t
	return t, nil
}

// unitName reads the DW_AT_name of the unit's first DIE (the package path for Go units).
func (d *dwarfReader) unitName(u *dwarfUnit) (string, error) {
	r := dwarfBuf{data: u.data, pos: u.first}
	a := u.abbrevs[r.uleb()]
	if a == nil || r.err {
		return "", errDWARF
	}
	for _, at := range a.attrs {
		v, ok := d.attr(&r, u, at)
		if !ok {
			return "", errDWARF
		}
		if at.attr == dwAtName {
			return string(v.str), nil
		}
	}
	return "", nil
}

// index walks the unit once and indexes its top-level struct types.
func (d *dwarfReader) index(u *dwarfUnit) error {
	if u.structs != nil {
		return nil
	}
	idx := map[string]uint64{}
	r := dwarfBuf{data: u.data, pos: u.first}
	depth := 0
	for r.pos < len(u.data) && !r.err {
		dieOff := u.off + uint64(r.pos)
		code := r.uleb()
		if code == 0 {
			depth--
			if depth < 0 {
				break
			}
			continue
		}
		a := u.abbrevs[code]
		if a == nil {
			return fmt.Errorf("%w: unknown abbreviation %d at %#x", errDWARF, code, dieOff)
		}
		var name []byte
		for _, at := range a.attrs {
			v, ok := d.attr(&r, u, at)
			if !ok {
				return fmt.Errorf("%w: attribute of DIE at %#x", errDWARF, dieOff)
			}
			if at.attr == dwAtName {
				name = v.str
			}
		}
		if a.tag == dwTagStructureType && depth == 1 && len(name) > 0 {
			n := string(name)
			if _, dup := idx[n]; !dup {
				idx[n] = dieOff
			}
			if i := strings.IndexByte(n, '['); i > 0 && !strings.Contains(n, "go.shape.") {
				if _, dup := idx[n[:i]]; !dup {
					idx[n[:i]] = dieOff
				}
			}
		}
		if a.children {
			depth++
		}
	}
	if r.err {
		return fmt.Errorf("%w: unit at %#x ends early", errDWARF, u.off)
	}
	u.structs = idx
	return nil
}
