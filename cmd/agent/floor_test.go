package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestRunBelowFloor: on a node whose kernel lacks a required feature (forced here), `run`
// stays up and not Ready, says why in one log line and on /readyz, is live on /healthz (no
// restart loop), prints no verifier log, and exits 0 on SIGTERM.
func TestRunBelowFloor(t *testing.T) {
	bin := requireAgent(t)
	addr := testenv.FreeAddr(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "run", "--metrics-addr", addr, "--log-format", "text", "--kubeconfig", "")
	cmd.Env = append(os.Environ(), collector.PretendMissingEnv+"=cookie")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var code int
	var body string
	testkit.WaitFor(t, "the agent to answer /readyz", 30*time.Second, func() (bool, string) {
		code, body = get("/readyz")
		return code != 0, body
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "attach cookies on uprobes") || !strings.Contains(body, "Linux 5.15") {
		t.Fatalf("/readyz: %d %q, want 503 naming the missing feature and its release", code, body)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q, want 200 (stay up, no restart loop)", code, body)
	}
	// /metrics answers, so the node shows as not tracing instead of vanishing from Prometheus.
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `reconscope_tracing{reason="kernel_below_floor"} 0`) ||
		!strings.Contains(body, "reconscope_build_info{") {
		t.Errorf("/metrics: %d, want 200 with reconscope_tracing{reason=\"kernel_below_floor\"} 0 and reconscope_build_info:\n%s", code, body)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("the agent did not stay up: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	var errLines []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "level=ERROR") {
			errLines = append(errLines, l)
		}
	}
	if len(errLines) != 1 || !strings.Contains(errLines[0], "Linux 5.15") {
		t.Errorf("want one error line naming the floor, got:\n%s", stderr.String())
	}
	if strings.Contains(strings.ToLower(stderr.String()), "verifier") {
		t.Errorf("a verifier log reached the user:\n%s", stderr.String())
	}
}
