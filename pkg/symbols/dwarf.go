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

// This file answers "at which offset is field F of struct T" from .debug_info without
// decoding all of it. The Go linker puts every type DIE into the compile unit named
// "runtime" (cmd/link/internal/ld/dwarf.go: movetomodule), so the reader streams the
// (usually compressed) section unit by unit, skips every unit but that one, keeps it in
// memory with an index of its struct types, and stops there. debug/dwarf would need the
// whole decompressed section and a full decode for the same answer.

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

// die is one decoded DIE: the attributes the field-offset walk needs.
type die struct {
	off      uint64
	tag      uint64
	children bool
	name     string
	typ      uint64 // section offset of DW_AT_type, 0 if none
	loc      uint64
	hasLoc   bool
	embedded bool
	next     int // position in the unit after this DIE's attributes
}

func (d *dwarfReader) readDIE(u *dwarfUnit, pos int) (die, error) {
	r := dwarfBuf{data: u.data, pos: pos}
	e := die{off: u.off + uint64(pos)}
	code := r.uleb()
	if code == 0 || r.err {
		return die{off: e.off, next: r.pos}, nil // null entry: end of siblings
	}
	a := u.abbrevs[code]
	if a == nil {
		return e, fmt.Errorf("%w: unknown abbreviation %d at %#x", errDWARF, code, e.off)
	}
	e.tag, e.children = a.tag, a.children
	for _, at := range a.attrs {
		v, ok := d.attr(&r, u, at)
		if !ok {
			return e, fmt.Errorf("%w: attribute of DIE at %#x", errDWARF, e.off)
		}
		switch at.attr {
		case dwAtName:
			e.name = string(v.str)
		case dwAtType:
			e.typ = v.ref
		case dwAtDataMemberLocation:
			if v.isBlock {
				// DW_OP_plus_uconst n (older DWARF)
				b := dwarfBuf{data: v.str}
				if b.u8() == dwOpPlusUconst {
					e.loc, e.hasLoc = b.uleb(), !b.err
				}
			} else {
				e.loc, e.hasLoc = v.u, true
			}
		case dwAtGoEmbeddedField:
			e.embedded = v.u != 0
		}
	}
	e.next = r.pos
	return e, nil
}

// members returns the member DIEs of the struct DIE at off.
func (d *dwarfReader) members(off uint64) ([]die, string, error) {
	u, err := d.unitAt(off)
	if err != nil {
		return nil, "", err
	}
	s, err := d.readDIE(u, int(off-u.off))
	if err != nil {
		return nil, "", err
	}
	if s.tag != dwTagStructureType {
		return nil, s.name, fmt.Errorf("%s is not a struct", s.name)
	}
	if !s.children {
		return nil, s.name, nil
	}
	var out []die
	pos := s.next
	depth := 1
	for depth > 0 {
		c, err := d.readDIE(u, pos)
		if err != nil {
			return nil, s.name, err
		}
		if c.next <= pos {
			return nil, s.name, fmt.Errorf("%w: struct %s runs past its unit", errDWARF, s.name)
		}
		pos = c.next
		switch {
		case c.tag == 0:
			depth--
		case depth == 1 && c.tag == dwTagMember:
			out = append(out, c)
		}
		if c.tag != 0 && c.children {
			depth++
		}
	}
	return out, s.name, nil
}

// structOf follows typedefs from the type DIE at off to a struct; ok is false for any other
// type (a pointer, a map, ...): a field path cannot go through those.
func (d *dwarfReader) structOf(off uint64) (uint64, bool, error) {
	for i := 0; i < 8 && off != 0; i++ {
		u, err := d.unitAt(off)
		if err != nil {
			return 0, false, err
		}
		t, err := d.readDIE(u, int(off-u.off))
		if err != nil {
			return 0, false, err
		}
		switch t.tag {
		case dwTagStructureType:
			return off, true, nil
		case dwTagTypedef:
			off = t.typ
		default:
			return 0, false, nil
		}
	}
	return 0, false, nil
}

// fieldOffset resolves a dotted field path in the struct type typeName. found is false when
// the DWARF has no such type.
func (d *dwarfReader) fieldOffset(typeName, path string) (off uint64, found bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			off, found, err = 0, false, fmt.Errorf("%w: %v", errDWARF, p)
		}
	}()
	u, dieOff, err := d.findStructIndexed(typeName)
	if err != nil || u == nil {
		return 0, false, err
	}
	total, err := d.resolvePath(dieOff, strings.Split(path, "."), 0)
	if err != nil {
		return 0, true, err
	}
	return total, true, nil
}

func (d *dwarfReader) findStructIndexed(typeName string) (*dwarfUnit, uint64, error) {
	for _, u := range d.units {
		if err := d.index(u); err != nil {
			return nil, 0, err
		}
		if off, ok := u.structs[typeName]; ok {
			return u, off, nil
		}
	}
	pkg := TypePackage(typeName)
	for !d.complete {
		u, err := d.nextUnit(func(n string) bool { return n == "runtime" || n == pkg })
		if err != nil {
			return nil, 0, err
		}
		if u == nil {
			continue
		}
		if err := d.index(u); err != nil {
			return nil, 0, err
		}
		if off, ok := u.structs[typeName]; ok {
			return u, off, nil
		}
	}
	return nil, 0, nil
}

