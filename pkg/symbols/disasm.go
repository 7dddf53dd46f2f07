package symbols

import (
	"fmt"
	"io"
	"iter"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"
)

// Site is an instruction to put a uprobe on.
type Site struct {
	// Addr is the instruction's virtual address as linked.
	Addr uint64
	// FileOffset is where the instruction is in the file (cilium/ebpf's
	// UprobeOptions.Address).
	FileOffset uint64
	// Insn is the instruction in Go assembler syntax, as `go tool objdump` prints it.
	Insn string
	// Emulated says the kernel runs a uprobe on this instruction in its trap handler; when
	// false it single-steps it out of line, a second trap (see emulated).
	Emulated bool
}

// Trap names what a probe hit at the site costs the traced thread: "emulated" (one trap) or
// "single-stepped" (a trap and a single-step trap).
func (s Site) Trap() string {
	if s.Emulated {
		return "emulated"
	}
	return "single-stepped"
}

// maxFuncSize bounds the code read for one function; the largest Go functions are a few
// hundred KiB.
const maxFuncSize = 16 << 20

// maxPrologue is how many instructions of a function's start are searched for the stack
// check. The longest Go prologue (a frame larger than StackBig) has five before the branch.
const maxPrologue = 12

func (b *Binary) code(fn Function) ([]byte, error) {
	if fn.End <= fn.Entry || fn.End-fn.Entry > maxFuncSize {
		return nil, fmt.Errorf("read code of %s: bad bounds [%#x, %#x)", fn.Name, fn.Entry, fn.End)
	}
	code, err := b.readVA(fn.Entry, fn.End-fn.Entry)
	if err != nil {
		return nil, fmt.Errorf("read code of %s: %w", fn.Name, err)
	}
	return code, nil
}

// EntrySite returns where to put the entry probe of fn: the first instruction after the
// prologue's stack-check branch (amd64: `CMPQ SP, 0x10(R14); JBE morestack`, then usually
// PUSHQ BP; arm64: `MOVD 16(R28), R16; CMP R16, RSP; BLS morestack`, then the store of the
// link register). A probe there fires once per call, even when the goroutine's stack has to
// grow (morestack re-runs the function from its entry), and the argument registers still
// hold the arguments. A function without a stack check (NOSPLIT, small leaf) gets fn.Entry.
func (b *Binary) EntrySite(fn Function) (Site, error) {
	code, err := b.code(fn)
	if err != nil {
		return Site{}, err
	}
	return b.site(fn, code, entryOffset(b.Arch, code))
}

// ReturnSites returns every RET instruction of fn, found by linear disassembly of
// [fn.Entry, fn.End). Returns are traced with plain uprobes on these, never with uretprobes,
// which crash Go programs (the runtime moves stacks and unwinds them itself). A function
// that never returns (it always panics or loops forever) has none: the slice is empty.
func (b *Binary) ReturnSites(fn Function) ([]Site, error) {
	code, err := b.code(fn)
	if err != nil {
		return nil, err
	}
	offs := scanRets(b.Arch, code)
	sites := make([]Site, 0, len(offs))
	for _, off := range offs {
		s, err := b.site(fn, code, off)
		if err != nil {
			return nil, err
		}
		sites = append(sites, s)
	}
	return sites, nil
}

func (b *Binary) site(fn Function, code []byte, off int) (Site, error) {
	addr := fn.Entry + uint64(off)
	fo, err := b.FileOffset(addr)
	if err != nil {
		return Site{}, err
	}
	return Site{Addr: addr, FileOffset: fo, Insn: b.disasm(code[off:], addr), Emulated: b.emulated(code[off:])}, nil
}

// disasm renders the instruction at the start of code in Go syntax.
func (b *Binary) disasm(code []byte, pc uint64) string {
	funcs, _ := b.functions()
	symname := func(addr uint64) (string, uint64) {
		if f, ok := b.funcAt(funcs, addr); ok {
			return f.Name, f.Entry
		}
		return "", 0
	}
	switch b.Arch {
	case "amd64":
		inst, err := decodeX86(code)
		if err != nil {
			return "?"
		}
		return x86asm.GoSyntax(inst, pc, symname)
	case "arm64":
		if len(code) < 4 {
			return "?"
		}
		inst, err := arm64asm.Decode(code[:4])
		if err != nil {
			return "?"
		}
		return arm64asm.GoSyntax(inst, pc, symname, vaReader{b})
	}
	return "?"
}

