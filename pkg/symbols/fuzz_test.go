package symbols

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var sentinels = []error{ErrNotELF, ErrNotGo, ErrUnsupportedGo, ErrTruncated, ErrSymbolNotFound, ErrOffsetUnknown, ErrNotMapped}

func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// fuzzSeeds are the synthetic executables and a few damaged versions of them.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for _, o := range miniVariants {
		seeds = append(seeds, miniGoELF(o))
	}
	full := miniGoELF(miniOpts{symtab: true, dwarf: true})
	seeds = append(seeds,
		full[:64],             // the ELF header alone
		full[:miniModule],     // cut inside the function table
		[]byte("\x7fELF"),     // magic only
		[]byte("#!/bin/sh\n"), // not ELF
	)
	// A function table that claims too many functions.
	bad := append([]byte(nil), full...)
	binary.LittleEndian.PutUint64(bad[miniPcln+8:], 1<<40)
	seeds = append(seeds, bad)
	return seeds
}

// FuzzOpen feeds arbitrary bytes as an executable and asks every question of the ones that
// open: nothing may panic, and every error from Open wraps a sentinel.
func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := OpenBytes(data)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("Open error without a sentinel: %v", err)
			}
			return
		}
		defer b.Close()
		funcs, err := b.Functions()
		if err == nil {
			for i, fn := range funcs {
				if i >= 8 {
					break
				}
				b.EntrySite(fn)
				b.ReturnSites(fn)
				b.Lookup(fn.Name)
			}
		}
		b.Match(regexp.MustCompile(`^main\.`))
		b.Itabs()
		b.FieldOffset("runtime.g", "goid")
		b.FieldOffset("runtime.g", "stack.hi")
		b.FieldOffset("k8s.io/client-go/rest.Request", "verb")
		b.TypeName(miniBase + miniTypes)
		b.FileOffset(miniBase + miniText)
	})
}

// FuzzScanRets disassembles arbitrary bytes as amd64 or arm64 code.
func FuzzScanRets(f *testing.F) {
	for _, o := range []miniOpts{{}, {arm64: true}} {
		elf := miniGoELF(o)
		f.Add(elf[miniText:miniPcln], o.arm64)
	}
	f.Add([]byte{0xc5, 0xf8, 0x77, 0xc3}, false)             // VZEROUPPER; RET
	f.Add([]byte{0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x00}, false) // an AVX-512 load
	f.Add([]byte{0x60, 0x03, 0x5f, 0xd6}, true)              // RET R27
	f.Fuzz(func(t *testing.T, code []byte, arm64 bool) {
		arch := "amd64"
		if arm64 {
			arch = "arm64"
		}
		last := -1
		for _, off := range scanRets(arch, code) {
			if off <= last || off >= len(code) {
				t.Fatalf("return offsets out of order or bounds: %d after %d (len %d)", off, last, len(code))
			}
			if arm64 && binary.LittleEndian.Uint32(code[off:])&0xfffffc1f != 0xd65f0000 {
				t.Fatalf("offset %d is not a RET: %#x", off, binary.LittleEndian.Uint32(code[off:]))
			}
			last = off
		}
		if e := entryOffset(arch, code); e < 0 || e > len(code) {
			t.Fatalf("entry offset %d out of bounds (len %d)", e, len(code))
		}
	})
}

// TestWriteFuzzCorpus rewrites testdata/fuzz from fuzzSeeds when RECONSCOPE_WRITE_CORPUS=1, so
// the committed seed corpus follows the synthetic executable.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("RECONSCOPE_WRITE_CORPUS") != "1" {
		t.Skip("set RECONSCOPE_WRITE_CORPUS=1 to rewrite testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range fuzzSeeds() {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir = filepath.Join("testdata", "fuzz", "FuzzScanRets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, o := range []miniOpts{{}, {arm64: true}} {
		code := miniGoELF(o)[miniText:miniPcln]
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", code, o.arm64)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMutatedSeeds is a deterministic slice of what FuzzOpen does: a few thousand seeds with
// random bytes overwritten must all open or fail cleanly.
func TestMutatedSeeds(t *testing.T) {
	seeds := fuzzSeeds()
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 3000; i++ {
		s := append([]byte(nil), seeds[r.Intn(len(seeds))]...)
		if len(s) == 0 {
			continue
		}
		for j := 1 + r.Intn(4); j > 0; j-- {
			s[r.Intn(len(s))] = byte(r.Intn(256))
		}
		b, err := OpenBytes(s)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("mutation %d: error without a sentinel: %v", i, err)
			}
			continue
		}
		if funcs, err := b.Functions(); err == nil {
			for k, fn := range funcs {
				if k >= 4 {
					break
				}
				b.EntrySite(fn)
				b.ReturnSites(fn)
			}
		}
		b.Itabs()
		b.FieldOffset("runtime.g", "goid")
		b.FieldOffset("runtime.g", "stack.hi")
	}
}
