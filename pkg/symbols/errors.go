package symbols

import "errors"

// Sentinel errors. Check them with errors.Is; the wrapping error says which file, symbol,
// type or version was involved and what to do about it.
var (
	// ErrNotELF means the file is not an ELF executable (a script, an empty file, a
	// directory, a Mach-O or PE file, or garbage).
	ErrNotELF = errors.New("not an ELF executable")
	// ErrNotGo means the file is an ELF executable but not a Go program: it has neither
	// Go build information nor a Go function table (.gopclntab).
	ErrNotGo = errors.New("not a Go executable")
	// ErrUnsupportedGo means a Go program reconscope cannot trace: built by Go older than
	// 1.17 (no register ABI) or for an architecture other than amd64 and arm64.
	ErrUnsupportedGo = errors.New("unsupported Go executable")
	// ErrTruncated means the file is shorter than its headers or sections claim, or a
	// table inside it points outside its bounds.
	ErrTruncated = errors.New("truncated or corrupt executable")
	// ErrSymbolNotFound means no function of that name exists in the binary.
	ErrSymbolNotFound = errors.New("symbol not found")
	// ErrOffsetUnknown means neither the binary's DWARF nor the offsets table knows the
	// offset of a struct field.
	ErrOffsetUnknown = errors.New("field offset unknown")
	// ErrNotMapped means an address is not in the binary's file image: a run-time address of a
	// PIE whose load bias was not subtracted, or heap memory (a type made by reflect).
	ErrNotMapped = errors.New("address not in the executable")
)
