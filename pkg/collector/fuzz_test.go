package collector

import (
	"testing"
	"unsafe"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
)

// fuzzPID is the one process the fuzzed collector traces.
const fuzzPID = 4242

// fuzzCollector is a Collector with a site table holding an entry and a return site of every
// span and call probe of the catalog, and one traced process, and no kernel.
func fuzzCollector(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{procs: map[uint32]*process{fuzzPID: {pid: fuzzPID, names: map[uint64]string{
		0x7f0000001000: "*errors.errorString",
		0x7f0000002000: "*v1.ConfigMap",
	}}}}
	for _, p := range probes.Catalog() {
		for _, kind := range []probes.SiteKind{probes.SiteEntry, probes.SiteReturn} {
			c.table = append(c.table, &probes.Site{Probe: p, Kind: kind})
		}
	}
	if len(c.table) == 0 {
		t.Fatal("empty catalog")
	}
	return c
}

// fuzzRecord is one ring-buffer record as the kernel writes it.
func fuzzRecord(e rbpf.TraceEvent) []byte {
	b := make([]byte, unsafe.Sizeof(e))
	*(*rbpf.TraceEvent)(unsafe.Pointer(&b[0])) = e
	return b
}

// alignedCopy puts b at an 8-byte aligned address, as ring-buffer samples are (the kernel
// aligns each record to 8 bytes), so the decoder may view it as a struct.
func alignedCopy(b []byte) []byte {
	buf := make([]uint64, (len(b)+7)/8+1)
	out := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)[:len(b)]
	copy(out, b)
	return out
}

// FuzzDecodeEvent: any bytes read from the ring buffer (short, long, naming any site, any
// process, any string length, any flags) go through what Run does with a record (decode, the
// site's decoder, the span assembler) without a panic; a record is either malformed or
// decoded with every string at most 128 bytes.
//
// The fuzzed bytes are the record as read, and they are also decoded as the head of a
// full-size record (kind, flags, site, pid, times, goroutine, registers, values, string
// lengths) whose string area repeats them: inputs stay short (the fuzzer minimizes every new
// input, which is slow on 920 bytes) while every field of a record is reached.
func FuzzDecodeEvent(f *testing.F) {
	c := fuzzCollector(f)
	entry := rbpf.TraceEvent{Kind: eventEntry, Site: 0, Pid: fuzzPID, Tid: fuzzPID, Ktime: 1000, G: 0xc000100000, Goid: 7, Flags: flagReconcileID}
	entry.StrLen = [6]uint16{6, 7, 8, 0, 0, 36}
	ret := rbpf.TraceEvent{Kind: 2, Site: 1, Pid: fuzzPID, Tid: fuzzPID, Ktime: 2000, G: 0xc000100000, Goid: 7, SpanStart: 1000, Flags: flagErrorMsg}
	ret.Args[3], ret.Args[4] = 0x7f0000001000, 0xc000200000
	ret.StrLen[strExtra] = 28
	long := entry
	long.StrLen = [6]uint16{0xffff, 129, 128, 0, 0xffff, 0xffff}
	orphan := ret
	orphan.Flags, orphan.SpanStart, orphan.Pid = flagNoEntry, 0, 99
	call := entry
	call.Site, call.Args[7] = 6, 0x7f0000002000 // a cache read (sites 0-5: the reconcile probes), its object type from the itab
	for _, e := range []rbpf.TraceEvent{entry, ret, long, orphan, call} {
		f.Add(fuzzRecord(e)[:fuzzHead])
	}
	f.Add([]byte{})
	f.Add([]byte("default/web-7d9f"))

	f.Fuzz(func(t *testing.T, b []byte) {
		var spans []span.Span
		asm := span.NewAssembler(span.Options{MaxOpen: 4, MaxCalls: 4}, func(s span.Span) { spans = append(spans, s) })
		feed := func(rec []byte) {
			var raw probes.Raw
			site, ok := c.decode(rec, &raw)
			if !ok {
				if len(rec) >= headSize {
					e := (*rbpf.TraceEventHead)(unsafe.Pointer(&rec[0]))
					if int(e.Site) < len(c.table) {
						t.Fatalf("record naming site %d of %d taken as malformed", e.Site, len(c.table))
					}
				}
				return
			}
			for i, s := range raw.Str {
				if len(s) > 128 {
					t.Fatalf("string %d is %d bytes, more than the kernel copies", i, len(s))
				}
			}
			dec := site.Probe.DecodeEntry
			if site.Kind == probes.SiteReturn {
				dec = site.Probe.DecodeReturn
			}
			asm.Add(dec(&raw))
		}
		feed(alignedCopy(b)) // as read: shorter than a record's head is malformed, up to a whole event the head alone

		rec := alignedCopy(make([]byte, max(len(b), eventSize)))
		copy(rec, b)
		if len(b) > 0 {
			for i := max(len(b), fuzzHead); i < len(rec); i++ {
				rec[i] = b[i%len(b)]
			}
		}
		feed(rec)
		e := (*rbpf.TraceEvent)(unsafe.Pointer(&rec[0]))
		e.Site %= uint32(len(c.table)) // name a site that exists, so every decoder sees the bytes
		feed(rec)
		e.Pid = fuzzPID // of the traced process, whose error types are known
		feed(rec)

		asm.Expire(^uint64(0))
		asm.ProcessExited(fuzzPID)
		asm.Flush()
		if asm.Open() != 0 {
			t.Fatalf("%d spans open after Flush", asm.Open())
		}
	})
}

// fuzzHead is a whole record's fields up to its strings (its string lengths included).
var fuzzHead = int(unsafe.Offsetof(rbpf.TraceEvent{}.Str))
