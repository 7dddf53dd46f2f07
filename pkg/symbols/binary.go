package symbols

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Binary is an opened Go ELF executable. The exported fields are read when it is opened;
// everything else (function table, DWARF, itabs) is read the first time it is asked for and
// then kept. A Binary is safe for concurrent use. Close it when done.
type Binary struct {
	// Path is the path the binary was opened from ("" for OpenReader).
	Path string
	// Arch is the Go architecture name: "amd64" or "arm64".
	Arch string
	// GoVersion is the version of the Go toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string
	// MainModule is the path of the main module ("command-line-arguments" for a build of
	// loose files).
	MainModule string
	// MainVersion is the main module's version as recorded: "(devel)" for a build in a
	// checkout, the version for `go install module/cmd@v1.2.3` or a build stamped from a
	// version-control tag.
	MainVersion string
	// Modules maps each dependency module path to its version, after replace directives
	// (the replacement's version when it has one; a directory replace keeps the required
	// version, often v0.0.0, but for the staging modules of a Kubernetes release build, which
	// take their published version: stagingVersion).
	Modules map[string]string
	// Settings holds the build settings recorded in the binary: "-ldflags", "CGO_ENABLED",
	// "GOARCH", "vcs.revision", ...
	Settings map[string]string
	// Stripped is true when the binary has no .symtab (built with -ldflags=-s): functions
	// then come from .gopclntab.
	Stripped bool
	// HasDWARF is true when the binary carries DWARF (.debug_info), i.e. was not built with
	// -ldflags=-w.
	HasDWARF bool
	// PIE is true for position-independent executables (ELF type ET_DYN): their addresses
	// are shifted by a load bias at run time.
	PIE bool

	r      io.ReaderAt
	size   int64
	closer io.Closer
	f      *elf.File
	loads  []*elf.Prog
	// goMinor is 26 for go1.26.x; 0 when the version is unknown.
	goMinor int

	symtab     func() (*symtab, error)
	pclnHeader func() (*pclnHeader, error)
	functions  func() (*funcTable, error)
	pclnArgs   func() (pclnTable, error)
	modData    func() (*moduledata, error)
	itabList   func() ([]Itab, error)
	itabNames  func() (map[uint64]string, error)
	relocs     func() map[uint64]uint64
	dwarf      func() (*dwarfReader, error)

	mu      sync.Mutex
	offsets map[string]offsetResult
}

// MinGoMinor is the oldest Go 1.x minor version supported: 1.17 introduced the register
// ABI that the probes read arguments from.
const MinGoMinor = 17

// Open opens the Go executable at path. It reads the ELF headers and the build information;
// everything else is read on demand.
func Open(path string) (*Binary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open executable: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open executable: %w", err)
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("open executable %s: %w: it is a directory; give the path of the controller's executable", path, ErrNotELF)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open executable %s: %w: not a regular file (%s); give the path of the controller's executable", path, ErrNotELF, st.Mode().Type())
	}
	b, err := newBinary(path, f, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	b.closer = f
	return b, nil
}

// OpenReader reads a Go executable of the given size from r. Close does not close r.
func OpenReader(r io.ReaderAt, size int64) (*Binary, error) {
	return newBinary("", r, size)
}

// OpenBytes reads a Go executable held in memory.
func OpenBytes(data []byte) (*Binary, error) {
	return OpenReader(bytes.NewReader(data), int64(len(data)))
}

// readOnDemand (re)sets the tables read from the file on first use, all but the module data.
func (b *Binary) readOnDemand() {
	b.symtab = sync.OnceValues(b.readSymtab)
	b.relocs = sync.OnceValue(b.readRelocs)
	b.pclnHeader = sync.OnceValues(b.readPclnHeader)
	b.functions = sync.OnceValues(b.readFunctions)
	b.pclnArgs = sync.OnceValues(func() (pclnTable, error) {
		funcs, args, err := b.readPcln()
		return pclnTable{funcs, args}, err
	})
	b.itabList = sync.OnceValues(b.readItabs)
	b.dwarf = sync.OnceValues(b.openDWARF)
}

