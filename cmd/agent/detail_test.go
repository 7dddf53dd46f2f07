package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/detail"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestDetailHandler: what POST and GET /detail answer, behind the token filter
// (TestRunMetricsSecure has the filter): a switch of a traced controller, one past
// --detail-switch-max, one of a controller not traced, bad requests; each switch counted once.
func TestDetailHandler(t *testing.T) {
	var switched []string
	pol, err := detail.New(detail.Options{Default: probes.DetailReconcile, Switches: true, MaxSwitched: 1, Logger: testkit.Quiet(),
		OnSwitch: func(c string, to probes.Detail, _ string) { switched = append(switched, c+"="+to.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	known := func(c string) bool { return c == "deployment" || c == "replicaset" }
	h := detailHandler(pol, known, testkit.Quiet())
	for _, tt := range []struct {
		method, target string
		want           int
		body           string
	}{
		{http.MethodGet, "/detail", http.StatusOK, `{"switched":{}}`},
		{http.MethodPost, "/detail?controller=deployment&for=2m", http.StatusOK, `"deployment":`},
		{http.MethodPost, "/detail?controller=deployment", http.StatusOK, `"deployment":`}, // extends it
		{http.MethodPost, "/detail?controller=replicaset", http.StatusConflict, "too many"},
		{http.MethodPost, "/detail?controller=job", http.StatusNotFound, "no span of it"},
		{http.MethodPost, "/detail?controller=deployment&for=-1s", http.StatusBadRequest, "positive duration"},
		{http.MethodPost, "/detail", http.StatusBadRequest, "controller=NAME"},
		{http.MethodDelete, "/detail", http.StatusMethodNotAllowed, "POST"},
		{http.MethodGet, "/detail", http.StatusOK, `"deployment":`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, nil))
		if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("%s %s = %d %q, want %d and %q", tt.method, tt.target, rec.Code, rec.Body.String(), tt.want, tt.body)
		}
	}
	if len(switched) != 1 || switched[0] != "deployment=calls" {
		t.Errorf("switches reported %v, want deployment to calls once", switched)
	}
}

// TestRunConfigDetailReload runs the agent with a config file whose detail section puts every
// controller at reconcile, while the fixture reconciles two objects every 20 ms (each reconcile
// lists the namespace's ConfigMaps from its cache); then the file is changed to put the
// fixture's controller at calls, as a ConfigMap's update would: the agent says it reloaded,
// the spans gain their calls (the cache list), and every reconcile of the fixture's ground
// truth, before, during and after the reload, has exactly one span with its object and result;
// in the order of their starts the spans are without calls, then with.
func TestRunConfigDetailReload(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{})
	config := filepath.Join(t.TempDir(), "config.yaml")
	write := func(text string) {
		t.Helper()
		tmp := config + ".new" // renamed over the file, as the kubelet swaps a ConfigMap's files
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, config); err != nil {
			t.Fatal(err)
		}
	}
	// --detail calls on the command line: the file's default wins.
	write("exclude: []\ndetail:\n  default: reconcile\n")
	cmd := exec.Command(agent, "run", "--config", config, "--detail", "calls", "--metrics-addr", "", "--scan-interval", "200ms",
		"--log-format", "json", "--output", "json")
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=", "NODE_NAME=")
	var out, logs testkit.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig, "--ground-truth", truthFile))
	waitLogged(t, &logs, "the agent to trace the fixture", func() bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":"tracing","pid":%d`, ctl.PID()))
	})
	for _, name := range []string{"flow-0", "flow-1"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Annotations: map[string]string{"scripted.reconscope.io/script": "list:configmap;requeue-after:20ms"}}}
		if err := env.Client.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := waitSpansOfTruth(t, &logs, &out, truthFile, ctl.PID(), 40)

	write("exclude: []\ndetail:\n  default: reconcile\n  controllers:\n    - controller: scripted\n      detail: calls\n")
	waitLogged(t, &logs, "the agent to reload its config", func() bool {
		return strings.Contains(logs.String(), `"msg":"config reloaded: detail"`)
	})
	recs, _ := groundtruth.ReadFile(truthFile)
	truths, _ := waitSpansOfTruth(t, &logs, &out, truthFile, ctl.PID(), len(recs)+150)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}

	// Every reconcile one span; in start order, without calls, then with.
	var spans []exporter.JSONSpan
	perID := map[string]int{}
	for _, line := range strings.Split(out.String(), "\n") {
		var s exporter.JSONSpan
		if json.Unmarshal([]byte(line), &s) == nil && s.PID == uint32(ctl.PID()) {
			spans = append(spans, s)
			perID[s.ReconcileID]++
		}
	}
	for id, n := range perID {
		if n != 1 {
			t.Errorf("reconcile %s: %d spans", id, n)
		}
	}
	slices.SortFunc(spans, func(a, b exporter.JSONSpan) int { return a.Start.Compare(b.Start) })
	runs, with := testkit.DetailRuns(spans, func(s exporter.JSONSpan) bool { return len(s.Calls) > 0 })
	if !slices.Equal(runs, []bool{false, true}) {
		t.Errorf("spans in start order, with calls or not: %v; want none, then calls", runs)
	}
	for _, s := range spans[:min(len(before), len(spans))] {
		if len(s.Calls) > 0 {
			t.Errorf("%s/%s began before the reload and has %d calls", s.Namespace, s.Name, len(s.Calls))
		}
	}
	t.Logf("%d reconciles in the ground truth checked (%d before the reload), %d spans, %d with calls; runs %v", len(truths), len(before), len(spans), with, runs)
}
