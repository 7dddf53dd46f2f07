package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name, line string
		want       Stat
	}{
		{
			name: "plain",
			line: "42 (sleep) S 1 42 42 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 123456 8192 100 18446744073709551615",
			want: Stat{PID: 42, PPID: 1, Pgrp: 42, State: 'S', Start: 123456, Comm: "sleep"},
		},
		{
			name: "comm with spaces and parentheses",
			line: "7 (a (b) c) Z 3 5 5 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0 0",
			want: Stat{PID: 7, PPID: 3, Pgrp: 5, State: 'Z', Start: 99, Comm: "a (b) c"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.line))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("parseStat = %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := parseStat([]byte("garbage")); err == nil {
		t.Error("parseStat(garbage) succeeded")
	}
}

// TestStartStopsGroup starts a shell that leaves a child behind in its process group and
// checks Stop ends both and nothing is left.
func TestStartStopsGroup(t *testing.T) {
	p := Start(t, "shell", exec.Command("sh", "-c", "sleep 300 & echo started; wait"))
	waitForFile(t, p.StdoutPath(), "started")
	kids := groupMembers(t, p.PID())
	if len(kids) < 2 {
		t.Fatalf("process group %d has %d live members, want the shell and its sleep", p.PID(), len(kids))
	}
	err := p.Stop()
	if !KilledBy(err, syscall.SIGTERM) {
		t.Errorf("Stop = %v, want the shell killed by SIGTERM", err)
	}
	waitGroupEmpty(t, p.PID())
	CheckNoLeftovers(t)
}

// TestLeftoversReported checks the leftover check sees a live started process (and kills it).
func TestLeftoversReported(t *testing.T) {
	p := Start(t, "sleeper", exec.Command("sleep", "300"))
	rec := &errRecorder{TB: t}
	ReportLeftovers(rec, t, false)
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "sleep 300") {
		t.Fatalf("reportLeftovers reported %q, want the sleeper", rec.errs)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("reportLeftovers did not kill the leftover")
	}
}

type errRecorder struct {
	testing.TB
	errs []string
}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (r *errRecorder) Helper() {}

// waitForFile waits until the file at path contains s.
func waitForFile(t *testing.T, path, s string) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%s to contain %q", path, s), 10*time.Second, func() bool {
		data, _ := os.ReadFile(path)
		return strings.Contains(string(data), s)
	})
}

// groupMembers returns the live processes of group pgid.
func groupMembers(t *testing.T, pgid int) []Stat {
	t.Helper()
	procs, err := AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	var out []Stat
	for _, s := range procs {
		if s.Pgrp == pgid && s.Alive() {
			out = append(out, s)
		}
	}
	return out
}

// waitGroupEmpty waits until group pgid has no live member (a killed orphan is reaped by init).
func waitGroupEmpty(t *testing.T, pgid int) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("process group %d to have no live member", pgid), 5*time.Second, func() (bool, string) {
		members := groupMembers(t, pgid)
		return len(members) == 0, fmt.Sprintf("%+v", members)
	})
}