// Release drops the tables read from the file to plan the probes (functions, symbols, the
// pclntab's argument sizes, itabs, DWARF: tens of MiB for a big controller) and keeps the file
// open, the module data, which naming a type (TypeName, ItabTypeName) needs, and the error
// itabs' names (ErrorItabs), which every attachment of the executable names errors with: a
// traced executable costs the agent only what tracing it needs. A later call that needs a
// table reads it again. Values already returned stay valid. Release must not run concurrently
// with other methods.
func (b *Binary) Release() {
	// Read now, while the tables they are found with are at hand.
	_, _ = b.modData()
	_, _ = b.itabNames()
	b.readOnDemand()
}

// ReleaseDWARF drops the DWARF read so far (the runtime unit and its index of struct types:
// ~10 MiB for kubelet or an unstripped kube-controller-manager). Field offsets already asked
// stay answered from FieldOffset's cache; one not asked yet reads the DWARF again. A caller
// that asks every offset it needs first can so let the DWARF go before it reads the function
// table, and the two are never in memory at once (probes.ResolveOffsets).
func (b *Binary) ReleaseDWARF() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dwarf = sync.OnceValues(b.openDWARF)
}

// Close releases the file and everything read from it; later calls that need the file fail.
// Values already returned (functions, sites, offsets) stay valid. Close must not run
// concurrently with other methods.
func (b *Binary) Close() error {
	closed := func() error { return fmt.Errorf("read %s: %w", b.name(), os.ErrClosed) }
	b.symtab = func() (*symtab, error) { return nil, closed() }
	b.pclnHeader = func() (*pclnHeader, error) { return nil, closed() }
	b.functions = func() (*funcTable, error) { return nil, closed() }
	b.pclnArgs = func() (pclnTable, error) { return pclnTable{}, closed() }
	b.modData = func() (*moduledata, error) { return nil, closed() }
	b.itabList = func() ([]Itab, error) { return nil, closed() }
	b.itabNames = func() (map[uint64]string, error) { return nil, closed() }
	b.relocs = func() map[uint64]uint64 { return nil }
	b.dwarf = func() (*dwarfReader, error) { return nil, closed() }
	b.r = closedReader{}
	if b.closer == nil {
		return nil
	}
	err := b.closer.Close()
	b.closer = nil
	return err
}

type closedReader struct{}

func (closedReader) ReadAt([]byte, int64) (int, error) { return 0, os.ErrClosed }

func (b *Binary) name() string {
	if b.Path == "" {
		return "executable"
	}
	return "executable " + b.Path
}

