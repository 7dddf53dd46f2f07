package symbols

// The bytes of .debug_info and .debug_abbrev: attribute forms, and a bounded buffer that
// reads fixed-size, LEB128 and string values (every read checked against the data's end).

import (
	"bytes"
	"encoding/binary"
)

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
