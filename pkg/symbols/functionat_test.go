package symbols

import (
	"errors"
	"testing"
)

// TestFunctionNameAt: on every fixture build (amd64, PIE, cgo, arm64; plain and stripped), the
// function FunctionNameAt names at a function's first and last byte is the one Go's own
// debug/gosym finds there, for a sample of the program's functions; addresses outside any Go
// function are not found.
func TestFunctionNameAt(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			b := openFixture(t, fx.name)
			b.Release() // it reads none of the tables Release drops
			table := gosymTable(t, b)
			checked := 0
			for i, gf := range table.Funcs {
				if i%97 != 0 && gf.Sym.PackageName() != "main" {
					continue
				}
				for _, addr := range []uint64{gf.Entry, gf.End - 1} {
					got, err := b.FunctionNameAt(addr)
					if err != nil || got != gf.Name {
						t.Errorf("FunctionNameAt(%#x) = %q, %v; want %s [%#x, %#x)", addr, got, err, gf.Name, gf.Entry, gf.End)
					}
				}
				checked++
			}
			if checked < 20 {
				t.Errorf("%d functions checked, want at least 20", checked)
			}
			for _, addr := range []uint64{0, table.Funcs[0].Entry - 1, 1 << 40} {
				if name, err := b.FunctionNameAt(addr); !errors.Is(err, ErrSymbolNotFound) {
					t.Errorf("FunctionNameAt(%#x) = %q, %v; want %v", addr, name, err, ErrSymbolNotFound)
				}
			}
		})
	}
}
