package bpftest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/reconscope/reconscope/internal/testkit"
)

// ProbeLink is one uprobe link the kernel holds, as `bpftool link list` shows it.
type ProbeLink struct {
	ID     link.ID
	Kind   string // "uprobe", "uretprobe", "uprobe_multi", "uretprobe_multi"
	File   string
	Count  int // sites (uprobe_multi) or 1
	Return bool
}

// bpfFUprobeMultiReturn is BPF_F_UPROBE_MULTI_RETURN.
const bpfFUprobeMultiReturn = 1

// UprobeLinks lists every uprobe link in the kernel, from every process.
func UprobeLinks() ([]ProbeLink, error) {
	var out []ProbeLink
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue // gone meanwhile
		}
		if um := info.UprobeMulti(); um != nil {
			ret := um.Flags&bpfFUprobeMultiReturn != 0
			kind := "uprobe_multi"
			if ret {
				kind = "uretprobe_multi"
			}
			out = append(out, ProbeLink{ID: info.ID, Kind: kind, File: um.File, Count: int(um.Count), Return: ret})
			continue
		}
		if pe := info.PerfEvent(); pe != nil {
			switch pe.Type {
			case link.PerfEventUprobe, link.PerfEventUretprobe:
				ret := pe.Type == link.PerfEventUretprobe
				kind := "uprobe"
				if ret {
					kind = "uretprobe"
				}
				file := ""
				if u := pe.Uprobe(); u != nil {
					file = u.File
				}
				out = append(out, ProbeLink{ID: info.ID, Kind: kind, File: file, Count: 1, Return: ret})
			}
		}
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("list kernel links: %w", err)
	}
	return out, nil
}

// LinksOn returns the uprobe links the kernel holds on the executable bin: those attached by its
// path, by the deleted file it became ("bin (deleted)"), or through a process's /proc/PID/exe
// link that leads to it (single uprobes keep the path they were given). That link no longer
// leads anywhere once its process exited: exited names processes of bin that did, whose
// /proc/PID/exe counts as bin.
func LinksOn(t testing.TB, bin string, exited ...int) []ProbeLink {
	t.Helper()
	all, err := UprobeLinks()
	if err != nil {
		t.Fatal(err)
	}
	gone := map[string]bool{}
	for _, pid := range exited {
		gone[fmt.Sprintf("/proc/%d/exe", pid)] = true
	}
	var out []ProbeLink
	for _, l := range all {
		file := l.File
		if strings.HasPrefix(file, "/proc/") && strings.HasSuffix(file, "/exe") {
			if target, err := os.Readlink(file); err == nil {
				file = target
			} else if gone[file] {
				file = bin
			}
		}
		if file == bin || file == bin+" (deleted)" {
			out = append(out, l)
		}
	}
	return out
}

// LinksLeftOn returns the uprobe links still on bin after whoever detached them is done: it
// waits up to 10 s for none to be left. A link closed by its owner lives on while any other
// process holds a file descriptor of it, and every lister of the kernel's links (UprobeLinks
// here, bpftool, another test package's check running beside this one) opens each link it
// looks at for a moment. A link that is really left behind is still there after the wait.
// exited is as for LinksOn.
func LinksLeftOn(t testing.TB, bin string, exited ...int) []ProbeLink {
	t.Helper()
	var left []ProbeLink
	testkit.Poll(10*time.Second, func() bool {
		left = LinksOn(t, bin, exited...)
		return len(left) == 0
	})
	return left
}

// LinksHeldBy returns the uprobe links (as UprobeLinks lists them) that process pid holds a
// file descriptor of: the links an agent attached and keeps, as its /proc/PID/fdinfo says
// (link_id). Another process's momentary look at a link (a lister) does not make it its own.
func LinksHeldBy(pid int) ([]ProbeLink, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the file descriptors of process %d: %w", pid, err)
	}
	held := map[link.ID]bool{}
	for _, e := range entries {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "link_id:"); ok {
				var id uint32
				if _, err := fmt.Sscan(strings.TrimSpace(v), &id); err == nil {
					held[link.ID(id)] = true
				}
			}
		}
	}
	all, err := UprobeLinks()
	var out []ProbeLink
	for _, l := range all {
		if held[l.ID] {
			out = append(out, l)
		}
	}
	return out, err
}

// LinkHolders returns, for each BPF link some live process holds a file descriptor of, one such
// process (as /proc/PID/fdinfo says, link_id). A uprobe link no process holds and no pin keeps
// is gone from the kernel; one that LinksOn lists and no process holds was pinned or leaked.
func LinkHolders() (map[link.ID]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	held := map[link.ID]int{}
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid <= 0 {
			continue
		}
		dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // exited meanwhile, or a kernel thread
		}
		for _, fd := range fds {
			b, err := os.ReadFile(dir + "/" + fd.Name())
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "link_id:"); ok {
					var id uint32
					if _, err := fmt.Sscan(strings.TrimSpace(v), &id); err == nil {
						held[link.ID(id)] = pid
					}
				}
			}
		}
	}
	return held, nil
}
