package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/test/kernels/guest"
)

func TestNewestPackageOrder(t *testing.T) {
	k := kernel{"6.1", "arm64"}
	names := []string{"linux-image-6.1.0-57-cloud-arm64-unsigned", "linux-image-6.1.0-9-cloud-arm64-unsigned", "linux-image-6.1.0-47-cloud-arm64-unsigned"}
	for _, n := range names {
		if !k.pkgPattern().MatchString(n) {
			t.Errorf("%s does not match %s", n, k.pkgPattern())
		}
	}
	for _, n := range []string{"linux-image-6.12.117+deb12-cloud-arm64-unsigned", "linux-image-6.1.0-57-arm64-unsigned", "linux-image-6.1.0-57-cloud-amd64-unsigned"} {
		if k.pkgPattern().MatchString(n) {
			t.Errorf("%s matches the 6.1 arm64 cloud pattern", n)
		}
	}
	if !versionLess(names[1], names[2]) || !versionLess(names[2], names[0]) || versionLess(names[0], names[2]) {
		t.Error("versionLess does not order 6.1.0-9 < 6.1.0-47 < 6.1.0-57")
	}
	if !(kernel{"6.12", "amd64"}).pkgPattern().MatchString("linux-image-6.12.117+deb12-cloud-amd64-unsigned") {
		t.Error("6.12 pattern")
	}
}

func TestCPIOHeader(t *testing.T) {
	var b bytes.Buffer
	if err := writeCPIO(&b, map[string]cpioEntry{"init": {mode: sIFREG | 0o755, data: []byte("hi\n")}}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.HasPrefix(s, "070701") || !strings.Contains(s, "init\x00") || !strings.Contains(s, "hi\n") || !strings.Contains(s, "TRAILER!!!\x00") {
		t.Errorf("not a newc archive: %q", s)
	}
	if b.Len()%4 != 0 {
		t.Errorf("archive length %d not padded to 4", b.Len())
	}
}

// TestUpdateDoc: a run of one kernel replaces its row and keeps the others.
func TestUpdateDoc(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.md")
	doc := "# x\n" + beginMarker + "\n| kernel | old header |\n| 6.12-amd64 | kept |\n| 6.1-amd64 | stale |\n" + endMarker + "\ntail\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r := result{Kernel: kernel{"6.1", "amd64"}, Package: "linux-image-x 1", Boot: 7 * time.Second, Accel: "tcg",
		Report: guest.Report{Kernel: "6.1.0", Load: "ok", Mode: "single uprobes", Tests: "PASS", Execs: "5/5 seen",
			Features: map[string]string{"uprobe_multi": "no", "ringbuf": "yes"},
			Traces:   map[string]guest.Trace{"plain": {Reconciles: 140, Exact: 140}}}}
	if err := updateDoc(p, []result{r}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	s := string(b)
	for _, want := range []string{"| 6.12-amd64 | kept |", "| 6.1-amd64 | `linux-image-x 1` |", "lacks uprobe_multi", "140/140 spans exact", "\ntail\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("doc lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "stale") || strings.Index(s, "6.1-amd64") > strings.Index(s, "6.12-amd64") {
		t.Errorf("stale row kept or rows out of order:\n%s", s)
	}
}
