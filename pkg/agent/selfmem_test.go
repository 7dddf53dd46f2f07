package agent

import (
	"os"
	"strings"
	"testing"
)

// smapsFixture is /proc/PID/smaps of an agent (fields cut down to those read): its code (a
// file just written: its pages dirty in the page cache, none copied), its read-only data, a read-only segment with a dirty page (relocated, then protected: RELRO),
// its data, an anonymous mapping and another file's code.
const smapsFixture = `00400000-01cf9000 r-xp 00000000 fe:00 10003069                           /usr/bin/reconscope agent
Size:              25572 kB
Rss:               15648 kB
Private_Clean:         0 kB
Private_Dirty:     15648 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me 
01cf9000-03911000 r--p 018f9000 fe:00 10003069                           /usr/bin/reconscope agent
Size:              28768 kB
Rss:               17756 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
03911000-03912000 r--p 03511000 fe:00 10003069                           /usr/bin/reconscope agent
Rss:                   4 kB
Private_Dirty:         4 kB
Anonymous:             4 kB
03912000-03a44000 rw-p 03512000 fe:00 10003069                           /usr/bin/reconscope agent
Rss:                1164 kB
Private_Dirty:       204 kB
Anonymous:           204 kB
03a44000-05a91000 rw-p 00000000 00:00 0 
Rss:                 208 kB
Private_Dirty:       208 kB
Anonymous:           208 kB
7f0000000000-7f0000100000 r-xp 00000000 fe:00 42                         /usr/lib/libc.so.6
Rss:                 900 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
`

// TestCleanFileMappings: the executable's code and read-only data are released, not its
// RELRO segment with a dirty page, its data, anonymous memory or another file's mappings.
func TestCleanFileMappings(t *testing.T) {
	got := cleanFileMappings([]byte(smapsFixture), "/usr/bin/reconscope agent")
	want := []mapping{{0x400000, 0x1cf9000, 15648 << 10}, {0x1cf9000, 0x3911000, 17756 << 10}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if got := cleanFileMappings([]byte(smapsFixture), "/usr/bin/other"); len(got) != 0 {
		t.Errorf("another path: got %+v, want none", got)
	}
}

// TestReleaseExecutablePages releases the test binary's own pages: what it reports was
// resident, the resident size of its executable's mappings falls, and the program runs on
// (its code comes back from the file).
func TestReleaseExecutablePages(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Skipf("no /proc/self/exe: %v", err)
	}
	resident := func() uint64 {
		t.Helper()
		smaps, err := os.ReadFile("/proc/self/smaps")
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, m := range cleanFileMappings(smaps, strings.TrimSuffix(exe, " (deleted)")) {
			n += m.rss
		}
		return n
	}
	before := resident()
	released, err := ReleaseExecutablePages()
	if err != nil {
		t.Fatal(err)
	}
	after := resident()
	t.Logf("resident in the executable's clean mappings: %d KiB before, %d KiB released, %d KiB after", before>>10, released>>10, after>>10)
	if released == 0 || after >= before {
		t.Errorf("released %d bytes; resident %d before, %d after: want fewer after", released, before, after)
	}
}