// resolvePath adds up member offsets along path, looking through embedded fields for
// promoted ones.
func (d *dwarfReader) resolvePath(structOff uint64, path []string, depth int) (uint64, error) {
	if depth > 8 {
		return 0, fmt.Errorf("field path too deep")
	}
	members, sname, err := d.members(structOff)
	if err != nil {
		return 0, err
	}
	var m *die
	for i := range members {
		if members[i].name == path[0] {
			m = &members[i]
			break
		}
	}
	if m == nil {
		// A promoted field: look inside embedded struct fields.
		for i := range members {
			e := members[i]
			if !e.embedded || !e.hasLoc {
				continue
			}
			inner, ok, err := d.structOf(e.typ)
			if err != nil || !ok {
				continue
			}
			if off, err := d.resolvePath(inner, path, depth+1); err == nil {
				return e.loc + off, nil
			}
		}
		return 0, fmt.Errorf("struct %s has no field %s", sname, path[0])
	}
	if !m.hasLoc {
		return 0, fmt.Errorf("field %s of %s has no location", path[0], sname)
	}
	if len(path) == 1 {
		return m.loc, nil
	}
	inner, ok, err := d.structOf(m.typ)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("field %s of %s is not a struct (a path cannot go through pointers)", path[0], sname)
	}
	rest, err := d.resolvePath(inner, path[1:], depth+1)
	if err != nil {
		return 0, err
	}
	return m.loc + rest, nil
}

// TypePackage returns the package path of a Go type name: "k8s.io/client-go/rest" for
// "k8s.io/client-go/rest.Request", "runtime" for "runtime.g"; type arguments and pointer
// stars aside.
func TypePackage(name string) string {
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	name = strings.TrimLeft(name, "*")
	slash := strings.LastIndexByte(name, '/')
	if dot := strings.IndexByte(name[slash+1:], '.'); dot >= 0 {
		return name[:slash+1+dot]
	}
	return name
}

// DWARF forms (DWARF 5, 7.5.6).
const (
	formAddr          = 0x01
	formBlock2        = 0x03
	formBlock4        = 0x04
	formData2         = 0x05
	formData4         = 0x06
	formData8         = 0x07
	formString        = 0x08
	formBlock         = 0x09
	formBlock1        = 0x0a
	formData1         = 0x0b
	formFlag          = 0x0c
	formSdata         = 0x0d
	formStrp          = 0x0e
	formUdata         = 0x0f
	formRefAddr       = 0x10
	formRef1          = 0x11
	formRef2          = 0x12
	formRef4          = 0x13
	formRef8          = 0x14
	formRefUdata      = 0x15
	formIndirect      = 0x16
	formSecOffset     = 0x17
	formExprloc       = 0x18
	formFlagPresent   = 0x19
	formStrx          = 0x1a
	formAddrx         = 0x1b
	formRefSup4       = 0x1c
	formStrpSup       = 0x1d
	formData16        = 0x1e
	formLineStrp      = 0x1f
	formRefSig8       = 0x20
	formImplicitConst = 0x21
	formLoclistx      = 0x22
	formRnglistx      = 0x23
	formRefSup8       = 0x24
	formStrx1         = 0x25
	formStrx2         = 0x26
	formStrx3         = 0x27
	formStrx4         = 0x28
	formAddrx1        = 0x29
	formAddrx2        = 0x2a
	formAddrx3        = 0x2b
	formAddrx4        = 0x2c
	formGNUAddrIndex  = 0x1f01
	formGNUStrIndex   = 0x1f02
	formGNURefAlt     = 0x1f20
	formGNUStrpAlt    = 0x1f21
)

// attrValue is a decoded attribute: u for constants and flags, ref for references
// (section offsets), str for strings and blocks.
type attrValue struct {
	u       uint64
	ref     uint64
	str     []byte
	isBlock bool
}