func newBinary(path string, r io.ReaderAt, size int64) (*Binary, error) {
	b := &Binary{Path: path, r: r, size: size}
	wrap := func(err error) error {
		return fmt.Errorf("open %s: %w", b.name(), err)
	}
	if err := checkELF(r, size); err != nil {
		return nil, wrap(err)
	}
	f, err := newELF(r)
	if err != nil {
		return nil, wrap(err)
	}
	b.f = f
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, wrap(fmt.Errorf("%w: ELF type %s is not an executable; give the path of the linked program", ErrNotELF, f.Type))
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			b.loads = append(b.loads, p)
		}
	}
	b.PIE = f.Type == elf.ET_DYN
	b.Stripped = f.Section(".symtab") == nil
	b.HasDWARF = f.Section(".debug_info") != nil || f.Section(".zdebug_info") != nil

	if pclnSection(f) == nil && f.Section(".go.buildinfo") == nil {
		return nil, wrap(fmt.Errorf("%w: it has no Go function table (.gopclntab) and no Go build information; reconscope traces programs written in Go", ErrNotGo))
	}
	switch {
	case f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB:
		return nil, wrap(fmt.Errorf("%w: %s %s %s; reconscope supports 64-bit little-endian amd64 and arm64", ErrUnsupportedGo, f.Class, f.Data, f.Machine))
	case f.Machine == elf.EM_X86_64:
		b.Arch = "amd64"
	case f.Machine == elf.EM_AARCH64:
		b.Arch = "arm64"
	default:
		return nil, wrap(fmt.Errorf("%w: architecture %s; reconscope supports amd64 and arm64", ErrUnsupportedGo, f.Machine))
	}

	b.modData = sync.OnceValues(b.readModuledata)
	b.itabNames = sync.OnceValues(b.readErrorItabs)
	b.readOnDemand()

	if err := b.readBuildInfo(); err != nil {
		return nil, wrap(err)
	}
	if b.goMinor != 0 && b.goMinor < MinGoMinor {
		return nil, wrap(fmt.Errorf("%w: built with %s; reconscope needs Go 1.%d or newer (register ABI): rebuild the program with a current Go", ErrUnsupportedGo, b.GoVersion, MinGoMinor))
	}
	if b.Arch == "arm64" && b.goMinor != 0 && b.goMinor < 18 {
		return nil, wrap(fmt.Errorf("%w: built with %s for arm64, where the register ABI reconscope reads arguments from arrived in Go 1.18: rebuild the program with a current Go", ErrUnsupportedGo, b.GoVersion))
	}
	h, err := b.pclnHeader()
	if err != nil {
		return nil, wrap(err)
	}
	if h.version < 116 {
		return nil, wrap(fmt.Errorf("%w: its function table is from Go 1.15 or older; reconscope needs Go 1.%d or newer (register ABI)", ErrUnsupportedGo, MinGoMinor))
	}
	return b, nil
}

