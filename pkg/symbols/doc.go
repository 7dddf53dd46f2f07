// Package symbols reads a Go ELF executable the way reconscope needs to attach probes to it:
// build information (Go version, module versions, build settings), function bounds from
// .symtab or, when the binary is stripped, from .gopclntab, the instruction after a function's
// stack-check prologue (its entry site), every RET instruction found by disassembly (its return
// sites, since uretprobes crash Go programs), virtual address to file offset mapping, struct
// field offsets from DWARF or from an embedded offsets table, and the names of interface
// tables (itabs) so that an error's concrete type can be named from its itab pointer.
//
// It is pure Go, needs no privileges and reads only the parts of the file each question
// needs: sections are read lazily and DWARF is decoded only far enough to answer the
// field-offset question asked. Supported are Go binaries for Linux using the register ABI:
// Go 1.17 and later on amd64, Go 1.18 and later on arm64 (tested with 1.18 to 1.26).
//
// Errors wrap a sentinel (ErrNotELF, ErrNotGo, ErrUnsupportedGo, ErrTruncated,
// ErrSymbolNotFound, ErrOffsetUnknown, ErrNotMapped) or an error of the os or io packages
// (a missing file, a process that exited, a closed Binary), and their messages say what to do
// next. Every error of Open and OpenReader for a file that is there wraps a sentinel.
package symbols
