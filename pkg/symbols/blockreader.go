package symbols

import (
	"errors"
	"io"
)

// blockReader reads a region of the file through a small direct-mapped cache of blocks. The
// function table's records and pc-value tables are read a few bytes at a time, in nearly
// ascending order: this reads each block about once and never holds the whole region.
type blockReader struct {
	r       io.ReaderAt
	base    int64 // file offset of the region
	size    int64 // its length
	blocks  [cacheBlocks]cachedBlock
	scratch []byte // a read that crosses blocks
}

type cachedBlock struct {
	idx  int64 // block number in the region; valid when data is not nil
	data []byte
}

// Block size and count: 1 MiB in all.
const (
	blockSize   = 64 << 10
	cacheBlocks = 16
)

func newBlockReader(r io.ReaderAt, base, size int64) *blockReader {
	return &blockReader{r: r, base: base, size: max(size, 0)}
}

// block returns block i of the region, read at most once while it stays in the cache.
func (r *blockReader) block(i int64) ([]byte, bool) {
	slot := &r.blocks[i%cacheBlocks]
	if slot.data != nil && slot.idx == i {
		return slot.data, true
	}
	start := i * blockSize
	n := min(blockSize, r.size-start)
	if n <= 0 {
		return nil, false
	}
	buf := slot.data
	if cap(buf) < blockSize {
		buf = make([]byte, blockSize)
	}
	buf = buf[:n]
	slot.data = nil
	if k, err := r.r.ReadAt(buf, r.base+start); k < len(buf) || (err != nil && !errors.Is(err, io.EOF)) {
		return nil, false
	}
	slot.idx, slot.data = i, buf
	return buf, true
}

// at returns the n bytes at offset off of the region, valid until the next call; false when
// they run past its end or cannot be read.
func (r *blockReader) at(off uint64, n int) ([]byte, bool) {
	if n < 0 || off > uint64(r.size) || uint64(r.size)-off < uint64(n) {
		return nil, false
	}
	i, in := int64(off)/blockSize, int(int64(off)%blockSize)
	blk, ok := r.block(i)
	if !ok {
		return nil, false
	}
	if in+n <= len(blk) {
		return blk[in : in+n], true
	}
	r.scratch = r.scratch[:0]
	for n > 0 {
		blk, ok := r.block(i)
		if !ok {
			return nil, false
		}
		take := min(n, len(blk)-in)
		r.scratch = append(r.scratch, blk[in:in+take]...)
		n -= take
		i, in = i+1, 0
	}
	return r.scratch, true
}

// tableLen is pcSum of the pc-value table at offset off of the region (0: none).
func (r *blockReader) tableLen(off, quantum, limit uint64) (uint64, bool) {
	if off == 0 || off >= uint64(r.size) {
		return 0, false
	}
	// Most tables are a few bytes: a short window first; a table that runs past it is read
	// again in a longer one, then (a huge function's) in one read of its own.
	for _, w := range []uint64{512, blockSize, maxPCTable} {
		w = min(w, uint64(r.size)-off)
		var p []byte
		if w <= blockSize {
			var ok bool
			if p, ok = r.at(off, int(w)); !ok {
				return 0, false
			}
		} else {
			p = make([]byte, w)
			if k, err := r.r.ReadAt(p, r.base+int64(off)); k < len(p) || (err != nil && !errors.Is(err, io.EOF)) {
				return 0, false
			}
		}
		n, ok, short := pcSum(p, quantum, limit)
		if !short || w == uint64(r.size)-off {
			return n, ok
		}
	}
	return 0, false
}

// maxPCTable bounds the bytes of one pc-value table read.
const maxPCTable = 1 << 20
