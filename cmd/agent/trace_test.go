package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// startTraceExe starts `trace --exe exe --output json` with more flags, if any; it returns the
// command, its output and its logs.
func startTraceExe(t *testing.T, agent, exe string, flags ...string) (*exec.Cmd, *testkit.LogBuffer, *testkit.LogBuffer) {
	t.Helper()
	cmd := exec.Command(agent, append([]string{"trace", "--exe", exe, "--output", "json"}, flags...)...)
	var out, logs testkit.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &out, &logs
}

// attachedLogged reports whether the agent logged that it attached an executable: its
// "attached" message, not a line that merely holds the word ("sync handlers not attached").
func attachedLogged(logs fmt.Stringer) bool {
	return strings.Contains(logs.String(), "level=INFO msg=attached ")
}

// waitAttached waits until the agent logged that it attached an executable.
func waitAttached(t *testing.T, logs fmt.Stringer) {
	t.Helper()
	waitLogged(t, logs, "trace to attach the executable", func() bool { return attachedLogged(logs) })
}

// TestTraceExeBeforeTheController: `trace --exe` runs before the controller starts; the
// controller's initial sync, its very first reconciles, are all spans (ground truth compared
// reconcile ID by reconcile ID).
func TestTraceExeBeforeTheController(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{})
	const objects = 20
	createSucceeding(t, env, "early-%02d", objects)
	cmd, out, logs := startTraceExe(t, agent, fixture)
	waitAttached(t, logs)

	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig, "--ground-truth", truthFile))
	truths, byID := waitSpansOfTruth(t, logs, out, truthFile, ctl.PID(), objects)
	t.Logf("%d reconciles in the initial sync, %d spans", len(truths), len(byID))
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
}

// TestTraceExeRunningController: `trace --exe` starts while the controller already runs; the
// process is found by the /proc scan (the discovery watcher) and traced: a reconcile made after
// is a span of that process.
func TestTraceExeRunningController(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{})
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig))

	cmd, out, logs := startTraceExe(t, agent, fixture)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "already-running",
		Annotations: map[string]string{"scripted.reconscope.io/script": "success"}}}
	waitAttached(t, logs)
	// Give the scan a moment to find the process, then reconcile.
	time.Sleep(time.Second)
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, fmt.Sprintf("a span of the running controller (pid %d)", ctl.PID()), 60*time.Second, func() (bool, string) {
		return strings.Contains(out.String(), `"name":"already-running"`) && strings.Contains(out.String(), fmt.Sprintf(`"pid":%d`, ctl.PID())),
			fmt.Sprintf("logs:\n%s\nout:\n%s", logs.String(), out.String())
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
}

// TestTraceStopKeepsLastReconcile: a trace stopped right after a reconcile (sooner than the
// reader's poll interval, while the reconcile's records wait in the ring buffer without a
// wakeup) still writes its span: the stop drains the ring buffer. Five rounds, each a
// reconcile then SIGTERM as soon as the fixture recorded it.
func TestTraceStopKeepsLastReconcile(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{})
	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig, "--ground-truth", truthFile))
	createSucceeding(t, env, "warm-%02d", 1)
	seen := 0
	for round := range 5 {
		cmd, out, logs := startTraceExe(t, agent, fixture)
		waitAttached(t, logs)
		time.Sleep(time.Second) // the running process joins at the scan after the attach
		seen, _ = countTruth(truthFile)
		createSucceeding(t, env, fmt.Sprintf("stop-%d-%%02d", round), 1)
		testkit.WaitFor(t, "the fixture's record of the reconcile", 30*time.Second, func() (bool, string) {
			n, _ := countTruth(truthFile)
			return n > seen, fmt.Sprintf("%d records", n)
		})
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if want := fmt.Sprintf(`"name":"stop-%d-00"`, round); !strings.Contains(out.String(), want) {
			t.Errorf("round %d: trace stopped right after the reconcile of stop-%d-00 wrote no span of it:\n%s\n%s", round, round, out.String(), logs.String())
		}
	}
}

func countTruth(path string) (int, error) {
	recs, err := groundtruth.ReadFile(path)
	return len(recs), err
}
