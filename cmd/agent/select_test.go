package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestTraceControllerWorkQueues: `trace --exe --controller keys` on the client-go fixture
// (queues keys, requests, events and an unnamed one) prints the spans of queue keys only, one
// per item the fixture's workers processed from it (its own record), and its summary counts the
// other queues' items as skipped: some by the kernel (no record), the rest by the agent.
func TestTraceControllerWorkQueues(t *testing.T) {
	agent := requireAgent(t)
	fixture := testkit.Build(t, "./test/fixtures/workqueue-controller")
	cmd, out, logs := startTraceExe(t, agent, fixture, "--controller", "k?ys")
	waitAttached(t, logs)
	// The exec watcher starts right after the attach is logged: the fixture, which runs for a
	// fraction of a second, must exec after it.
	time.Sleep(3 * time.Second)

	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	if b, err := exec.Command(fixture, "-truth", truthFile, "-items", "2000").CombinedOutput(); err != nil {
		t.Fatalf("fixture: %v\n%s", err, b)
	}
	truth, err := os.ReadFile(truthFile)
	if err != nil {
		t.Fatal(err)
	}
	items := map[string]int{}
	for _, line := range bytes.Split(bytes.TrimSpace(truth), []byte("\n")) {
		var r struct {
			Queue string `json:"queue"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		items[r.Queue]++
	}
	spans := func() map[string]int {
		n := map[string]int{}
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var s struct {
				Controller string `json:"controller"`
			}
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				n[s.Controller]++
			}
		}
		return n
	}
	testkit.WaitFor(t, "a span per item of queue keys", 30*time.Second, func() (bool, string) {
		n := spans()
		return n["keys"] >= items["keys"], fmt.Sprintf("spans %v, items %v, %d bytes out; logs:\n%s", n, items, len(out.String()), logs.String())
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()

	got := spans()
	if len(got) != 1 || got["keys"] != items["keys"] {
		t.Errorf("spans by controller %v, want only keys: %d (the fixture's items by queue: %v)", got, items["keys"], items)
	}
	m := regexp.MustCompile(`controllers not selected: (\d+) items skipped by the kernel \(no record\), (\d+) dropped by the agent`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no summary of the controllers not selected; logs:\n%s", logs.String())
	}
	kernel, _ := strconv.Atoi(m[1])
	agentDropped, _ := strconv.Atoi(m[2])
	others := len(bytes.Split(bytes.TrimSpace(truth), []byte("\n"))) - items["keys"]
	t.Logf("items %v; skipped: %d by the kernel, %d by the agent", items, kernel, agentDropped)
	if kernel == 0 {
		t.Errorf("the kernel skipped no item of the queues not selected")
	}
	if kernel+agentDropped != others {
		t.Errorf("%d items of other queues, %d skipped by the kernel + %d by the agent", others, kernel, agentDropped)
	}
}

// TestTraceControllerRuntimeExcluded: `trace --exe --controller` selecting none of a
// controller-runtime manager's controllers writes no span of it, and every reconcile of its
// ground truth was skipped: by the agent until it read the first, by the kernel after (its
// Reconcile probe's key, the controller's receiver).
func TestTraceControllerRuntimeExcluded(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{})
	cmd, out, logs := startTraceExe(t, agent, fixture, "--controller", "not-this-one")
	waitAttached(t, logs)
	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig, "--ground-truth", truthFile))
	// A first reconcile, read by the agent before the others come: it names the controller's
	// key, which the kernel skips from then on.
	const objects = 30
	createSucceeding(t, env, "first-%02d", 1)
	time.Sleep(2 * time.Second)
	createSucceeding(t, env, "excluded-%02d", objects-1)
	var truths []groundtruth.Record
	waitLogged(t, logs, fmt.Sprintf("%d reconciles in the ground truth", objects), func() bool {
		truths, _ = groundtruth.ReadFile(truthFile)
		return len(truths) >= objects
	})
	time.Sleep(time.Second) // the last reconciles' records, if any, are read
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	truths, _ = groundtruth.ReadFile(truthFile)

	if s := strings.TrimSpace(out.String()); s != "" {
		t.Errorf("spans written of a controller not selected:\n%s", s)
	}
	m := regexp.MustCompile(`controllers not selected: (\d+) items skipped by the kernel \(no record\), (\d+) dropped by the agent`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no summary of the controllers not selected; logs:\n%s", logs.String())
	}
	kernel, _ := strconv.Atoi(m[1])
	agentDropped, _ := strconv.Atoi(m[2])
	t.Logf("%d reconciles; skipped: %d by the kernel, %d by the agent", len(truths), kernel, agentDropped)
	if kernel == 0 || kernel+agentDropped != len(truths) {
		t.Errorf("%d reconciles, %d skipped by the kernel + %d by the agent: want all, the kernel's above zero", len(truths), kernel, agentDropped)
		t.Logf("logs:\n%s", logs.String())
	}
}
