package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReleaseExecutablePages takes out of the agent's address space the pages of its own
// executable's read-only mappings (its code and read-only data) and returns how many bytes of
// resident memory that was. Most of those pages were touched once, by the packages' init
// functions at start-up, and the kernel maps 64 KiB around each page touched: ~33 MiB of the
// agent's RSS, more than its Go heap (BENCHMARKS.md, section 5). The pages stay in the page
// cache; those the agent runs again come back at their next access (a minor fault), so its
// RSS is its working set from then on. Only clean private mappings of the executable file are
// released (no write permission, no anonymous page: none copied on write), which the kernel
// refills from the file unchanged. Call it once start-up is done, before inspections.
func ReleaseExecutablePages() (uint64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("read own executable link: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("read own memory maps: %w", err)
	}
	var released uint64
	for _, m := range cleanFileMappings(smaps, strings.TrimSuffix(exe, " (deleted)")) {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("release pages of %s at %#x: %w", exe, m.start, errno)
		}
		released += m.rss
	}
	return released, nil
}

// mapping is one clean, read-only, private mapping of a file: its address range and resident
// bytes.
type mapping struct {
	start, end, rss uint64
}

// cleanFileMappings returns the mappings of path in smaps (the text of /proc/PID/smaps) that
// can be dropped and refilled from the file: private, not writable, with no anonymous page (a
// page copied on write, as a relocated read-only segment, RELRO, has, is left alone). Pages
// of a file just written count as private dirty until written back; they are the file's
// still, and are released.
func cleanFileMappings(smaps []byte, path string) []mapping {
	var out []mapping
	var cur *mapping
	var dirty bool // the mapping has anonymous pages
	end := func() {
		if cur != nil && !dirty {
			out = append(out, *cur)
		}
		cur, dirty = nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			// A mapping's header: range perms offset dev inode [path].
			end()
			start, err1 := strconv.ParseUint(lo, 16, 64)
			stop, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || len(f) < 6 || len(f[1]) != 4 {
				continue
			}
			if f[1][1] == 'w' || f[1][3] != 'p' || strings.Join(f[5:], " ") != path {
				continue
			}
			cur = &mapping{start: start, end: stop}
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			cur.rss = kb << 10
		case "Anonymous:":
			dirty = dirty || kb > 0
		}
	}
	end()
	return out
}
