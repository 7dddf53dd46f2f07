package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		in   string
		want Stat
		ok   bool
	}{
		{"1 (systemd) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 12 1 2", Stat{"systemd", 'S', 12}, true},
		{"5 (a) b) c) R 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 99 1", Stat{"a) b) c", 'R', 99}, true},
		{"5 () Z 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 7", Stat{"", 'Z', 7}, true},
		{"5 (x) R 0 1", Stat{}, false},
		{"5 x) R 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 7", Stat{}, false},
		{"5 (x) R 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 notanumber", Stat{}, false},
		{"5 (x) RR 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 7", Stat{}, false},
		{"", Stat{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseStat([]byte(tt.in))
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("ParseStat(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestFSReadsItsRoot: an FS reads processes under its root only. The root holds one entry, a
// link to this process's directory in /proc under a PID no process has: the test process is
// found there, with its executable and its mappings; under /proc that PID does not exist.
func TestFSReadsItsRoot(t *testing.T) {
	root := t.TempDir()
	const pid = 1 << 30 // above any pid_max
	if err := os.Symlink(filepath.Join("/proc", strconv.Itoa(os.Getpid())), filepath.Join(root, strconv.Itoa(pid))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "self-not-a-pid"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fs := New(root)
	pids, err := fs.PIDs()
	if err != nil || len(pids) != 1 || pids[0] != pid {
		t.Fatalf("PIDs() = %v, %v; want [%d]", pids, err, pid)
	}
	if fs.Exited(pid) {
		t.Error("the test process is taken for exited")
	}
	if !New("").Exited(pid) {
		t.Errorf("PID %d exists under /proc", pid)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if exe, err := fs.Exe(pid); err != nil || exe != self {
		t.Errorf("Exe = %q, %v; want %q", exe, err, self)
	}
	want, err := StatFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := StatFile(fs.ExeLink(pid)); err != nil || id != want {
		t.Errorf("StatFile(ExeLink) = %+v, %v; want %+v", id, err, want)
	}
	maps, err := fs.Maps(pid)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range maps {
		found = found || (m.Inode == want.Ino && m.Offset == 0)
	}
	if !found {
		t.Errorf("no mapping of the executable at offset 0 among %d mappings", len(maps))
	}
	if _, err := New(filepath.Join(root, "missing")).PIDs(); err == nil {
		t.Error("PIDs of a missing root succeeded")
	}
}

// TestExitCheck follows a real process through its life with one stat file held open: running,
// a zombie once killed, gone once reaped. Its name looks like the end of a stat line's comm
// and a zombie's state, which the check must not take for them.
func TestExitCheck(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep executable:", err)
	}
	link := filepath.Join(t.TempDir(), "a) Z (b")
	if err := os.Symlink(sleep, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	fs := New("")
	check, err := fs.OpenExitCheck(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	if check.Exited() {
		t.Fatal("a running process is taken for exited")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !check.Exited() {
		if time.Now().After(deadline) {
			t.Fatal("a killed process (a zombie, not reaped) is not seen exited in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, err := fs.Stat(cmd.Process.Pid); err != nil || st.State != 'Z' {
		t.Fatalf("the killed process, not reaped: %+v, %v; want state Z", st, err)
	}
	_ = cmd.Wait()
	if !check.Exited() {
		t.Error("a reaped process is not seen exited")
	}
	if err := check.Close(); err != nil {
		t.Fatal(err)
	}
	if check.Exited() {
		t.Error("a closed check says exited; want false (nobody asks about that process any more)")
	}
	if _, err := fs.OpenExitCheck(cmd.Process.Pid); err == nil {
		t.Error("OpenExitCheck of a reaped process: no error")
	}
}
