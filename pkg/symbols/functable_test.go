package symbols

import (
	"bytes"
	"strings"
	"testing"
)

// TestFunctionNamesStayInFile: the function table holds each function's bounds and where its
// name is (issue 28: kube-controller-manager's 150 000 names were 13 MiB of an inspection's
// heap), and gives the same functions, names included, as reading them all does.
func TestFunctionNamesStayInFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a controller-runtime program")
	}
	for _, name := range []string{"kube", "kube-stripped"} {
		t.Run(name, func(t *testing.T) {
			before := heapInUse()
			b := openFixture(t, name)
			table, err := b.functions()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Lookup("runtime.main"); err != nil { // builds the lookup index
				t.Fatal(err)
			}
			held := heapInUse() - before
			n, nameBytes := 0, 0
			var names []string
			if err := b.EachFunction(func(entry, end uint64, name []byte) bool {
				n++
				nameBytes += len(name)
				names = append(names, string(name))
				return true
			}); err != nil {
				t.Fatal(err)
			}
			// Bounds and a name offset (24 bytes), the lookup index (8), and the block caches
			// the file's tables are read through (up to 1 MiB each), with a tenth and
			// 128 KiB for the heap's rounding: names held would be some 50 bytes a function more.
			caches := cached(table.names.r)
			if st, _ := b.symtab(); st != nil {
				caches += cached(st.syms)
			}
			limit := caches + uint64(32*n)*11/10 + 128<<10
			t.Logf("%d functions, %d KiB of names: the table holds %d KiB, %d of it block caches (at most %d)", n, nameBytes>>10, held>>10, caches>>10, limit>>10)
			if held > limit {
				t.Errorf("the function table holds %d KiB for %d functions (%d KiB of names): more than their bounds and the caches (%d KiB)", held>>10, n, nameBytes>>10, limit>>10)
			}
			if len(table.funcs) != n {
				t.Errorf("EachFunction gave %d functions, the table has %d", n, len(table.funcs))
			}
			all, err := b.Functions()
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range all {
				if i >= len(names) || f.Name != names[i] {
					t.Fatalf("function %d: Functions says %q, EachFunction %q", i, f.Name, names[min(i, len(names)-1)])
				}
				if g, ok := b.FunctionAt(f.Entry + f.Size()/2); f.Size() > 0 && (!ok || g != f) {
					t.Errorf("FunctionAt(%#x) = %+v, %v; want %+v", f.Entry+f.Size()/2, g, ok, f)
				}
			}
			// Every name is found again by Lookup, ".abi0" or not.
			abi0 := 0
			for _, f := range all[:min(len(all), 3000)] {
				g, err := b.Lookup(f.Name)
				if err != nil || g.Name != f.Name {
					t.Errorf("Lookup(%q) = %+v, %v", f.Name, g, err)
				}
				if base, ok := strings.CutSuffix(f.Name, ".abi0"); ok {
					abi0++
					if g, err := b.Lookup(base); err != nil || (g.Name != base && g.Name != f.Name) {
						t.Errorf("Lookup(%q) = %+v, %v", base, g, err)
					}
				}
			}
			if abi0 == 0 {
				t.Errorf("no .abi0 function among the first 3000: the suffix is not tested")
			}
		})
	}
}

// TestNameRegion reads names that cross blocks of the cache, end the region without a NUL,
// and lie outside it.
func TestNameRegion(t *testing.T) {
	first := strings.Repeat("x", blockSize-4) + "abcdefgh"        // from offset 1 across block 0's end
	long := strings.Repeat("k8s.io/client-go/tools/cache.", 2500) // across block 1's end
	data := []byte("\x00" + first + "\x00" + long + "\x00tail")
	n := &nameRegion{r: newBlockReader(bytes.NewReader(data), 0, int64(len(data)))}
	for _, c := range []struct {
		off  int
		want string
		ok   bool
	}{
		{0, "", true},
		{1, first, true},
		{1 + len(first) - 3, "fgh", true},
		{2 + len(first), long, true},
		{len(data) - 4, "tail", true},
		{len(data), "", false},
	} {
		got, ok := n.appendName([]byte("prefix:"), uint32(c.off))
		if ok != c.ok || string(got) != "prefix:"+c.want {
			t.Errorf("appendName(%d) = %d bytes %.20q…, %v; want %d bytes %.20q…, %v", c.off, len(got)-7, got[min(7, len(got)):], ok, len(c.want), c.want, c.ok)
		}
	}
}

// cached is the memory of r's block cache.
func cached(r *blockReader) uint64 {
	n := uint64(cap(r.scratch))
	for _, b := range r.blocks {
		n += uint64(cap(b.data))
	}
	return n
}