// vaReader reads the file by virtual address, for PC-relative literal loads in arm64 code.
type vaReader struct{ b *Binary }

func (r vaReader) ReadAt(p []byte, addr int64) (int, error) {
	data, err := r.b.readVA(uint64(addr), uint64(len(p)))
	if err != nil {
		return 0, io.EOF
	}
	return copy(p, data), nil
}

// scanRets returns the offsets of every RET in code by linear disassembly. Undecodable bytes
// are skipped as `go tool objdump` skips them (one byte on amd64, one word on arm64), so both
// see the same instruction stream.
func scanRets(arch string, code []byte) []int {
	var rets []int
	switch arch {
	case "amd64":
		for off, inst := range x86Insns(code) {
			if inst.Op == x86asm.RET {
				rets = append(rets, off)
			}
		}
	case "arm64":
		for off := 0; off+4 <= len(code); off += 4 {
			inst, err := arm64asm.Decode(code[off : off+4])
			if err == nil && inst.Op == arm64asm.RET {
				rets = append(rets, off)
			}
		}
	}
	return rets
}

// x86Insns yields the offset and instruction of every amd64 instruction in code, by linear
// disassembly; an undecodable byte is skipped as `go tool objdump` skips it.
func x86Insns(code []byte) iter.Seq2[int, x86asm.Inst] {
	return func(yield func(int, x86asm.Inst) bool) {
		for off := 0; off < len(code); {
			inst, err := decodeX86(code[off:])
			if err != nil || inst.Len <= 0 {
				off++
				continue
			}
			if !yield(off, inst) {
				return
			}
			off += inst.Len
		}
	}
}

// Call is a direct call (amd64 `CALL rel32`, arm64 `BL`): where it is, and what it calls.
type Call struct {
	Site
	// Target is the called address as linked: a function's Entry.
	Target uint64
}

// Calls returns fn's direct calls in address order, found by linear disassembly as
// ReturnSites finds RETs. Calls through a register or memory (func values, interface
// methods, closures) are not listed: their targets are not in the code. On amd64 the
// kernel emulates a uprobe on `CALL rel32` in the trap (no single-step); on arm64 it
// simulates `BL`.
func (b *Binary) Calls(fn Function) ([]Call, error) {
	code, err := b.code(fn)
	if err != nil {
		return nil, err
	}
	var calls []Call
	for _, br := range scanBranches(b.Arch, code, fn.Entry) {
		if !br.call {
			continue
		}
		s, err := b.site(fn, code, br.off)
		if err != nil {
			return nil, err
		}
		calls = append(calls, Call{Site: s, Target: br.target})
	}
	return calls, nil
}

// branch is a direct call or jump found in code.
type branch struct {
	off    int    // offset of the instruction in code
	len    int    // its length
	target uint64 // address it transfers to
	call   bool   // a call (CALL, BL), not a jump (JMP, B)
	cond   bool   // a conditional jump (Jcc; on arm64 B.cond, CBZ/CBNZ, TBZ/TBNZ)
}

// x86Jcc are the conditional jumps of amd64.
var x86Jcc = map[x86asm.Op]bool{
	x86asm.JA: true, x86asm.JAE: true, x86asm.JB: true, x86asm.JBE: true, x86asm.JCXZ: true, x86asm.JE: true,
	x86asm.JECXZ: true, x86asm.JG: true, x86asm.JGE: true, x86asm.JL: true, x86asm.JLE: true, x86asm.JNE: true,
	x86asm.JNO: true, x86asm.JNP: true, x86asm.JNS: true, x86asm.JO: true, x86asm.JP: true, x86asm.JRCXZ: true,
	x86asm.JS: true, x86asm.LOOP: true, x86asm.LOOPE: true, x86asm.LOOPNE: true,
}

