package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestSecretSpansCarryNamesNotData: a controller reconciling Secrets (the fixture with --kind
// secret) is traced by the agent with JSON output and OTLP export. Its spans name each Secret
// (namespace, name, UID) and never carry its data, in plain or base64, in either output; and an
// error message that quotes a sensitive word is redacted by --redact-errors in both, its type
// kept. A bad --error-messages value is refused.
func TestSecretSpansCarryNamesNotData(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{})
	recv := testkit.StartOTLPReceiver(t)

	if out, err := exec.Command(agent, "trace", "--exe", fixture, "--error-messages", "hide").CombinedOutput(); err == nil || !strings.Contains(string(out), `--error-messages "hide": want keep or drop`) {
		t.Errorf("--error-messages hide: %v, %s", err, out)
	}

	cmd := exec.Command(agent, "trace", "--exe", fixture, "--output", "json",
		"--otlp-endpoint", recv.Addr, "--otlp-protocol", "grpc", "--otlp-insecure", "--redact-errors", `token-[a-z0-9]+`)
	var out, logs testkit.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitAttached(t, &logs)

	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	ctl := testenv.StartProcess(t, "scripted", exec.Command(fixture, "--kubeconfig", env.Kubeconfig, "--kind", "secret", "--ground-truth", truthFile))
	const value = "pa55-w0rd-5ecret-value-7f3a91" // the Secret's data: in no output, plain or encoded
	ctx := context.Background()
	secrets := map[string]string{"db-creds": "success", "token-q7x2": "times:1;error-status"}
	uids := map[string]string{}
	for name, script := range secrets {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Annotations: map[string]string{"scripted.reconscope.io/script": script}},
			Data: map[string][]byte{"password": []byte(value)}}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		uids[name] = string(s.UID)
	}
	truths, byID := waitSpansOfTruth(t, &logs, &out, truthFile, ctl.PID(), 3)
	waitLogged(t, &logs, "the error's span exported", func() bool { return bytes.Contains(recv.Raw(), []byte("token-q7x2")) })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()

	for _, r := range truths {
		s := byID[r.ReconcileID]
		if s.Controller != "scripted" || s.Namespace != "default" || s.Name != r.Name || s.UID != uids[r.Name] || string(s.Result) != r.MetricResult() {
			t.Errorf("reconcile %s of Secret %s (%s, uid %s): span %s %s/%s uid %s %s", r.ReconcileID, r.Name, r.Outcome, uids[r.Name], s.Controller, s.Namespace, s.Name, s.UID, s.Result)
		}
		if r.Outcome != groundtruth.OutcomeError {
			continue
		}
		if !strings.Contains(r.Error, "token-q7x2") {
			t.Fatalf("the fixture's error %q does not quote the Secret's name: the redaction is not tested", r.Error)
		}
		want := strings.ReplaceAll(r.Error, "token-q7x2", exporter.Redacted)
		if s.Error != want || s.ErrorType != r.ErrorType {
			t.Errorf("error span of %s: %s %q, want %s %q", r.Name, s.ErrorType, s.Error, r.ErrorType, want)
		}
		if otlp := recv.Raw(); !bytes.Contains(otlp, []byte(want)) || bytes.Contains(otlp, []byte(r.Error)) {
			t.Errorf("the OTLP export lacks the redacted message %q or holds the original", want)
		}
	}
	outputs := map[string][]byte{"JSON output": []byte(out.String()), "OTLP export": recv.Raw(), "agent log": []byte(logs.String())}
	for what, b := range outputs {
		for _, v := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("the %s holds the Secret's data (%q)", what, v)
			}
		}
	}
	if !bytes.Contains(recv.Raw(), []byte("db-creds")) {
		t.Error("the OTLP export does not name the Secret db-creds")
	}
}