// checkELF checks the magic number and that the headers, every section and every segment
// lie inside the file, so that a truncated download or a partly copied binary is reported as
// such instead of as a confusing parse error later.
func checkELF(r io.ReaderAt, size int64) error {
	if size == 0 {
		return fmt.Errorf("%w: the file is empty", ErrNotELF)
	}
	var ident [64]byte
	n, _ := r.ReadAt(ident[:], 0)
	if n < 4 || !bytes.Equal(ident[:4], []byte(elf.ELFMAG)) {
		return fmt.Errorf("%w: no ELF magic number (is it a script, or a binary for another OS?)", ErrNotELF)
	}
	if n < 16 {
		return fmt.Errorf("%w: the file ends inside the ELF header (%d bytes)", ErrTruncated, size)
	}
	var bo binary.ByteOrder
	switch elf.Data(ident[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return fmt.Errorf("%w: unknown ELF data encoding %d", ErrNotELF, ident[elf.EI_DATA])
	}
	var phoff, shoff uint64
	var phentsize, phnum, shentsize, shnum uint64
	var is64 bool
	switch elf.Class(ident[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		if n < 64 {
			return fmt.Errorf("%w: the file ends inside the ELF header (%d bytes)", ErrTruncated, size)
		}
		is64 = true
		phoff, shoff = bo.Uint64(ident[32:]), bo.Uint64(ident[40:])
		phentsize, phnum = uint64(bo.Uint16(ident[54:])), uint64(bo.Uint16(ident[56:]))
		shentsize, shnum = uint64(bo.Uint16(ident[58:])), uint64(bo.Uint16(ident[60:]))
	case elf.ELFCLASS32:
		if n < 52 {
			return fmt.Errorf("%w: the file ends inside the ELF header (%d bytes)", ErrTruncated, size)
		}
		phoff, shoff = uint64(bo.Uint32(ident[28:])), uint64(bo.Uint32(ident[32:]))
		phentsize, phnum = uint64(bo.Uint16(ident[42:])), uint64(bo.Uint16(ident[44:]))
		shentsize, shnum = uint64(bo.Uint16(ident[46:])), uint64(bo.Uint16(ident[48:]))
	default:
		return fmt.Errorf("%w: unknown ELF class %d", ErrNotELF, ident[elf.EI_CLASS])
	}
	usize := uint64(size)
	within := func(off, length uint64) bool {
		return off <= usize && length <= usize-off
	}
	if phnum > 0 && (phentsize == 0 || !within(phoff, phnum*phentsize)) {
		return fmt.Errorf("%w: program headers at %#x end past the end of the file (%d bytes)", ErrTruncated, phoff, size)
	}
	if shoff != 0 && shnum > 0 && (shentsize == 0 || !within(shoff, shnum*shentsize)) {
		return fmt.Errorf("%w: section headers at %#x end past the end of the file (%d bytes)", ErrTruncated, shoff, size)
	}
	// Segments: the loader maps these bytes, so each must be in the file.
	if phentsize >= 32 && phnum <= 1<<12 {
		buf := make([]byte, phentsize)
		for i := uint64(0); i < phnum; i++ {
			if _, err := r.ReadAt(buf, int64(phoff+i*phentsize)); err != nil {
				return fmt.Errorf("%w: reading program header %d: %v", ErrTruncated, i, err)
			}
			var off, filesz uint64
			typ := elf.ProgType(bo.Uint32(buf))
			if is64 && phentsize >= 56 {
				off, filesz = bo.Uint64(buf[8:]), bo.Uint64(buf[32:])
			} else if !is64 {
				off, filesz = uint64(bo.Uint32(buf[4:])), uint64(bo.Uint32(buf[16:]))
			}
			if typ == elf.PT_LOAD && !within(off, filesz) {
				return fmt.Errorf("%w: segment %d (offset %#x, %d bytes) ends past the end of the file (%d bytes)", ErrTruncated, i, off, filesz, size)
			}
		}
	}
	if shoff != 0 && shentsize >= 40 && shnum <= 1<<16 {
		buf := make([]byte, shentsize)
		for i := uint64(0); i < shnum; i++ {
			if _, err := r.ReadAt(buf, int64(shoff+i*shentsize)); err != nil {
				return fmt.Errorf("%w: reading section header %d: %v", ErrTruncated, i, err)
			}
			var off, sz uint64
			typ := elf.SectionType(bo.Uint32(buf[4:]))
			if is64 && shentsize >= 64 {
				off, sz = bo.Uint64(buf[24:]), bo.Uint64(buf[32:])
			} else if !is64 {
				off, sz = uint64(bo.Uint32(buf[16:])), uint64(bo.Uint32(buf[20:]))
			}
			if typ != elf.SHT_NOBITS && typ != elf.SHT_NULL && !within(off, sz) {
				return fmt.Errorf("%w: section %d (offset %#x, %d bytes) ends past the end of the file (%d bytes)", ErrTruncated, i, off, sz, size)
			}
		}
	}
	return nil
}

// newELF parses the ELF headers. debug/elf is hardened against malformed input, but a panic
// on a hostile file must still become an error: the agent keeps running whatever it is fed.
func newELF(r io.ReaderAt) (f *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("%w: malformed ELF headers (%v)", ErrNotELF, p)
		}
	}()
	f, err = elf.NewFile(r)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: %v", ErrTruncated, err)
		}
		return nil, fmt.Errorf("%w: malformed ELF headers: %v", ErrNotELF, err)
	}
	return f, nil
}

// FileOffset maps a virtual address (as linked, before any PIE load bias) to its offset in
// the file, through the PT_LOAD program headers. cilium/ebpf's UprobeOptions.Address takes
// this value.
func (b *Binary) FileOffset(addr uint64) (uint64, error) {
	for _, p := range b.loads {
		if addr >= p.Vaddr && addr-p.Vaddr < p.Filesz {
			return p.Off + (addr - p.Vaddr), nil
		}
	}
	return 0, fmt.Errorf("map address %#x of %s to a file offset: %w: no loadable segment holds it in the file (is it a run-time address of a PIE? subtract the load bias first)", addr, b.name(), ErrNotMapped)
}

