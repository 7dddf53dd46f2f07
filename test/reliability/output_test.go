package reliability

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/internal/testproc"
)

// TestAgentOutputNotRead: the agent's standard output is a pipe nobody reads (a reader that
// stopped, a terminal stopped with Ctrl-S). Once the pipe is full the agent keeps tracing,
// drops the spans it cannot print (says so at once, counts them), and stops on SIGTERM like
// any other time, saying how many it dropped; the traced process is unharmed. Before the
// output had its queue, the event loop blocked in the write and SIGTERM was ignored.
func TestAgentOutputNotRead(t *testing.T) {
	agent, bin, stop, ctl := agentAndBusyFakectl(t, 2, "200us")

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() }) // open, never read: writes block once the pipe is full
	cmd := agentCommand(agent, agentProbe(t, bin), ctl.PID())
	cmd.Stdout = w
	a := testproc.Start(t, "agent", cmd)
	w.Close() // the agent holds the only write end

	stderr := func() string { b, _ := os.ReadFile(a.StderrPath()); return string(b) }
	// A pipe holds 64 KiB, about a hundred spans, and the output queue 4096 more: 10000
	// reconciles after the attach fill both.
	testkit.Eventually(t, "the agent to attach", 2*time.Minute, func() bool { return strings.Contains(stderr(), "attached") })
	before := len(lines(t, ctl))
	testkit.Eventually(t, "10000 more reconciles", 2*time.Minute, func() bool {
		if a.Exited() {
			t.Fatalf("agent exited (%v):\n%s", a.Wait(), stderr())
		}
		return len(lines(t, ctl)) >= before+10000
	})
	if !strings.Contains(stderr(), "output does not keep up") {
		t.Errorf("the agent did not say at once that its output drops spans:\n%s", stderr())
	}
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(time.Minute):
		t.Fatalf("the agent did not stop within a minute of SIGTERM while its output was blocked:\n%s", stderr())
	}
	if a.Wait() != nil {
		t.Fatalf("agent exit: %v\n%s", a.Wait(), stderr())
	}
	m := regexp.MustCompile(`output: (\d+) spans not written`).FindStringSubmatch(stderr())
	if m == nil {
		t.Fatalf("the agent's exit report does not count the spans it dropped:\n%s", stderr())
	}
	n, _ := strconv.Atoi(m[1])
	if n == 0 {
		t.Fatalf("0 spans dropped reported, yet the output was blocked:\n%s", stderr())
	}
	if ctl.Exited() {
		t.Fatalf("fakectl died while traced: %v", ctl.Wait())
	}
	total := stopFakectl(t, ctl, stop)
	t.Logf("agent stopped on SIGTERM with its output blocked, %d spans dropped; fakectl: %d reconciles, each once", n, total)
}