// scanBranches returns the direct calls and jumps in code, which starts at address pc, by
// linear disassembly (undecodable bytes skipped as in scanRets).
func scanBranches(arch string, code []byte, pc uint64) []branch {
	var out []branch
	switch arch {
	case "amd64":
		for off, inst := range x86Insns(code) {
			if inst.Op == x86asm.CALL || inst.Op == x86asm.JMP || x86Jcc[inst.Op] {
				if rel, ok := inst.Args[0].(x86asm.Rel); ok {
					out = append(out, branch{off: off, len: inst.Len, target: uint64(int64(pc) + int64(off+inst.Len) + int64(rel)),
						call: inst.Op == x86asm.CALL, cond: x86Jcc[inst.Op]})
				}
			}
		}
	case "arm64":
		for off := 0; off+4 <= len(code); off += 4 {
			inst, err := arm64asm.Decode(code[off : off+4])
			if err != nil {
				continue
			}
			switch inst.Op {
			case arm64asm.B, arm64asm.BL, arm64asm.CBZ, arm64asm.CBNZ, arm64asm.TBZ, arm64asm.TBNZ:
			default:
				continue
			}
			for i, a := range inst.Args {
				if rel, ok := a.(arm64asm.PCRel); ok {
					out = append(out, branch{off: off, len: 4, target: uint64(int64(pc) + int64(off) + int64(rel)),
						call: inst.Op == arm64asm.BL, cond: i > 0})
					break
				}
			}
		}
	}
	return out
}

// branchTargets returns the targets of the direct calls and unconditional jumps in code,
// which starts at address pc.
func branchTargets(arch string, code []byte, pc uint64) []uint64 {
	var out []uint64
	for _, br := range scanBranches(arch, code, pc) {
		if !br.cond {
			out = append(out, br.target)
		}
	}
	return out
}

// ReturnAddressSites returns, for every direct call of callee in callers, the instruction after
// the call: where callee returns to, with its results still in the ABI registers and the same
// g. It fails when callers hold no call of callee, or when another instruction of a caller
// branches to a return address (a probe there would fire on that path too). Whether the
// callers hold every call of callee (no func value or interface reaches it) is for the caller
// of ReturnAddressSites to know. Each site's Emulated says whether the kernel runs it without a
// single-step.
func (b *Binary) ReturnAddressSites(callee Function, callers []Function) (sites []Site, err error) {
	for _, fn := range callers {
		code, err := b.code(fn)
		if err != nil {
			return nil, err
		}
		brs := scanBranches(b.Arch, code, fn.Entry)
		targets := map[uint64]bool{}
		for _, br := range brs {
			if !br.call {
				targets[br.target] = true
			}
		}
		for _, br := range brs {
			if !br.call || br.target != callee.Entry {
				continue
			}
			off := br.off + br.len
			addr := fn.Entry + uint64(off)
			if off >= len(code) {
				return nil, fmt.Errorf("%s: the call of %s at %#x is its last instruction", fn.Name, callee.Name, fn.Entry+uint64(br.off))
			}
			if targets[addr] {
				return nil, fmt.Errorf("%s: a branch targets %#x, the return address of its call of %s", fn.Name, addr, callee.Name)
			}
			s, err := b.site(fn, code, off)
			if err != nil {
				return nil, err
			}
			sites = append(sites, s)
		}
	}
	if len(sites) == 0 {
		return nil, fmt.Errorf("no direct call of %s in %d callers", callee.Name, len(callers))
	}
	return sites, nil
}

// emulated reports whether the kernel runs a uprobe on the instruction at the start of code
// in its trap handler, without single-stepping it: on amd64 a NOP, JMP, Jcc, CALL rel32 or
// PUSH of a register (arch/x86/kernel/uprobes.c; multi-byte NOPs since the kernel learned
// them); on arm64 a branch, BL, RET or PC-relative load (arch/arm64/kernel/probes/decode-insn.c).
func (b *Binary) emulated(code []byte) bool {
	switch b.Arch {
	case "amd64":
		inst, err := decodeX86(code)
		if err != nil {
			return false
		}
		switch {
		case inst.Op == x86asm.NOP, x86Jcc[inst.Op] && inst.Op != x86asm.LOOP && inst.Op != x86asm.LOOPE && inst.Op != x86asm.LOOPNE &&
			inst.Op != x86asm.JCXZ && inst.Op != x86asm.JECXZ && inst.Op != x86asm.JRCXZ:
			return true
		case inst.Op == x86asm.JMP || inst.Op == x86asm.CALL:
			_, rel := inst.Args[0].(x86asm.Rel)
			return rel
		case inst.Op == x86asm.PUSH:
			_, reg := inst.Args[0].(x86asm.Reg)
			return reg
		}
	case "arm64":
		if len(code) < 4 {
			return false
		}
		inst, err := arm64asm.Decode(code[:4])
		if err != nil {
			return false
		}
		switch inst.Op {
		case arm64asm.B, arm64asm.BL, arm64asm.CBZ, arm64asm.CBNZ, arm64asm.TBZ, arm64asm.TBNZ, arm64asm.RET, arm64asm.ADR, arm64asm.ADRP:
			return true
		}
	}
	return false
}

