package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/kubeapi"
	"github.com/reconscope/reconscope/pkg/metricsauth"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/testenv"
)

// spansReaderRole is deploy/metrics-auth's ClusterRole for kubectl reconscope users.
func spansReaderRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "metrics-auth", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if r, ok := obj.(*rbacv1.ClusterRole); err == nil && ok && r.Name == "reconscope-agent-spans-reader" {
			return r
		}
	}
	t.Fatal("deploy/metrics-auth/rbac.yaml has no ClusterRole reconscope-agent-spans-reader")
	return nil
}

// TestSecuredAgent: an agent serving --metrics-secure (HTTPS, each bearer token reviewed by a
// real kube-apiserver with metricsauth) is read by tail and top with the token of the user's
// kubeconfig when the user is bound to deploy/metrics-auth's spans reader role; another user
// gets the API server's refusal and what to do about it, and so does a user without a token.
func TestSecuredAgent(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, spansReaderRole(t), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	viewer, stranger := testenv.ServiceAccountToken(t, cs, "default", "viewer"), testenv.ServiceAccountToken(t, cs, "default", "stranger")
	testenv.BindClusterRole(t, cs, "viewer-spans", "reconscope-agent-spans-reader", "default", "viewer")

	// The agent: its handler behind the filter --metrics-secure puts in front of it, over TLS.
	m := exporter.NewMetrics(exporter.MetricsOptions{})
	st := exporter.NewSpanStream(10, exporter.JSONClock)
	reviews, err := kubeapi.NewForConfig(env.Config) // the agent's client
	if err != nil {
		t.Fatal(err)
	}
	filter := metricsauth.New(metricsauth.Options{Client: reviews, Open: []string{"/healthz", "/readyz"}})
	srv := httptest.NewTLSServer(filter.Wrap(exporter.AgentHandler(m, st)))
	defer srv.Close()
	agent := &agentEndpoint{srv: srv, writer: exporter.Multi{st, m}, stream: st}
	agent.reconcile(1, "widgets", "ns-a", "w1", span.ResultError, time.Millisecond)
	agent.reconcile(2, "widgets", "ns-a", "w1", span.ResultSuccess, time.Millisecond)

	read := func(kubeconfig, flagToken string) (string, error) {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		hc, err := agentClient(cfg, flagToken, true)
		if err != nil {
			t.Fatal(err)
		}
		src := httpSource("secure", srv.URL, hc)
		var out, errOut bytes.Buffer
		if err := tail(ctx, []source{src}, exporter.SpanFilter{Errors: true}, false, newSpanPrinter("json", &out), &errOut); err != nil {
			return errOut.String(), err
		}
		rep, err := top(ctx, []source{src}, 0, exporter.SpanFilter{}, &errOut)
		if err != nil {
			return errOut.String(), err
		}
		if len(rep.controllers) != 1 || rep.controllers[0].reconciles != 2 || rep.controllers[0].errors != 1 {
			t.Errorf("top through the secured agent: %+v, want widgets with 2 reconciles, 1 error", rep.controllers)
		}
		return out.String(), nil
	}

	out, err := read(env.KubeconfigWithToken(t, viewer), "")
	if err != nil {
		t.Fatalf("viewer: %v\n%s", err, out)
	}
	if got := jsonNames(t, out); strings.Join(got, ";") != "widgets ns-a/w1 error" {
		t.Errorf("viewer's tail --errors = %v, want widgets ns-a/w1's error", got)
	}
	// --token wins over the kubeconfig's
	if _, err := read(env.KubeconfigWithToken(t, stranger), viewer); err != nil {
		t.Errorf("--token of the viewer: %v", err)
	}
	for _, tt := range []struct {
		name, token string
		want        []string
	}{
		{"not bound", stranger, []string{"403", "system:serviceaccount:default:stranger", "reconscope-agent-spans-reader"}},
		{"no token", "", []string{"401", "--token"}},
	} {
		msg, err := read(env.KubeconfigWithToken(t, tt.token), "")
		if err == nil {
			t.Errorf("%s: read the secured agent", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: the message %q does not say %q", tt.name, msg, w)
			}
		}
	}
}
