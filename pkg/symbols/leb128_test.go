package symbols

import "testing"

// TestLEB128: DWARF's variable-length integers, as the DWARF 5 standard's examples (section
// 7.6) encode them; a truncated number reads as 0 and marks the buffer failed.
func TestLEB128(t *testing.T) {
	for _, c := range []struct {
		in []byte
		u  uint64
		s  int64
	}{
		{[]byte{0x02}, 2, 2},
		{[]byte{0x7f}, 127, -1},
		{[]byte{0x80, 0x01}, 128, 128},
		{[]byte{0x81, 0x7f}, 16257, -127},
		{[]byte{0x80, 0x7f}, 16256, -128},
		{[]byte{0xe5, 0x8e, 0x26}, 624485, 624485},
		{[]byte{0xc0, 0xbb, 0x78}, 1973696, -123456},
	} {
		u := (&dwarfBuf{data: c.in}).uleb()
		s := (&dwarfBuf{data: c.in}).sleb()
		if u != c.u || s != c.s {
			t.Errorf("% x: uleb %d, sleb %d; want %d, %d", c.in, u, s, c.u, c.s)
		}
	}
	r := &dwarfBuf{data: []byte{0x80, 0x80}}
	if v := r.sleb(); v != 0 || !r.err {
		t.Errorf("truncated: sleb %d, err %v; want 0 and the buffer failed", v, r.err)
	}
}
