package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/pkg/discovery/cgroup"
	"github.com/reconscope/reconscope/pkg/proc"
)

// fakeProc is a proc tree in a temporary folder: <root>/<pid>/{stat,exe,cgroup}.
type fakeProc struct {
	t    *testing.T
	root string // the proc root
	bins string // executables the exe links point at
}

func newFakeProc(t *testing.T) *fakeProc {
	t.Helper()
	dir := t.TempDir()
	f := &fakeProc{t: t, root: filepath.Join(dir, "proc"), bins: filepath.Join(dir, "bin")}
	for _, d := range []string{f.root, f.bins, filepath.Join(f.root, "self"), filepath.Join(f.root, "sys")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// bin creates the executable name (if new) and returns its path.
func (f *fakeProc) bin(name string) string {
	f.t.Helper()
	p := filepath.Join(f.bins, name)
	if _, err := os.Stat(p); err != nil {
		if err := os.WriteFile(p, []byte("#!/bin/false\n"), 0o755); err != nil {
			f.t.Fatal(err)
		}
	}
	return p
}

// add writes process pid. exe "" makes a kernel thread (no exe link); cgroup "" writes none.
func (f *fakeProc) add(pid int, comm string, start uint64, exe, cgroup string) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (%s) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0 18446744073709551615\n", pid, comm, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if exe != "" {
		f.setExe(pid, exe)
	}
	if cgroup != "" {
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

// setExe points the exe link of pid at the executable name (an exec).
func (f *fakeProc) setExe(pid int, name string) {
	f.t.Helper()
	link := filepath.Join(f.root, strconv.Itoa(pid), "exe")
	_ = os.Remove(link)
	if err := os.Symlink(f.bin(name), link); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) remove(pid int) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

func fileID(t *testing.T, path string) proc.StatFileID {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return proc.StatFileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
}

const (
	testCID    = "8e2b6c1f0a9d4e7b3c5a1f2e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c"
	testPodUID = "5c8a1e9b-7f2d-4c1a-9e3b-1d2f3a4b5c6d"
)

func TestScan(t *testing.T) {
	f := newFakeProc(t)
	cgroupV2 := "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5c8a1e9b_7f2d_4c1a_9e3b_1d2f3a4b5c6d.slice/cri-containerd-" + testCID + ".scope\n"
	f.add(1, "systemd", 10, "systemd", "0::/init.scope\n")
	f.add(2, "kthreadd", 11, "", "0::/\n") // kernel thread: no executable
	f.add(4242, "manager", 5000, "manager", cgroupV2)
	f.add(4300, "manager", 5100, "manager", "") // same binary, no cgroup file
	f.add(77, "my (odd) name", 900, "odd", "")

	procs, err := Scan(f.root)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.PID)
	}
	if fmt.Sprint(pids) != "[1 77 4242 4300]" {
		t.Fatalf("PIDs = %v, want [1 77 4242 4300]", pids)
	}
	byPID := map[int]Process{}
	for _, p := range procs {
		byPID[p.PID] = p
	}
	m := byPID[4242]
	want := Process{
		PID:       4242,
		StartTime: 5000,
		Comm:      "manager",
		Exe:       filepath.Join(f.bins, "manager"),
		ExeID:     fileID(t, filepath.Join(f.bins, "manager")),
		Container: Container{Runtime: cgroup.RuntimeContainerd, ID: testCID, PodUID: testPodUID},
	}
	if m != want {
		t.Errorf("process 4242:\n got %+v\nwant %+v", m, want)
	}
	if byPID[4300].ExeID != m.ExeID {
		t.Errorf("two processes of one binary have different executable IDs: %v, %v", byPID[4300].ExeID, m.ExeID)
	}
	if byPID[4300].Container != (Container{}) {
		t.Errorf("process without cgroup file: Container = %+v, want zero", byPID[4300].Container)
	}
	if byPID[1].ExeID == m.ExeID {
		t.Error("different binaries share an executable ID")
	}
	if got := byPID[77].Comm; got != "my (odd) name" {
		t.Errorf("comm = %q, want %q", got, "my (odd) name")
	}
}

func TestScanMissingRoot(t *testing.T) {
	if _, err := Scan(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("Scan of a missing root: no error")
	}
}

func TestReadProcessErrors(t *testing.T) {
	f := newFakeProc(t)
	f.add(2, "kthreadd", 1, "", "")
	if _, err := ReadProcess(f.root, 2); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("kernel thread: err = %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadProcess(f.root, 999); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing process: err = %v, want fs.ErrNotExist", err)
	}
	f.add(3, "x", 1, "x", "")
	if err := os.WriteFile(filepath.Join(f.root, "3", "stat"), []byte("3 (x) S 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadProcess(f.root, 3); err == nil {
		t.Error("short stat: no error")
	}
}

func TestReadProcessDeletedExe(t *testing.T) {
	f := newFakeProc(t)
	dir := filepath.Join(f.root, "10")
	f.add(10, "m", 1, "", "")
	// The kernel appends " (deleted)" to the link of an executable removed while running.
	target := f.bin("m") + " (deleted)"
	if err := os.Symlink(f.bin("m"), target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "exe")); err != nil {
		t.Fatal(err)
	}
	p, err := ReadProcess(f.root, 10)
	if err != nil {
		t.Fatal(err)
	}
	if p.Exe != f.bin("m") {
		t.Errorf("Exe = %q, want %q", p.Exe, f.bin("m"))
	}
}

// TestReadProcessSelf reads this test process from the real /proc.
func TestReadProcessSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		bpftest.SkipOrFail(t, "no /proc here")
	}
	p, err := ReadProcess(DefaultProcRoot, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if p.Exe != exe {
		t.Errorf("Exe = %q, want %q", p.Exe, exe)
	}
	if p.ExeID != fileID(t, exe) {
		t.Errorf("ExeID = %v, want %v", p.ExeID, fileID(t, exe))
	}
	if p.StartTime == 0 || p.Comm == "" {
		t.Errorf("StartTime = %d, Comm = %q: want both set", p.StartTime, p.Comm)
	}
	procs, err := Scan(DefaultProcRoot)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range procs {
		if q.PID == p.PID {
			found = q == p
		}
	}
	if !found {
		t.Errorf("Scan of /proc does not list this process as %+v", p)
	}
}
