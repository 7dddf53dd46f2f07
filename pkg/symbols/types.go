package symbols

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Itab is a static interface table of the binary: the pair (interface, concrete type) the
// linker laid out. An error value held in an interface points at one of these (or at one the
// runtime built on the fly, see ItabTypeName).
type Itab struct {
	// Addr is the itab's address as linked.
	Addr uint64
	// Interface is the interface's type name, e.g. "error".
	Interface string
	// Type is the concrete type's name as the runtime spells it (package name, not path),
	// e.g. "*errors.errorString" or "*errors.StatusError".
	Type string
}

// abi.Type on 64-bit targets (internal/abi/type.go, the same since Go 1.14 as runtime._type):
// Size_ uintptr; PtrBytes uintptr; Hash uint32; TFlag uint8; Align_, FieldAlign_, Kind_
// uint8; Equal func; GCData *byte; Str NameOff (int32); PtrToThis TypeOff (int32).
const (
	abiTypeSize     = 48
	abiTypeTFlagOff = 20
	abiTypeStrOff   = 40
	// tflagExtraStar: the name in Str has a leading '*' that is not part of the type's name
	// (the linker shares "*T"'s string with T).
	tflagExtraStar = 1 << 1
	// maxTypeName bounds a type name read from the file; generic instantiations of k8s types
	// reach a few KiB.
	maxTypeName = 1 << 16
)

// TypeName returns the name of the runtime type descriptor (abi.Type) at typeAddr, an
// address as linked, e.g. "*errors.errorString". It reads the name through the type's Str
// offset, relative to the start of the type data (moduledata.types).
func (b *Binary) TypeName(typeAddr uint64) (string, error) {
	md, err := b.modData()
	if err != nil {
		return "", err
	}
	if md.types == 0 {
		return "", fmt.Errorf("name type at %#x: %w: start of the type data not found", typeAddr, ErrUnsupportedGo)
	}
	if typeAddr < md.types || (md.etypes != 0 && typeAddr >= md.etypes) {
		return "", fmt.Errorf("name type at %#x: %w: not in the binary's type data [%#x, %#x) (a type made at run time by reflect, or a run-time address of a PIE without the load bias subtracted)", typeAddr, ErrNotMapped, md.types, md.etypes)
	}
	raw, err := b.readVA(typeAddr, abiTypeSize)
	if err != nil {
		return "", fmt.Errorf("name type at %#x: %w", typeAddr, err)
	}
	tflag := raw[abiTypeTFlagOff]
	str := int32(binary.LittleEndian.Uint32(raw[abiTypeStrOff:]))
	if str <= 0 {
		return "", fmt.Errorf("name type at %#x: %w: it has no name offset", typeAddr, ErrTruncated)
	}
	name, err := b.readName(md.types + uint64(str))
	if err != nil {
		return "", fmt.Errorf("name type at %#x: %w", typeAddr, err)
	}
	if tflag&tflagExtraStar != 0 && strings.HasPrefix(name, "*") {
		name = name[1:]
	}
	return name, nil
}