// attr decodes (or skips) one attribute value.
func (d *dwarfReader) attr(r *dwarfBuf, u *dwarfUnit, at abbrevAttr) (attrValue, bool) {
	var v attrValue
	form := at.form
	for i := 0; form == formIndirect && i < 4; i++ {
		form = r.uleb()
	}
	switch form {
	case formAddr:
		v.u = r.sized(u.addrSize)
	case formData1, formRef1, formFlag, formStrx1, formAddrx1:
		v.u = uint64(r.u8())
	case formData2, formRef2, formStrx2, formAddrx2:
		v.u = uint64(r.u16())
	case formStrx3, formAddrx3:
		v.u = r.sized(3)
	case formData4, formRef4, formRefSup4, formStrx4, formAddrx4:
		v.u = uint64(r.u32())
	case formData8, formRef8, formRefSig8, formRefSup8:
		v.u = r.u64()
	case formData16:
		r.skip(16)
	case formSdata:
		v.u = uint64(r.sleb())
	case formUdata, formRefUdata, formStrx, formAddrx, formLoclistx, formRnglistx, formGNUAddrIndex, formGNUStrIndex:
		v.u = r.uleb()
	case formString:
		v.str = r.cstring()
	case formStrp, formLineStrp, formStrpSup, formGNUStrpAlt:
		off := r.offset(u.offSize)
		if form == formStrp && at.attr == dwAtName {
			v.str = d.debugStr(off)
		}
	case formRefAddr:
		if u.version <= 2 {
			v.u = r.sized(u.addrSize)
		} else {
			v.u = r.offset(u.offSize)
		}
		v.ref = v.u
	case formSecOffset, formGNURefAlt:
		v.u = r.offset(u.offSize)
	case formBlock1:
		v.str, v.isBlock = r.bytes(uint64(r.u8())), true
	case formBlock2:
		v.str, v.isBlock = r.bytes(uint64(r.u16())), true
	case formBlock4:
		v.str, v.isBlock = r.bytes(uint64(r.u32())), true
	case formBlock, formExprloc:
		v.str, v.isBlock = r.bytes(r.uleb()), true
	case formFlagPresent:
		v.u = 1
	case formImplicitConst:
		v.u = uint64(at.implicit)
	default:
		return v, false
	}
	switch form {
	case formRef1, formRef2, formRef4, formRef8, formRefUdata:
		v.ref = u.off + v.u // unit-relative
	}
	return v, !r.err
}

// debugStr returns the NUL-terminated string at off in .debug_str (read on first use; Go's
// linker writes names inline, C compilers use .debug_str).
func (d *dwarfReader) debugStr(off uint64) []byte {
	if d.str == nil {
		s, err := d.b.debugSection("str")
		if err != nil || s == nil {
			s = []byte{}
		}
		d.str = s
	}
	if off >= uint64(len(d.str)) {
		return nil
	}
	s := d.str[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// dwarfBuf is a little-endian cursor that records overruns instead of panicking.
type dwarfBuf struct {
	data []byte
	pos  int
	err  bool
}

func (r *dwarfBuf) need(n uint64) bool {
	if r.err || n > uint64(len(r.data)-r.pos) {
		r.err = true
		return false
	}
	return true
}

func (r *dwarfBuf) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.data[r.pos]
	r.pos++
	return v
}

func (r *dwarfBuf) u16() uint16 { return fixed(r, 2, binary.LittleEndian.Uint16) }
func (r *dwarfBuf) u32() uint32 { return fixed(r, 4, binary.LittleEndian.Uint32) }
func (r *dwarfBuf) u64() uint64 { return fixed(r, 8, binary.LittleEndian.Uint64) }

// fixed reads an n-byte little-endian integer with get; 0 when the data is short.
func fixed[T uint16 | uint32 | uint64](r *dwarfBuf, n int, get func([]byte) T) T {
	if !r.need(uint64(n)) {
		return 0
	}
	v := get(r.data[r.pos:])
	r.pos += n
	return v
}

func (r *dwarfBuf) sized(n int) uint64 {
	if !r.need(uint64(n)) {
		return 0
	}
	var v uint64
	for i := 0; i < n; i++ {
		v |= uint64(r.data[r.pos+i]) << (8 * i)
	}
	r.pos += n
	return v
}

func (r *dwarfBuf) offset(size int) uint64 {
	if size == 8 {
		return r.u64()
	}
	return uint64(r.u32())
}

func (r *dwarfBuf) skip(n uint64) {
	if r.need(n) {
		r.pos += int(n)
	}
}

func (r *dwarfBuf) bytes(n uint64) []byte {
	if !r.need(n) {
		return nil
	}
	b := r.data[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

func (r *dwarfBuf) cstring() []byte {
	if r.err {
		return nil
	}
	i := bytes.IndexByte(r.data[r.pos:], 0)
	if i < 0 {
		r.err = true
		return nil
	}
	s := r.data[r.pos : r.pos+i]
	r.pos += i + 1
	return s
}

func (r *dwarfBuf) uleb() uint64 {
	v, _, _ := r.leb128()
	return v
}

func (r *dwarfBuf) sleb() int64 {
	v, width, last := r.leb128()
	if width < 64 && last&0x40 != 0 {
		v |= ^uint64(0) << width // sign-extend
	}
	return int64(v)
}

// leb128 reads the bits of a LEB128 number: the value, how many bits it had, and its last
// byte (whose 0x40 bit is the sign of a signed one); zeros when the data is short.
func (r *dwarfBuf) leb128() (v uint64, width uint, last byte) {
	for {
		if !r.need(1) {
			return 0, 0, 0
		}
		c := r.data[r.pos]
		r.pos++
		if width < 64 {
			v |= uint64(c&0x7f) << width
		}
		width += 7
		if c < 0x80 {
			return v, width, c
		}
	}
}