// FirstSegment returns the page-aligned virtual address of the PT_LOAD segment at file offset
// 0: a running PIE's load bias is where the process mapped that segment minus this address.
// It needs only the program headers Open read, so it works after Release and Close too.
func (b *Binary) FirstSegment() (uint64, error) {
	for _, p := range b.loads {
		if p.Off == 0 {
			return p.Vaddr &^ (p.Align - 1), nil
		}
	}
	return 0, fmt.Errorf("read program headers of %s: no PT_LOAD segment at file offset 0", b.name())
}

// readVA reads n bytes at virtual address addr; they must lie in one segment's file image.
func (b *Binary) readVA(addr, n uint64) ([]byte, error) {
	for _, p := range b.loads {
		if addr >= p.Vaddr && addr-p.Vaddr < p.Filesz {
			if n > p.Filesz-(addr-p.Vaddr) {
				return nil, fmt.Errorf("%w: %d bytes at %#x run past the end of their segment", ErrTruncated, n, addr)
			}
			buf := make([]byte, n)
			if _, err := b.r.ReadAt(buf, int64(p.Off+(addr-p.Vaddr))); err != nil {
				return nil, fmt.Errorf("%w: reading %d bytes at %#x: %v", ErrTruncated, n, addr, err)
			}
			return buf, nil
		}
	}
	return nil, fmt.Errorf("%w: address %#x is not in the file image of any loadable segment", ErrTruncated, addr)
}

// readPtr reads a pointer stored at addr. In a PIE the stored value may be zero with the
// real one in a dynamic relocation; that is where it is taken from then.
func (b *Binary) readPtr(addr uint64) (uint64, error) {
	buf, err := b.readVA(addr, 8)
	if err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(buf)
	if v == 0 && b.PIE {
		if r, ok := b.relocs()[addr]; ok {
			return r, nil
		}
	}
	return v, nil
}

// readRelocs collects the R_*_RELATIVE dynamic relocations of a PIE: target address ->
// addend (the link-time value of the pointer stored there).
func (b *Binary) readRelocs() map[uint64]uint64 {
	out := map[uint64]uint64{}
	if !b.PIE {
		return out
	}
	var relative uint32
	switch b.f.Machine {
	case elf.EM_X86_64:
		relative = uint32(elf.R_X86_64_RELATIVE)
	case elf.EM_AARCH64:
		relative = uint32(elf.R_AARCH64_RELATIVE)
	}
	for _, s := range b.f.Sections {
		if s.Type != elf.SHT_RELA || s.Size > uint64(b.size) || s.Size%24 != 0 {
			continue
		}
		data := make([]byte, s.Size)
		if _, err := b.r.ReadAt(data, int64(s.Offset)); err != nil {
			continue
		}
		for i := 0; i+24 <= len(data); i += 24 {
			off := binary.LittleEndian.Uint64(data[i:])
			info := binary.LittleEndian.Uint64(data[i+8:])
			if uint32(info) == relative {
				out[off] = binary.LittleEndian.Uint64(data[i+16:])
			}
		}
	}
	return out
}

// sectionBytes reads an uncompressed allocated section.
func (b *Binary) sectionBytes(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("%w: section %s has no bytes in the file", ErrTruncated, s.Name)
	}
	if s.Size > uint64(b.size) {
		return nil, fmt.Errorf("%w: section %s claims %d bytes", ErrTruncated, s.Name, s.Size)
	}
	buf := make([]byte, s.Size)
	if _, err := b.r.ReadAt(buf, int64(s.Offset)); err != nil {
		return nil, fmt.Errorf("%w: reading section %s: %v", ErrTruncated, s.Name, err)
	}
	return buf, nil
}

// symbolValue returns the value of the first .symtab symbol with that name.
func (b *Binary) symbolValue(name string) (uint64, bool) {
	st, err := b.symtab()
	if err != nil || st == nil {
		return 0, false
	}
	return st.lookup(name)
}
