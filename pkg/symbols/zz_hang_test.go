package symbols

import (
	"math/rand"
	"regexp"
	"testing"
	"time"
	"os"
)

func TestZZHang(t *testing.T) {
	seeds := fuzzSeeds()
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 200000; i++ {
		s := append([]byte(nil), seeds[r.Intn(len(seeds))]...)
		if len(s) == 0 { continue }
		n := 1 + r.Intn(3)
		for j := 0; j < n; j++ {
			s[r.Intn(len(s))] = byte(r.Intn(256))
		}
		start := time.Now()
		done := make(chan bool)
		go func() {
			b, err := OpenBytes(s)
			if err == nil {
				funcs, err := b.Functions()
				if err == nil {
					for i, fn := range funcs {
						if i >= 8 { break }
						b.EntrySite(fn); b.ReturnSites(fn); b.Lookup(fn.Name)
					}
				}
				b.Match(regexp.MustCompile(`^main\.`))
				b.Itabs()
				b.FieldOffset("runtime.g", "goid")
				b.FieldOffset("runtime.g", "stack.hi")
				b.FieldOffset("k8s.io/client-go/rest.Request", "verb")
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			os.WriteFile("/tmp/hang.bin", s, 0644)
			t.Fatalf("iteration %d hangs", i)
		}
		if d := time.Since(start); d > 200*time.Millisecond {
			os.WriteFile("/tmp/slow.bin", s, 0644)
			t.Logf("iteration %d slow: %v", i, d)
		}
	}
}
