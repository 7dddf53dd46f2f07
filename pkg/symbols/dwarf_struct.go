package symbols

// Struct types in the runtime unit: a DIE decoded, a struct's members, and a field's offset
// along a dotted path through embedded and named fields.

import (
	"fmt"
	"strings"
)

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
