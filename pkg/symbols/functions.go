package symbols

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Function is one function of the binary. Entry and End are virtual addresses as linked
// (add the load bias for a running PIE); End is exclusive and excludes the alignment padding
// before the next function.
type Function struct {
	Name       string
	Entry, End uint64
}

// Size returns the size of the function's code in bytes.
func (f Function) Size() uint64 { return f.End - f.Entry }

// Functions returns every function, sorted by entry address. Unstripped binaries list the
// function symbols of .symtab (Go functions, assembly functions with their ".abi0" suffix,
// and in cgo binaries the C functions too); stripped binaries list the Go functions of
// .gopclntab, whose bounds are the same. The slice and its names are copies the caller may
// keep or modify. Each name is read from the file: EachFunction scans them without keeping
// them.
func (b *Binary) Functions() ([]Function, error) {
	t, err := b.functions()
	if err != nil {
		return nil, err
	}
	out := make([]Function, len(t.funcs))
	for i := range out {
		out[i] = t.function(i)
	}
	return out, nil
}

// EachFunction calls yield for every function of Functions, in address order, until yield
// returns false. The name is in a buffer reused for the next call: yield converts it
// (string(name)) to keep it. The binary keeps only the functions' bounds (24 bytes a
// function); the names are read from the file as the scan goes, so a scan costs no memory
// for them (kube-controller-manager's are 13 MiB).
func (b *Binary) EachFunction(yield func(entry, end uint64, name []byte) bool) error {
	t, err := b.functions()
	if err != nil {
		return err
	}
	t.each(func(i int, name []byte) bool {
		return yield(t.funcs[i].entry, t.funcs[i].end, name)
	})
	return nil
}

// FunctionAt returns the function whose code holds addr (an address as linked).
func (b *Binary) FunctionAt(addr uint64) (Function, bool) {
	t, err := b.functions()
	if err != nil {
		return Function{}, false
	}
	return b.funcAt(t, addr)
}

// Lookup returns the function with exactly this name, such as
// "k8s.io/client-go/rest.(*Request).Do". Assembly functions are found with or without
// their ".abi0" suffix, which .symtab has and .gopclntab lacks. The first lookup indexes the
// names by their hash (8 bytes a function).
func (b *Binary) Lookup(name string) (Function, error) {
	t, err := b.functions()
	if err != nil {
		return Function{}, err
	}
	alt := name + ".abi0"
	if strings.HasSuffix(name, ".abi0") {
		alt = strings.TrimSuffix(name, ".abi0")
	}
	// The names as stored: .symtab's have the suffix, .gopclntab's have it added, so a
	// function named name or alt is stored as one of the two (never both).
	ids := append(t.withStoredName(name), t.withStoredName(alt)...)
	slices.Sort(ids)
	found := -1
	var buf []byte
	for _, i := range ids {
		buf = t.appendName(buf[:0], i)
		if string(buf) == name {
			return t.function(i), nil
		}
		if found < 0 && string(buf) == alt {
			found = i
		}
	}
	if found >= 0 {
		return t.function(found), nil
	}
	return Function{}, fmt.Errorf("look up function %s in %s: %w (is its package linked into this program? it may also have been inlined everywhere or removed as dead code)", name, b.name(), ErrSymbolNotFound)
}