// readName decodes an abi.Name: one flags byte, a varint length, then the bytes (Go 1.17+).
func (b *Binary) readName(addr uint64) (string, error) {
	// Read the header and a short name in one go; longer names take a second read.
	var head []byte
	for _, n := range []uint64{64, 11, 2} {
		if h, err := b.readVA(addr, n); err == nil {
			head = h
			break
		}
	}
	if head == nil {
		return "", fmt.Errorf("%w: type name at %#x is outside the file", ErrTruncated, addr)
	}
	l, n := binary.Uvarint(head[1:])
	if n <= 0 || l > maxTypeName {
		return "", fmt.Errorf("%w: malformed type name at %#x", ErrTruncated, addr)
	}
	start := 1 + uint64(n)
	if start+l <= uint64(len(head)) {
		return string(head[start : start+l]), nil
	}
	data, err := b.readVA(addr+start, l)
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// Itabs returns the static itabs of the binary: itab address -> concrete type name, e.g.
// 0x4d2e18 -> "*errors.errorString". It holds the itabs of every interface, `error` among
// them; ItabList says which interface each belongs to. The map is the caller's.
func (b *Binary) Itabs() (map[uint64]string, error) {
	list, err := b.itabList()
	if err != nil {
		return nil, err
	}
	m := make(map[uint64]string, len(list))
	for _, it := range list {
		m[it.Addr] = it.Type
	}
	return m, nil
}

// ErrorItabs returns the static itabs of the `error` interface, as Itabs does: what naming an
// error's type takes for as long as the executable is traced. Unlike Itabs it is kept across
// Release, and read again after it from nothing but this map (for an unstripped binary
// ItabList is found through the whole symbol table). A big binary has some 6 000 itabs, 270
// of them `error`'s. The map is the caller's.
func (b *Binary) ErrorItabs() (map[uint64]string, error) {
	m, err := b.itabNames()
	if err != nil {
		return nil, err
	}
	return maps.Clone(m), nil
}

func (b *Binary) readErrorItabs() (map[uint64]string, error) {
	list, err := b.itabList()
	if err != nil {
		return nil, err
	}
	m := map[uint64]string{}
	for _, it := range list {
		if it.Interface == "error" {
			m[it.Addr] = it.Type
		}
	}
	return m, nil
}

// ItabList returns the static itabs in address order, with their interface names.
func (b *Binary) ItabList() ([]Itab, error) {
	list, err := b.itabList()
	if err != nil {
		return nil, err
	}
	return append([]Itab(nil), list...), nil
}

// ItabTypeName names the concrete type behind an itab pointer read from a running process,
// including itabs the runtime created at run time (not in the file): it reads the itab's
// _type field from the process memory mem (e.g. /proc/PID/mem, opened by the caller) at
// itab, subtracts bias (the load bias of a PIE, 0 otherwise), and names that type.
func (b *Binary) ItabTypeName(mem io.ReaderAt, bias, itab uint64) (string, error) {
	var buf [16]byte // abi.ITab: Inter *InterfaceType; Type *Type; ...
	if _, err := mem.ReadAt(buf[:], int64(itab)); err != nil {
		return "", fmt.Errorf("read itab at %#x: %w", itab, err)
	}
	typ := binary.LittleEndian.Uint64(buf[8:])
	if typ == 0 {
		return "", fmt.Errorf("read itab at %#x: it has no type", itab)
	}
	if typ < bias {
		return "", fmt.Errorf("read itab at %#x: %w: type pointer %#x is below the load bias %#x", itab, ErrNotMapped, typ, bias)
	}
	return b.TypeName(typ - bias)
}

// readItabs lists the itab addresses (go:itab.* symbols when there is a symbol table, else
// the .itablink section or moduledata.itablinks) and names each from its type descriptors,
// so a stripped binary and its unstripped twin give the same answer.
func (b *Binary) readItabs() ([]Itab, error) {
	addrs, err := fromSymtab(b, func(st *symtab) []uint64 {
		var addrs []uint64
		st.eachNamed(func(name []byte, s sym) bool {
			if (bytes.HasPrefix(name, []byte("go:itab.")) || bytes.HasPrefix(name, []byte("go.itab."))) && s.shndx != uint16(elf.SHN_UNDEF) {
				addrs = append(addrs, s.value)
			}
			return true
		})
		return addrs
	}, b.itablinks)
	if err != nil {
		return nil, err
	}
	list := make([]Itab, 0, len(addrs))
	for _, a := range addrs {
		inter, err1 := b.readPtr(a)
		typ, err2 := b.readPtr(a + 8)
		if err1 != nil || err2 != nil {
			continue
		}
		iname, err1 := b.TypeName(inter)
		tname, err2 := b.TypeName(typ)
		if err1 != nil || err2 != nil {
			continue
		}
		list = append(list, Itab{Addr: a, Interface: iname, Type: tname})
	}
	sortItabs(list)
	return list, nil
}

func sortItabs(list []Itab) {
	slices.SortFunc(list, func(a, b Itab) int { return cmp.Compare(a.Addr, b.Addr) })
}

// itablinks reads the itab pointer array of a stripped binary.
func (b *Binary) itablinks() ([]uint64, error) {
	var start, n uint64
	for _, name := range []string{".itablink", ".data.rel.ro.itablink"} {
		if s := b.f.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			start, n = s.Addr, s.Size/8
			break
		}
	}
	if n == 0 {
		md, err := b.modData()
		if err != nil {
			return nil, err
		}
		if md.itabs != 0 {
			return b.itabRegion(md.itabs, md.itabsEnd)
		}
		start, n = md.itablinks, md.nitabs
	}
	if n == 0 {
		return nil, nil
	}
	if n > uint64(b.size)/8 {
		return nil, fmt.Errorf("%w: itab list of %d entries", ErrTruncated, n)
	}
	out := make([]uint64, 0, n)
	for i := uint64(0); i < n; i++ {
		p, err := b.readPtr(start + 8*i)
		if err != nil {
			return nil, err
		}
		if p != 0 {
			out = append(out, p)
		}
	}
	return out, nil
}

// abi.ITab on 64-bit targets: Inter *InterfaceType; Type *Type; Hash uint32; Fun [1]uintptr
// (variable sized: one word per method of the interface, one when Fun[0] is 0). The
// interface's method count is the length of abi.InterfaceType.Methods, after the embedded
// abi.Type and PkgPath.
const (
	abiITabSize          = 32
	abiInterMethodsLenAt = abiTypeSize + 8 + 8
)

