package symbols

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"slices"
	"sort"
	"sync"
)

// funcTable is the binary's function table, sorted by entry address: the functions' bounds
// in memory (24 bytes a function) and their names in the file, read when asked through a
// block cache. kube-controller-manager's 150 000 names are 13 MiB that an inspection held
// whole before (issue 28: the agent's peak is an inspection's heap); a scan of all of them
// reads the file's name table once, in order.
type funcTable struct {
	funcs []funcEntry
	names *nameRegion

	indexOnce sync.Once
	index     []nameKey // by hash of the stored name, then table order (lookup)
	seed      maphash.Seed
}

// funcEntry is one function: its bounds and where its name is.
type funcEntry struct {
	entry, end uint64
	name       uint32 // offset of its name in the table's name region
	abi0       bool   // the name takes ".abi0" (the ABI0 half of a .gopclntab ABI pair)
}

// nameKey is one function in the lookup index: its stored name's hash and its table index.
type nameKey struct {
	h uint32
	i int32
}

// nameRegion is a table of NUL-terminated names in the file (.gopclntab's funcnametab, the
// symbol table's .strtab), read through a block cache. It is safe for concurrent use: every
// read copies the name out under its lock.
type nameRegion struct {
	mu sync.Mutex
	r  *blockReader
}

// maxNameLen bounds one name read (a corrupt table without NULs is not read whole).
const maxNameLen = 1 << 16

func newNameRegion(b *Binary, off, size uint64) *nameRegion {
	return &nameRegion{r: newBlockReader(b.r, int64(off), int64(size))}
}

// size is the region's length in bytes.
func (n *nameRegion) size() uint64 { return uint64(n.r.size) }

// appendName appends the name at off (up to its NUL, or the region's end) to dst; false when
// off is outside the region or the file cannot be read there.
func (n *nameRegion) appendName(dst []byte, off uint32) ([]byte, bool) {
	if uint64(off) >= uint64(n.r.size) {
		return dst, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	i, in := int64(off)/blockSize, int(int64(off)%blockSize)
	start := len(dst)
	for len(dst)-start < maxNameLen {
		blk, ok := n.r.block(i)
		if !ok {
			return dst, len(dst) > start
		}
		if j := bytes.IndexByte(blk[in:], 0); j >= 0 {
			return append(dst, blk[in:in+j]...), true
		}
		dst = append(dst, blk[in:]...)
		i, in = i+1, 0
	}
	return dst, true
}

// appendName appends the name of function i, as Functions gives it, to dst.
func (t *funcTable) appendName(dst []byte, i int) []byte {
	dst, _ = t.names.appendName(dst, t.funcs[i].name)
	if t.funcs[i].abi0 {
		dst = append(dst, ".abi0"...)
	}
	return dst
}

// function returns function i with a name of its own.
func (t *funcTable) function(i int) Function {
	e := t.funcs[i]
	return Function{Name: string(t.appendName(nil, i)), Entry: e.entry, End: e.end}
}

// bounds returns function i without its name (for code reads that do not need it).
func (t *funcTable) bounds(i int) Function {
	return Function{Entry: t.funcs[i].entry, End: t.funcs[i].end}
}

// each calls fn for every function in table order with its name, in a buffer reused for the
// next call, until fn returns false.
func (t *funcTable) each(fn func(i int, name []byte) bool) {
	buf := make([]byte, 0, 256)
	for i := range t.funcs {
		buf = t.appendName(buf[:0], i)
		if !fn(i, buf) {
			return
		}
	}
}

// at returns the index of the function whose code holds addr.
func (t *funcTable) at(addr uint64) (int, bool) {
	i := sort.Search(len(t.funcs), func(i int) bool { return t.funcs[i].entry > addr }) - 1
	if i >= 0 && addr < t.funcs[i].end {
		return i, true
	}
	return -1, false
}

// buildIndex sorts the functions by their stored names' hashes (8 bytes a function), once.
func (t *funcTable) buildIndex() {
	t.indexOnce.Do(func() {
		t.seed = maphash.MakeSeed()
		t.index = make([]nameKey, len(t.funcs))
		buf := make([]byte, 0, 256)
		for i := range t.funcs {
			buf, _ = t.names.appendName(buf[:0], t.funcs[i].name)
			t.index[i] = nameKey{uint32(maphash.Bytes(t.seed, buf)), int32(i)}
		}
		slices.SortFunc(t.index, func(a, b nameKey) int {
			if c := cmp.Compare(a.h, b.h); c != 0 {
				return c
			}
			return cmp.Compare(a.i, b.i)
		})
	})
}

// withStoredName returns the indexes, in table order, of the functions whose stored name (the
// name in the file, without a ".abi0" the table adds) is name.
func (t *funcTable) withStoredName(name string) []int {
	t.buildIndex()
	h := uint32(maphash.String(t.seed, name))
	lo := sort.Search(len(t.index), func(k int) bool { return t.index[k].h >= h })
	var out []int
	var buf []byte
	for k := lo; k < len(t.index) && t.index[k].h == h; k++ {
		i := int(t.index[k].i)
		buf, _ = t.names.appendName(buf[:0], t.funcs[i].name)
		if string(buf) == name {
			out = append(out, i)
		}
	}
	return out
}

// sameStoredName calls fn for every group of two or more functions with the same stored name,
// in table order within a group.
func (t *funcTable) sameStoredName(fn func(group []int)) {
	t.buildIndex()
	var group []int
	var a, b []byte
	for lo := 0; lo < len(t.index); {
		hi := lo + 1
		for hi < len(t.index) && t.index[hi].h == t.index[lo].h {
			hi++
		}
		if hi-lo < 2 {
			lo = hi
			continue
		}
		// Within equal hashes, in table order: the names equal to the first one left, then
		// the rest (a hash collision) the same way.
		done := make([]bool, hi-lo)
		for k := lo; k < hi; k++ {
			if done[k-lo] {
				continue
			}
			group = group[:0]
			a, _ = t.names.appendName(a[:0], t.funcs[t.index[k].i].name)
			for m := k; m < hi; m++ {
				if done[m-lo] {
					continue
				}
				b, _ = t.names.appendName(b[:0], t.funcs[t.index[m].i].name)
				if bytes.Equal(a, b) {
					group = append(group, int(t.index[m].i))
					done[m-lo] = true
				}
			}
			if len(group) > 1 {
				fn(group)
			}
		}
		lo = hi
	}
}
