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
// field-offset question asked. Supported are Go 1.17 and later (register ABI) on amd64 and
// arm64 Linux.
//
// Every error wraps one of the sentinel errors (ErrNotELF, ErrNotGo, ErrUnsupportedGo,
// ErrTruncated, ErrSymbolNotFound, ErrOffsetUnknown) or an error of the os package, and its
// message tells the user what to do next.
package symbols
