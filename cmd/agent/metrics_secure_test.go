package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/testenv"
)

// createManifests creates on the API server the objects of the YAML file (relative to the
// module root) whose kind is in kinds.
func createManifests(t *testing.T, c client.Client, file string, kinds ...string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
		if err != nil {
			continue // comments only
		}
		for _, k := range kinds {
			if gvk.Kind == k {
				if err := c.Create(context.Background(), obj.(client.Object)); err != nil {
					t.Fatalf("%s: create %s: %v", file, gvk.Kind, err)
				}
			}
		}
	}
}

// TestRunMetricsSecure runs the agent with --metrics-secure against a real kube-apiserver, as
// the ServiceAccount the manifests give it (deploy/daemonset.yaml's, plus the RBAC of the
// deploy/metrics-auth component), and scrapes it as a user would: without a token (401), with
// a token the API server does not know (401), as a ServiceAccount not bound to the reader role
// (403), and as one bound to it (200, the metrics). The probes' paths stay open, and plain
// HTTP is refused. The span stream (/spans) is behind the same check: a kubectl reconscope
// user bound to the spans reader role reads it and /metrics, the metrics reader does not.
func TestRunMetricsSecure(t *testing.T) {
	agent := requireAgent(t)
	env := testenv.Start(t, testenv.Options{})
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)

	// The agent's identity: the manifests' ServiceAccount and roles, nothing more.
	createManifests(t, env.Client, "deploy/daemonset.yaml", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
	createManifests(t, env.Client, "deploy/metrics-auth/rbac.yaml", "ClusterRole", "ClusterRoleBinding")
	agentToken := testenv.ServiceAccountToken(t, cs, "reconscope", "reconscope-agent")
	agentKubeconfig := env.KubeconfigWithToken(t, agentToken)

	// Two scrapers: one bound to the reader role, one not.
	reader := testenv.ServiceAccountToken(t, cs, "default", "prometheus")
	stranger := testenv.ServiceAccountToken(t, cs, "default", "stranger")
	testenv.BindClusterRole(t, cs, "prometheus-reconscope-metrics", "reconscope-agent-metrics-reader", "default", "prometheus")
	// A kubectl reconscope user, bound to the spans reader role.
	viewer := testenv.ServiceAccountToken(t, cs, "default", "viewer")
	testenv.BindClusterRole(t, cs, "viewer-reconscope-spans", "reconscope-agent-spans-reader", "default", "viewer")

	addr := testenv.FreeAddr(t)
	cmd := exec.Command(agent, "run", "--kubeconfig", agentKubeconfig, "--node-name", "node-1", "--metrics-addr", addr,
		"--metrics-secure", "--log-format", "json", "--detail-switch-max", "1")
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=")
	logs := &testkit.LogBuffer{}
	cmd.Stdout, cmd.Stderr = io.Discard, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// The certificate is self-signed (no --metrics-cert-file): a scraper skips verification.
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed by design
	get := func(scheme, path, token string) (int, string, error) {
		return do(hc, http.MethodGet, scheme+"://"+addr+path, token)
	}
	testkit.WaitFor(t, "the agent to be ready over HTTPS", 60*time.Second, func() (bool, string) {
		code, _, err := get("https", "/readyz", "")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d, %v; logs:\n%s", code, err, logs.String())
	})

	for _, tt := range []struct {
		name, path, token string
		want              int
		body              string
	}{
		{"probe without token", "/healthz", "", http.StatusOK, "ok"},
		{"no token", "/metrics", "", http.StatusUnauthorized, "Unauthorized"},
		{"unknown token", "/metrics", "not-a-token", http.StatusUnauthorized, "Unauthorized"},
		{"not bound to the reader role", "/metrics", stranger, http.StatusForbidden, "system:serviceaccount:default:stranger"},
		{"reader", "/metrics", reader, http.StatusOK, "reconscope_build_info"},
		{"reader again (cached)", "/metrics", reader, http.StatusOK, "reconscope_build_info"},
		{"stranger again (cached)", "/metrics", stranger, http.StatusForbidden, "Authorization denied"},
		{"reader on a path the role does not name", "/debug", reader, http.StatusForbidden, "Authorization denied"},
		{"span stream without token", "/spans", "", http.StatusUnauthorized, "Unauthorized"},
		{"span stream, metrics reader only", "/spans", reader, http.StatusForbidden, "system:serviceaccount:default:prometheus"},
		{"span stream, spans reader", "/spans", viewer, http.StatusOK, ""},
		{"metrics, spans reader", "/metrics", viewer, http.StatusOK, "reconscope_span_stream_readers_dropped_total 0"},
	} {
		code, body, err := get("https", tt.path, tt.token)
		if err != nil {
			t.Errorf("%s: GET %s: %v", tt.name, tt.path, err)
			continue
		}
		if code != tt.want || !strings.Contains(body, tt.body) {
			t.Errorf("%s: GET %s = %d %.200q, want %d and %q", tt.name, tt.path, code, body, tt.want, tt.body)
		}
	}
	if code, body, err := get("http", "/metrics", reader); err == nil && code == http.StatusOK {
		t.Errorf("plain HTTP served the metrics: %.200q", body)
	}
	if strings.Contains(logs.String(), "not reviewed") {
		t.Errorf("a review failed (missing RBAC?):\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"secure":true`) {
		t.Errorf("the agent did not log that it serves metrics securely:\n%s", logs.String())
	}

	// On-demand detail switches (--detail-switch-max 1): POST /detail, for whoever may post
	// there, and nobody else (TestDetailHandler has what the handler does).
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reconscope-detail-switcher"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/detail"}, Verbs: []string{"get", "post"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	oncall := testenv.ServiceAccountToken(t, cs, "default", "oncall")
	testenv.BindClusterRole(t, cs, "oncall-reconscope-detail", "reconscope-detail-switcher", "default", "oncall")
	for _, tt := range []struct {
		name, method, path, token string
		want                      int
		body                      string
	}{
		{"switch without token", http.MethodPost, "/detail?controller=deployment", "", http.StatusUnauthorized, "Unauthorized"},
		{"switch as the metrics reader", http.MethodPost, "/detail?controller=deployment", reader, http.StatusForbidden, "Authorization denied"},
		// authorized: the handler answers (it traces no controller here; detail_test.go has the rest)
		{"switch a controller not traced", http.MethodPost, "/detail?controller=deployment&for=2m", oncall, http.StatusNotFound, "no span of it"},
		{"no controller", http.MethodPost, "/detail", oncall, http.StatusBadRequest, "controller=NAME"},
		{"list", http.MethodGet, "/detail", oncall, http.StatusOK, `{"switched":{}}`},
	} {
		code, body, err := do(hc, tt.method, "https://"+addr+tt.path, tt.token)
		if err != nil {
			t.Errorf("%s: %s %s: %v", tt.name, tt.method, tt.path, err)
			continue
		}
		if code != tt.want || !strings.Contains(body, tt.body) {
			t.Errorf("%s: %s %s = %d %.200q, want %d and %q", tt.name, tt.method, tt.path, code, body, tt.want, tt.body)
		}
	}
}

// do sends one request with a bearer token (none when empty) and returns the answer.
func do(hc *http.Client, method, url, token string) (int, string, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}
