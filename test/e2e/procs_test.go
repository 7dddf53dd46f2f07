//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/testenv"
)

// builtinsPackage is controller-runtime's example program the test traces: nobody here wrote
// it. It is built from the controller-runtime release this module requires (go.mod), with this
// module's dependency versions, so its build shares the build cache with the fixture's.
const builtinsPackage = "sigs.k8s.io/controller-runtime/examples/builtins"

// builtinsPorts are the ports builtins binds on every interface; it has no flag to move them.
var builtinsPorts = []string{"8080", "9443"}

// installBuiltins starts the build of controller-runtime's builtins example (static, as the
// fixture: it runs on the host and in an image with nothing else) into a folder of its own and
// returns a function that waits for it and returns the binary's path.
func installBuiltins(t *testing.T) func() string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "builtins")
	type result struct {
		err error
		d   time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		err := testkit.GoBuild(out, builtinsPackage, []string{"CGO_ENABLED=0"}, "-trimpath")
		done <- result{err, time.Since(start)}
	}()
	return func() string {
		t.Helper()
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("built %s in %s", builtinsPackage, r.d.Round(time.Millisecond))
		return out
	}
}

// usePrivateControlPlane points testenv at a folder of this test holding (hard links to) the
// cached control-plane binaries, so kube-controller-manager runs from a path no other test on
// the machine uses: the agent's --config selects exactly this test's processes by path.
func usePrivateControlPlane(t *testing.T) {
	t.Helper()
	shared, err := testenv.ControlPlaneDir()
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	private := filepath.Join(t.TempDir(), "controlplane")
	if err := os.MkdirAll(private, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-controller-manager-stripped", "kubectl"} {
		src, dst := filepath.Join(shared, name), filepath.Join(private, name)
		if err := os.Link(src, dst); err == nil {
			continue
		}
		if err := testkit.CopyFile(src, dst); err != nil { // another file system: copy
			t.Fatalf("control plane: %v", err)
		}
	}
	t.Setenv(testenv.ControlPlaneDirEnv, private)
}

// checkPortsFree fails the test when a port builtins needs is taken: builtins would exit, and
// its ports cannot be changed.
func checkPortsFree(t *testing.T, ports []string) {
	t.Helper()
	for _, p := range ports {
		l, err := net.Listen("tcp", ":"+p)
		if err != nil {
			t.Fatalf("port %s is taken (%v): controller-runtime's builtins example binds :8080 (metrics) and :9443 (webhook) "+
				"and has no flag to move them; run one end-to-end test at a time", p, err)
		}
		l.Close()
	}
}

// writeServingCert writes a self-signed certificate for 127.0.0.1 and localhost as tls.crt and
// tls.key in dir, where controller-runtime's webhook server looks for them.
func writeServingCert(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "reconscope-e2e-webhook"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// mustRun fails the test when p has exited.
func mustRun(t *testing.T, p *testenv.Process, name string) {
	t.Helper()
	select {
	case <-p.Done():
		t.Fatalf("%s exited early: %v (its stderr is in the log below)", name, p.Wait())
	default:
	}
}

// completeLines returns the lines of the file at path that end in a newline: a writer may be in
// the middle of the last one.
func completeLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		return nil
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// lineAfter returns the rest of the first line of the file at path that starts with prefix.
func lineAfter(path, prefix string) (string, bool) {
	for _, line := range completeLines(path) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

// agentLog is one line of the agent's JSON log (slog's JSON handler).
type agentLog map[string]any

func agentLogs(path string) []agentLog {
	var out []agentLog
	for _, line := range completeLines(path) {
		var l agentLog
		if json.Unmarshal([]byte(line), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

func (l agentLog) msg() string { s, _ := l["msg"].(string); return s }

func (l agentLog) int(key string) int64 {
	f, _ := l[key].(float64)
	return int64(f)
}

// httpGet returns the body of url, or an error for anything but 200.
func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// globEscape escapes path.Match's special characters, so a path matches only itself.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// startRunAgent starts the agent as the DaemonSet runs it (`run`), on node, limited to the
// executables exes (other tests on the machine may run controllers too), exporting OTLP/gRPC to
// otlpAddr and writing JSON spans to its stdout and JSON logs to its stderr. It returns the
// agent and its metrics address.
func startRunAgent(t *testing.T, agentBin, kubeconfig, node, otlpAddr string, exes ...string) (*testenv.Process, string) {
	t.Helper()
	var globs []string
	for _, e := range exes {
		globs = append(globs, globEscape(e))
	}
	list, _ := json.Marshal(globs)
	cfgPath := filepath.Join(t.TempDir(), "reconscope.yaml")
	if err := os.WriteFile(cfgPath, []byte("include:\n  - executables: "+string(list)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	metricsAddr := testenv.FreeAddr(t)
	agent := testenv.StartProcess(t, "reconscope-agent "+node, exec.Command(agentBin, "run",
		"--kubeconfig", kubeconfig, "--node-name", node, "--metrics-addr", metricsAddr, "--scan-interval", "200ms",
		"--otlp-endpoint", otlpAddr, "--otlp-protocol", "grpc", "--otlp-insecure",
		"--output", "json", "--log-format", "json", "--config", cfgPath, "--detail", "calls"))
	return agent, metricsAddr
}

// waitTracing waits until the agent has logged "tracing" for every process of pids (PID →
// name).
func waitTracing(t *testing.T, agent *testenv.Process, pids map[int]string) {
	t.Helper()
	testkit.WaitFor(t, "the agent traces "+fmt.Sprint(len(pids))+" processes", 90*time.Second, func() (bool, string) {
		mustRun(t, agent, "reconscope-agent")
		seen := map[int]bool{}
		for _, l := range agentLogs(agent.StderrPath()) {
			if l.msg() == "tracing" {
				seen[int(l.int("pid"))] = true
			}
		}
		var missing []string
		for pid, name := range pids {
			if !seen[pid] {
				missing = append(missing, fmt.Sprintf("%s (pid %d)", name, pid))
			}
		}
		sort.Strings(missing)
		return len(missing) == 0, "not tracing " + strings.Join(missing, ", ")
	})
}
