package tracer

import (
	"runtime/debug"
	"testing"
)

// TestCollectHarder: inspections collect at inspectGOGC, overlapping ones too, and the percent
// found before the first is set back after the last, whatever order they end in; a percent
// lower already, or off, is left as it is.
func TestCollectHarder(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	get := func() int {
		p := debug.SetGCPercent(0)
		debug.SetGCPercent(p)
		return p
	}
	a := collectHarder()
	if p := get(); p != inspectGOGC {
		t.Fatalf("during an inspection: GOGC %d, want %d", p, inspectGOGC)
	}
	b := collectHarder()
	a() // the first ends while the second runs
	if p := get(); p != inspectGOGC {
		t.Errorf("one inspection of two ended: GOGC %d, want %d", p, inspectGOGC)
	}
	b()
	if p := get(); p != 100 {
		t.Errorf("after the inspections: GOGC %d, want the 100 found before", p)
	}
	for _, was := range []int{10, -1} {
		debug.SetGCPercent(was)
		done := collectHarder()
		if p := get(); p != was {
			t.Errorf("GOGC %d before: %d during an inspection, want it left", was, p)
		}
		done()
		if p := get(); p != was {
			t.Errorf("GOGC %d before: %d after", was, p)
		}
	}
}
