package symbols

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
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
// keep or modify: keeping a few of them does not keep the binary's whole symbol table alive.
func (b *Binary) Functions() ([]Function, error) {
	funcs, err := b.functions()
	if err != nil {
		return nil, err
	}
	out := slices.Clone(funcs)
	for i := range out {
		out[i].Name = strings.Clone(out[i].Name)
	}
	return out, nil
}

// FunctionTable returns every function, as Functions does, without copying them: the slice
// and its names share the binary's tables (for kube-controller-manager, 150 000 functions
// whose copies would cost 18 MiB more while a plan is made). The caller must not modify it,
// and should copy (strings.Clone) the name of a Function it keeps, so that keeping it does
// not keep the tables alive after Release.
func (b *Binary) FunctionTable() ([]Function, error) {
	return b.functions()
}

// detach returns f with a name that does not share memory with the symbol table.
func detach(f Function) Function {
	f.Name = strings.Clone(f.Name)
	return f
}

// Lookup returns the function with exactly this name, such as
// "k8s.io/client-go/rest.(*Request).Do". Assembly functions are found with or without
// their ".abi0" suffix, which .symtab has and .gopclntab lacks.
func (b *Binary) Lookup(name string) (Function, error) {
	funcs, err := b.functions()
	if err != nil {
		return Function{}, err
	}
	alt := name + ".abi0"
	if strings.HasSuffix(name, ".abi0") {
		alt = strings.TrimSuffix(name, ".abi0")
	}
	found := -1
	for i := range funcs {
		if funcs[i].Name == name {
			return detach(funcs[i]), nil
		}
		if found < 0 && funcs[i].Name == alt {
			found = i
		}
	}
	if found >= 0 {
		return detach(funcs[found]), nil
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
	funcs, err := b.functions()
	if err != nil {
		return nil, err
	}
	lit, _ := re.LiteralPrefix()
	var out []Function
	for _, f := range funcs {
		if lit != "" && !strings.Contains(f.Name, lit) {
			continue
		}
		if re.MatchString(f.Name) {
			out = append(out, detach(f))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("match functions %q in %s: %w", re.String(), b.name(), ErrSymbolNotFound)
	}
	return out, nil
}

// funcAt returns the function containing addr, if the function table is loaded.
func (b *Binary) funcAt(funcs []Function, addr uint64) (Function, bool) {
	i := sort.Search(len(funcs), func(i int) bool { return funcs[i].Entry > addr }) - 1
	if i >= 0 && addr < funcs[i].End {
		return funcs[i], true
	}
	return Function{}, false
}

func (b *Binary) readFunctions() ([]Function, error) {
	funcs, err := fromSymtab(b, (*symtab).functions, b.pclnFunctions)
	if err != nil {
		return nil, err
	}
	cmp := func(a, b Function) int {
		switch {
		case a.Entry < b.Entry:
			return -1
		case a.Entry > b.Entry:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	}
	if !slices.IsSortedFunc(funcs, cmp) {
		slices.SortFunc(funcs, cmp)
	}
	return funcs, nil
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

// symtab is the raw .symtab with its string table; names are substrings of strtab.
type symtab struct {
	raw    []byte // Elf64_Sym entries, 24 bytes each
	strtab string
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
	raw, err := b.sectionBytes(s)
	if err != nil {
		return nil, err
	}
	strs := b.f.Sections[s.Link]
	strtab, err := b.readStringAt(strs.Offset, strs.Size)
	if err != nil {
		return nil, err
	}
	return &symtab{raw: raw, strtab: strtab}, nil
}

func (st *symtab) name(off uint32) string {
	if uint64(off) >= uint64(len(st.strtab)) {
		return ""
	}
	s := st.strtab[off:]
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// each calls fn for every symbol until fn returns false.
func (st *symtab) each(fn func(name string, info byte, shndx uint16, value, size uint64) bool) {
	le := binary.LittleEndian
	for i := symSize; i+symSize <= len(st.raw); i += symSize {
		e := st.raw[i : i+symSize]
		if !fn(st.name(le.Uint32(e)), e[4], le.Uint16(e[6:]), le.Uint64(e[8:]), le.Uint64(e[16:])) {
			return
		}
	}
}

func (st *symtab) functions() []Function {
	funcs := make([]Function, 0, len(st.raw)/symSize)
	st.each(func(name string, info byte, shndx uint16, value, size uint64) bool {
		if elf.SymType(info&0xf) != elf.STT_FUNC || shndx == uint16(elf.SHN_UNDEF) || shndx >= uint16(elf.SHN_LORESERVE) || size == 0 || name == "" {
			return true
		}
		funcs = append(funcs, Function{Name: name, Entry: value, End: value + size})
		return true
	})
	return funcs
}

func (st *symtab) lookup(name string) (uint64, bool) {
	var v uint64
	found := false
	st.each(func(n string, _ byte, shndx uint16, value, _ uint64) bool {
		if n == name && shndx != uint16(elf.SHN_UNDEF) {
			v, found = value, true
			return false
		}
		return true
	})
	return v, found
}
