package symbols

import (
	"io"
	"maps"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
)

// heapInUse is the heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestRelease: after planning, a traced executable keeps only what tracing needs. Release
// drops the tables read to plan (functions, symbols, itabs: most of the heap a Binary holds),
// names types as before, and reads a table again when asked, with the same answer.
func TestRelease(t *testing.T) {
	for _, name := range []string{"plain", "stripped"} {
		t.Run(name, func(t *testing.T) {
			before := heapInUse()
			b, err := Open(build(t, name))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			fns, err := b.Functions()
			if err != nil {
				t.Fatal(err)
			}
			itabs, err := b.ItabList()
			if err != nil || len(itabs) == 0 {
				t.Fatalf("ItabList: %d itabs, %v", len(itabs), err)
			}
			held := heapInUse() - before
			nFuncs, first := len(fns), fns[0]
			fns, itabs = nil, nil

			b.Release()
			released := heapInUse() - before
			t.Logf("heap held by the Binary: %d KiB with its tables, %d KiB after Release", held>>10, released>>10)
			if released*2 > held {
				t.Errorf("Release kept %d of %d KiB", released>>10, held>>10)
			}
			again, err := b.ItabList()
			if err != nil || len(again) == 0 {
				t.Fatalf("ItabList after Release: %d itabs, %v", len(again), err)
			}
			// Naming an error's type, as the collector does at run time, from the itab in the
			// file (the process's memory at load bias 0).
			mem := readerAtFunc(func(p []byte, off int64) (int, error) {
				raw, err := b.readVA(uint64(off), uint64(len(p)))
				return copy(p, raw), err
			})
			name, err := b.ItabTypeName(mem, 0, again[0].Addr)
			if err != nil || name != again[0].Type {
				t.Errorf("ItabTypeName after Release = %q, %v; want %q", name, err, again[0].Type)
			}
			fns, err = b.Functions()
			if err != nil || len(fns) != nFuncs || fns[0] != first {
				t.Errorf("Functions after Release: %d (first %+v), %v; want %d (first %+v)", len(fns), fns[0], err, nFuncs, first)
			}
		})
	}
}

type readerAtFunc func(p []byte, off int64) (int, error)

func (f readerAtFunc) ReadAt(p []byte, off int64) (int, error) { return f(p, off) }

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// TestItabsKeptAcrossRelease: the error itabs' names, which every attachment of an executable
// names error types with (the calls probes' too, attached after Release, at run time),
// are kept across Release: asking for them again reads nothing from the file. Before, they were
// read again, and for an unstripped binary through its whole symbol table, which then stayed
// in the agent's heap for as long as the executable was traced (21 MiB for
// kube-controller-manager at --detail calls).
func TestItabsKeptAcrossRelease(t *testing.T) {
	for _, name := range []string{"plain", "stripped"} {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(build(t, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			r := &countingReader{r: f}
			b, err := OpenReader(r, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			want, err := b.ErrorItabs()
			if err != nil || len(want) == 0 {
				t.Fatalf("ErrorItabs: %d itabs, %v", len(want), err)
			}
			// The error interface's itabs of ItabList, no other.
			list, err := b.ItabList()
			if err != nil {
				t.Fatal(err)
			}
			errs := map[uint64]string{}
			for _, it := range list {
				if it.Interface == "error" {
					errs[it.Addr] = it.Type
				}
			}
			if !maps.Equal(want, errs) || len(errs) == len(list) {
				t.Errorf("ErrorItabs: %d itabs, ItabList has %d of the error interface among %d", len(want), len(errs), len(list))
			}
			b.Release()
			r.n.Store(0)
			got, err := b.ErrorItabs()
			if err != nil || !maps.Equal(got, want) {
				t.Fatalf("ErrorItabs after Release: %d itabs, %v; want the %d before", len(got), err, len(want))
			}
			if n := r.n.Load(); n != 0 {
				t.Errorf("ErrorItabs after Release read %d bytes of the file, want none", n)
			}
			// The map is the caller's: changing it changes no later answer.
			clear(got)
			if again, _ := b.ErrorItabs(); len(again) != len(want) {
				t.Errorf("ErrorItabs after the caller cleared the map: %d itabs, want %d", len(again), len(want))
			}
		})
	}
}
