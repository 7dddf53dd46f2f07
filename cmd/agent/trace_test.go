package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/test/fixtures/scripted-controller/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestTraceExeBeforeTheController: `trace --exe` runs before the controller starts; the
// controller's initial sync, its very first reconciles, are all spans (ground truth compared
// reconcile ID by reconcile ID).
func TestTraceExeBeforeTheController(t *testing.T) {
	bpftest.Require(t)
	agent, err := agentBinary()
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.Options{})
	fixture := testenv.BuildFixture(t, "./test/fixtures/scripted-controller")
	ctx := context.Background()
	const objects = 20
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("early-%02d", i),
			Annotations: map[string]string{"scripted.reconscope.io/script": "success"}}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(agent, "trace", "--exe", fixture, "--output", "json")
	var out, logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; logs:\n%s", what, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("trace to attach the executable", func() bool { return strings.Contains(logs.String(), "attached") })

	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig, "--ground-truth", truthFile))
	var truths []groundtruth.Record
	waitFor("the controller's initial sync", func() bool {
		truths, _ = groundtruth.ReadFile(truthFile)
		return len(truths) >= objects
	})
	byID := map[string]exporter.JSONSpan{}
	waitFor("a span for each reconcile of the initial sync", func() bool {
		for _, line := range strings.Split(out.String(), "\n") {
			var s exporter.JSONSpan
			if json.Unmarshal([]byte(line), &s) == nil && s.PID == uint32(ctl.PID()) {
				byID[s.ReconcileID] = s
			}
		}
		for _, r := range truths {
			if _, ok := byID[r.ReconcileID]; !ok {
				return false
			}
		}
		return true
	})
	for _, r := range truths {
		if s := byID[r.ReconcileID]; s.Name != r.Name || s.Result != r.MetricResult() {
			t.Errorf("reconcile %s of %s (%s): span of %s, %s", r.ReconcileID, r.Name, r.Outcome, s.Name, s.Result)
		}
	}
	t.Logf("%d reconciles in the initial sync, %d spans", len(truths), len(byID))
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
}