// itabRegion lists the itabs laid out one after another in [start, end) (Go 1.27+).
func (b *Binary) itabRegion(start, end uint64) ([]uint64, error) {
	if end-start > uint64(b.size) {
		return nil, fmt.Errorf("%w: itab region of %d bytes", ErrTruncated, end-start)
	}
	var out []uint64
	for p := start; p+abiITabSize <= end; {
		inter, err := b.readPtr(p)
		if err != nil {
			return nil, err
		}
		fun0, err := b.readPtr(p + 24)
		if err != nil {
			return nil, err
		}
		size := uint64(abiITabSize)
		if fun0 != 0 {
			n, err := b.readPtr(inter + abiInterMethodsLenAt)
			if err != nil {
				return nil, fmt.Errorf("itab at %#x: interface: %w", p, err)
			}
			if n == 0 || n > 1<<16 {
				return nil, fmt.Errorf("%w: itab at %#x: interface of %d methods", ErrTruncated, p, n)
			}
			size += (n - 1) * 8
		}
		out = append(out, p)
		p += size
	}
	return out, nil
}

// abi.InterfaceType: abi.Type, PkgPath Name (one pointer), Methods []Imethod; abi.Imethod:
// Name NameOff, Typ TypeOff (int32 each, relative to the type data). abi.FuncType: abi.Type,
// InCount, OutCount uint16 (OutCount's top bit: variadic), then (after the UncommonType when
// the type has one) InCount+OutCount *Type.
const (
	abiInterMethodsAt = abiTypeSize + 8
	abiFuncInCountAt  = abiTypeSize
	abiFuncParamsAt   = abiTypeSize + 8
	abiUncommonSize   = 16
	tflagUncommon     = 1 << 0
)

// MethodResultSize returns the size in bytes of the type of result out of method method
// of the binary's interfaces that have it, when that result's type is named typeName: e.g.
// ("Reconcile", 0, "reconcile.Result") gives the size of controller-runtime's reconcile.Result
// from the interface type of any reconciler the program converts to an interface (its static
// itabs name the interfaces). It reads the type descriptors, present in stripped binaries
// too. ok is false when no such method is found or the interfaces disagree.
func (b *Binary) MethodResultSize(method string, out int, typeName string) (size uint64, ok bool, err error) {
	md, err := b.modData()
	if err != nil {
		return 0, false, err
	}
	list, err := b.itabList()
	if err != nil {
		return 0, false, err
	}
	seen := map[uint64]bool{}
	sizes := map[uint64]bool{}
	for _, it := range list {
		inter, err := b.readPtr(it.Addr)
		if err != nil || seen[inter] {
			continue
		}
		seen[inter] = true
		mptr, err1 := b.readPtr(inter + abiInterMethodsAt)
		mlen, err2 := b.readPtr(inter + abiInterMethodsAt + 8)
		if err1 != nil || err2 != nil || mlen > 1<<12 {
			continue
		}
		for i := uint64(0); i < mlen; i++ {
			raw, err := b.readVA(mptr+8*i, 8)
			if err != nil {
				break
			}
			nameOff := int32(binary.LittleEndian.Uint32(raw))
			typOff := int32(binary.LittleEndian.Uint32(raw[4:]))
			if nameOff <= 0 || typOff <= 0 {
				continue
			}
			if name, err := b.readName(md.types + uint64(nameOff)); err != nil || name != method {
				continue
			}
			s, found := b.funcResultSize(md.types+uint64(typOff), out, typeName)
			if found {
				sizes[s] = true
			}
		}
	}
	if len(sizes) != 1 {
		return 0, false, nil
	}
	for s := range sizes {
		size = s
	}
	return size, true, nil
}

// funcResultSize reads result out of the abi.FuncType at ft: its size when its type is
// named typeName.
func (b *Binary) funcResultSize(ft uint64, out int, typeName string) (uint64, bool) {
	raw, err := b.readVA(ft, abiFuncParamsAt)
	if err != nil {
		return 0, false
	}
	in := uint64(binary.LittleEndian.Uint16(raw[abiFuncInCountAt:]))
	outs := int(binary.LittleEndian.Uint16(raw[abiFuncInCountAt+2:]) & 0x7fff)
	if out >= outs {
		return 0, false
	}
	params := ft + abiFuncParamsAt
	if raw[abiTypeTFlagOff]&tflagUncommon != 0 {
		params += abiUncommonSize
	}
	typ, err := b.readPtr(params + 8*(in+uint64(out)))
	if err != nil {
		return 0, false
	}
	if name, err := b.TypeName(typ); err != nil || name != typeName {
		return 0, false
	}
	size, err := b.readPtr(typ) // abi.Type.Size_
	if err != nil {
		return 0, false
	}
	return size, true
}
