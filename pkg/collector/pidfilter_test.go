package collector

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/span"
)

// TestPIDFilter runs two instances of one attached executable, one traced: every probe hit of
// the traced one makes an event and counts as a hit, the other's make neither; once untraced,
// the first makes none either.
func TestPIDFilter(t *testing.T) {
	c, a, bin, _ := attachFakectl(t)
	const n = 25
	dir := t.TempDir()
	start := func(name string) *exec.Cmd {
		cmd := exec.Command(bin, "-n", strconv.Itoa(n), "-start", filepath.Join(dir, name))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	traced, untraced, later := start("go"), start("go"), start("later")
	if err := c.Trace(traced.Process.Pid, a); err != nil {
		t.Fatal(err)
	}
	if err := c.Trace(later.Process.Pid, a); err != nil {
		t.Fatal(err)
	}
	c.Untrace(later.Process.Pid)

	var mu sync.Mutex
	perPID := map[uint32]int{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.Run(ctx, func(e span.Event) {
			mu.Lock()
			perPID[e.PID]++
			mu.Unlock()
		}, nil)
	}()
	for _, name := range []string{"go", "later"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range []*exec.Cmd{traced, untraced, later} {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("fakectl: %v", err)
		}
	}
	// The counts are checked below, after what else would come, whether or not they came.
	testkit.Poll(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return perPID[uint32(traced.Process.Pid)] >= 2*n
	})
	time.Sleep(2 * PollInterval) // what else would come
	cancel()
	<-done

	mu.Lock()
	defer mu.Unlock()
	if got := perPID[uint32(traced.Process.Pid)]; got != 2*n {
		t.Errorf("traced process: %d events, want %d (an entry and a return per reconcile)", got, 2*n)
	}
	if got := perPID[uint32(untraced.Process.Pid)]; got != 0 {
		t.Errorf("process never traced: %d events, want 0", got)
	}
	if got := perPID[uint32(later.Process.Pid)]; got != 0 {
		t.Errorf("process traced then untraced: %d events, want 0", got)
	}
	cnt, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt.Hits != 2*n || cnt.LostRingBuffer != 0 {
		t.Errorf("kernel counters: %d hits, %d lost; want %d hits (the traced process's alone), 0 lost", cnt.Hits, cnt.LostRingBuffer, 2*n)
	}
}