// entryOffset returns the offset of the instruction following the prologue's stack-check
// branch, or 0 when the function has no stack check.
func entryOffset(arch string, code []byte) int {
	switch arch {
	case "amd64":
		return entryOffsetAMD64(code)
	case "arm64":
		return entryOffsetARM64(code)
	}
	return 0
}

// entryOffsetAMD64 recognises the three prologue shapes cmd/internal/obj/x86 emits:
//
//	CMPQ SP, 0x10(R14); JBE morestack                          (small frame)
//	LEAQ -x(SP), R12; CMPQ R12, 0x10(R14); JBE morestack        (large frame)
//	MOVQ SP, R12; SUBQ $x, R12; JCS morestack; CMPQ R12, 0x10(R14); JBE morestack (huge)
//
// 0x10(R14) is g.stackguard0 (R14 holds g under the register ABI; 0x10(CX) after a TLS load
// in ABI0 assembly).
func entryOffsetAMD64(code []byte) int {
	off := 0
	sawGuard := false
	for n := 0; n < maxPrologue && off < len(code); n++ {
		inst, err := decodeX86(code[off:])
		if err != nil || inst.Len <= 0 {
			return 0
		}
		next := off + inst.Len
		switch inst.Op {
		case x86asm.CMP:
			if comparesStackGuard(inst) {
				sawGuard = true
			}
		case x86asm.JBE:
			if sawGuard {
				return next
			}
		case x86asm.CALL, x86asm.RET, x86asm.JMP:
			return 0
		}
		off = next
	}
	return 0
}

func comparesStackGuard(inst x86asm.Inst) bool {
	for _, a := range inst.Args {
		m, ok := a.(x86asm.Mem)
		if ok && m.Disp == 0x10 && m.Index == 0 && (m.Base == x86asm.R14 || m.Base == x86asm.RCX) {
			return true
		}
	}
	return false
}

// entryOffsetARM64 recognises the prologues cmd/internal/obj/arm64 emits:
//
//	MOVD 16(R28), R16; CMP R16, RSP; BLS morestack                               (small)
//	MOVD 16(R28), R16; SUB $x, RSP, R17; CMP R16, R17; BLS morestack              (large)
//	MOVD 16(R28), R16; SUBS $x, RSP, R17; BLO morestack; CMP R16, R17; BLS morestack (huge)
//
// 16(R28) is g.stackguard0 (R28 holds g).
func entryOffsetARM64(code []byte) int {
	sawGuard := false
	for off := 0; off+4 <= len(code) && off < maxPrologue*4; off += 4 {
		inst, err := arm64asm.Decode(code[off : off+4])
		if err != nil {
			return 0
		}
		switch inst.Op {
		case arm64asm.LDR:
			if m, ok := inst.Args[1].(arm64asm.MemImmediate); ok && m.String() == "[X28,#16]" {
				sawGuard = true
			}
		case arm64asm.B:
			c, ok := inst.Args[0].(arm64asm.Cond)
			if !ok {
				return 0 // unconditional branch: no stack check here
			}
			if sawGuard && c.String() == "LS" {
				return off + 4
			}
		case arm64asm.BL, arm64asm.RET, arm64asm.BR, arm64asm.BLR:
			return 0
		}
	}
	return 0
}

// decodeX86 decodes one 64-bit mode instruction. It corrects one known x86asm (v0.33)
// mistake: VZEROUPPER and VZEROALL (VEX 0F 77) take no ModRM byte, but the decoder consumes
// one, which desynchronises linear disassembly of assembly functions that use AVX.
func decodeX86(code []byte) (x86asm.Inst, error) {
	inst, err := x86asm.Decode(code, 64)
	if err != nil {
		return inst, err
	}
	if inst.Op == x86asm.VZEROUPPER || inst.Op == x86asm.VZEROALL {
		var n int
		switch {
		case len(code) >= 3 && code[0] == 0xc5 && code[2] == 0x77:
			n = 3
		case len(code) >= 4 && code[0] == 0xc4 && code[1]&0x1f == 1 && code[3] == 0x77:
			n = 4
		}
		if n != 0 && inst.Len > n {
			inst.Len = n
		}
	}
	return inst, nil
}