// Match returns every function whose name matches re, in address order, for example all
// instantiations of a generic method:
//
//	regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.\(\*Controller\[.*\]\)\.Reconcile$`)
//
// It returns an error wrapping ErrSymbolNotFound when nothing matches.
func (b *Binary) Match(re *regexp.Regexp) ([]Function, error) {
	t, err := b.functions()
	if err != nil {
		return nil, err
	}
	lit, _ := re.LiteralPrefix()
	var out []Function
	t.each(func(i int, name []byte) bool {
		if lit != "" && !bytes.Contains(name, []byte(lit)) {
			return true
		}
		if re.Match(name) {
			out = append(out, Function{Name: string(name), Entry: t.funcs[i].entry, End: t.funcs[i].end})
		}
		return true
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("match functions %q in %s: %w", re.String(), b.name(), ErrSymbolNotFound)
	}
	return out, nil
}

// funcAt returns the function containing addr, with a name of its own.
func (b *Binary) funcAt(t *funcTable, addr uint64) (Function, bool) {
	if t == nil {
		return Function{}, false
	}
	if i, ok := t.at(addr); ok {
		return t.function(i), true
	}
	return Function{}, false
}

func (b *Binary) readFunctions() (*funcTable, error) {
	st, err := b.symtab()
	if err != nil {
		return nil, err
	}
	if st != nil {
		if t := st.functions(); len(t.funcs) > 0 {
			var x, y []byte
			cmp := func(a, c funcEntry) int {
				switch {
				case a.entry < c.entry:
					return -1
				case a.entry > c.entry:
					return 1
				}
				x, _ = t.names.appendName(x[:0], a.name)
				y, _ = t.names.appendName(y[:0], c.name)
				return bytes.Compare(x, y)
			}
			if !slices.IsSortedFunc(t.funcs, cmp) {
				slices.SortFunc(t.funcs, cmp)
			}
			return t, nil
		}
	}
	return b.pclnFunctions()
}

// fromSymtab returns what read finds in the symbol table or, when the binary has none (it was
// stripped) or read finds nothing there, what fallback reads from the Go runtime's own tables.
func fromSymtab[T any](b *Binary, read func(*symtab) []T, fallback func() ([]T, error)) ([]T, error) {
	st, err := b.symtab()
	if err != nil {
		return nil, err
	}
	var out []T
	if st != nil {
		out = read(st)
	}
	if len(out) == 0 {
		return fallback()
	}
	return out, nil
}

// symtab is .symtab read through a block cache, with its string table: neither is held
// whole (kube-controller-manager's are 4 and 13 MiB).
type symtab struct {
	mu    sync.Mutex
	syms  *blockReader // Elf64_Sym entries, 24 bytes each
	n     int
	names *nameRegion
}

const symSize = 24

func (b *Binary) readSymtab() (*symtab, error) {
	s := b.f.Section(".symtab")
	if s == nil {
		return nil, nil
	}
	if s.Type != elf.SHT_SYMTAB || s.Link == 0 || int(s.Link) >= len(b.f.Sections) {
		return nil, fmt.Errorf("%w: malformed .symtab section", ErrTruncated)
	}
	strs := b.f.Sections[s.Link]
	for _, sec := range []*elf.Section{s, strs} {
		if sec.Type == elf.SHT_NOBITS || sec.Offset > uint64(b.size) || sec.Size > uint64(b.size)-sec.Offset {
			return nil, fmt.Errorf("%w: section %s claims %d bytes at file offset %#x, past the end of the file", ErrTruncated, sec.Name, sec.Size, sec.Offset)
		}
	}
	return &symtab{
		syms:  newBlockReader(b.r, int64(s.Offset), int64(s.Size)),
		n:     int(s.Size / symSize),
		names: newNameRegion(b, strs.Offset, strs.Size),
	}, nil
}

// sym is one Elf64_Sym: its name's offset in .strtab, type, section and value.
type sym struct {
	name        uint32
	info        byte
	shndx       uint16
	value, size uint64
}

// each calls fn for every symbol until fn returns false. fn must not call each.
func (st *symtab) each(fn func(s sym) bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	le := binary.LittleEndian
	for i := 1; i < st.n; i++ {
		e, ok := st.syms.at(uint64(i*symSize), symSize)
		if !ok {
			return
		}
		if !fn(sym{le.Uint32(e), e[4], le.Uint16(e[6:]), le.Uint64(e[8:]), le.Uint64(e[16:])}) {
			return
		}
	}
}

// eachNamed is each with every symbol's name, in a buffer reused for the next call.
func (st *symtab) eachNamed(fn func(name []byte, s sym) bool) {
	var buf []byte
	st.each(func(s sym) bool {
		buf, _ = st.names.appendName(buf[:0], s.name)
		return fn(buf, s)
	})
}

func (st *symtab) functions() *funcTable {
	isFunc := func(s sym) bool {
		return elf.SymType(s.info&0xf) == elf.STT_FUNC && s.shndx != uint16(elf.SHN_UNDEF) && s.shndx < uint16(elf.SHN_LORESERVE) && s.size > 0
	}
	// Counted first: a slice grown by appends would allocate twice its size on the way.
	n := 0
	st.each(func(s sym) bool {
		if isFunc(s) {
			n++
		}
		return true
	})
	t := &funcTable{funcs: make([]funcEntry, 0, n), names: st.names}
	var buf []byte
	st.each(func(s sym) bool {
		if !isFunc(s) {
			return true
		}
		if buf, _ = st.names.appendName(buf[:0], s.name); len(buf) == 0 {
			return true
		}
		t.funcs = append(t.funcs, funcEntry{entry: s.value, end: s.value + s.size, name: s.name})
		return true
	})
	return t
}

func (st *symtab) lookup(name string) (uint64, bool) {
	var v uint64
	found := false
	st.eachNamed(func(n []byte, s sym) bool {
		if string(n) == name && s.shndx != uint16(elf.SHN_UNDEF) {
			v, found = s.value, true
			return false
		}
		return true
	})
	return v, found
}
