package symbols

import (
	"os"
	"testing"
)

// BenchmarkOpenLarge measures what `inspect` and an attach do on a big binary: Open,
// Functions, Lookup, EntrySite, ReturnSites and FieldOffset("runtime.g", "goid"). Point
// RECONSCOPE_BENCH_BINARY at one (the test bed's kube-apiserver is 170 MB); the function
// looked up is RECONSCOPE_BENCH_FUNC (default k8s.io/client-go/rest.(*Request).Do).
// Budget (DESIGN.md §6): < 1 s and < 150 MB allocated per operation.
func BenchmarkOpenLarge(b *testing.B) {
	path := os.Getenv("RECONSCOPE_BENCH_BINARY")
	if path == "" {
		b.Skip("set RECONSCOPE_BENCH_BINARY to a large Go binary")
	}
	fn := os.Getenv("RECONSCOPE_BENCH_FUNC")
	if fn == "" {
		fn = "k8s.io/client-go/rest.(*Request).Do"
	}
	b.ReportAllocs()
	for b.Loop() {
		bin, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		funcs, err := bin.Functions()
		if err != nil || len(funcs) == 0 {
			b.Fatal(len(funcs), err)
		}
		f, err := bin.Lookup(fn)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bin.EntrySite(f); err != nil {
			b.Fatal(err)
		}
		if _, err := bin.ReturnSites(f); err != nil {
			b.Fatal(err)
		}
		off, err := bin.FieldOffset("runtime.g", "goid")
		if err != nil || off.Value == 0 {
			b.Fatal(off, err)
		}
		bin.Close()
	}
}
