//go:build e2e

// Package otlp tests the agent's OTLP export (pkg/exporter, configured as the agent and the
// Helm chart configure it) against a real OpenTelemetry Collector (test/tools/otelcol) that
// forwards to a real Jaeger, where the test reads what arrived: mutual TLS that the collector
// requires, and the k8sattributes processor associating spans with their pod by k8s.pod.uid.
//
// Build tag e2e: the collector and Jaeger are built from source on first use (the heavy
// third-party builds), so these tests run in make e2e, not make test.
package otlp

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/testenv"
)

// reconcileSpan is one finished reconcile of a process that serves as service.
func reconcileSpan(service string, w *span.Workload) *span.Span {
	now := ktime.Monotonic()
	return &span.Span{
		Controller: "configmap", Namespace: "default", Name: service, PID: 4242, Exe: "/" + service, Goid: 1,
		Start: now - uint64(2*time.Millisecond), Duration: time.Millisecond, Result: span.ResultSuccess, Noop: true,
		Workload: w,
	}
}

// export sends spans through the agent's OTLP exporter to endpoint and returns its counts
// once it has shut down (every span is then exported or dropped).
func export(t *testing.T, protocol exporter.Protocol, endpoint string, spans ...*span.Span) exporter.OTLPStats {
	t.Helper()
	e, err := exporter.NewOTLP(context.Background(), exporter.OTLPOptions{
		Endpoint:      endpoint,
		Protocol:      protocol,
		Clock:         ktime.NewClock(),
		BatchTimeout:  10 * time.Millisecond,
		ExportTimeout: 10 * time.Second,
		Retry:         &exporter.RetryOptions{Disabled: true},
		Logger:        testkit.Quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range spans {
		if err := e.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = e.Shutdown(ctx)
	return e.Stats()
}

// waitResourceSpans returns Jaeger's spans of service, waiting up to 30 s for them.
func waitResourceSpans(t *testing.T, j *testenv.Jaeger, service string, since time.Time) []*tracepb.ResourceSpans {
	t.Helper()
	var rs []*tracepb.ResourceSpans
	testkit.WaitFor(t, fmt.Sprintf("a span of service %s to reach Jaeger through the collector", service), 30*time.Second, func() (bool, string) {
		var err error
		rs, err = j.FindTraces(service, since, time.Now().Add(time.Minute))
		return err == nil && len(rs) > 0, fmt.Sprintf("last error: %v", err)
	})
	return rs
}

func resourceAttrs(rs *tracepb.ResourceSpans) map[string]string {
	m := map[string]string{}
	for _, kv := range rs.GetResource().GetAttributes() {
		m[kv.GetKey()] = anyString(kv.GetValue())
	}
	return m
}

func anyString(v *commonpb.AnyValue) string {
	if s, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		return s.StringValue
	}
	return fmt.Sprint(v.GetValue())
}

// startCollector runs the test collector with receivers and processors (YAML of the
// collector's configuration at that level, indented as below; processors may be empty) in
// one traces pipeline that forwards to Jaeger. Its own metrics endpoint is off (it would bind
// :8888).
func startCollector(t *testing.T, jaeger *testenv.Jaeger, receivers, processors string, pipelineProcessors ...string) {
	t.Helper()
	cfg := "receivers:\n" + receivers
	if processors != "" {
		cfg += "processors:\n" + processors
	}
	cfg += fmt.Sprintf(`exporters:
  otlp/jaeger:
    endpoint: %s
    tls:
      insecure: true
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [%s]
      exporters: [otlp/jaeger]
  telemetry:
    metrics:
      level: none
`, jaeger.OTLPAddr, strings.Join(pipelineProcessors, ", "))
	testenv.StartCollector(t, cfg)
}

// TestOTLPMutualTLS: a collector whose OTLP receivers require a client certificate signed by
// its CA receives the agent's spans over gRPC and over http/protobuf when the agent is given
// the CA, its certificate and key the way the Helm chart gives them (OTEL_EXPORTER_OTLP_CERTIFICATE,
// OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_KEY); without the client
// certificate the collector refuses them, and the exporter counts them dropped (the agent's
// reconscope_spans_dropped_total).
func TestOTLPMutualTLS(t *testing.T) {
	files := testenv.WriteTLSFiles(t)
	jaeger := testenv.StartJaeger(t)
	grpcAddr, httpAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	tlsCfg := fmt.Sprintf(`
        tls:
          cert_file: %s
          key_file: %s
          client_ca_file: %s`, files.ServerCert, files.ServerKey, files.CA)
	startCollector(t, jaeger, fmt.Sprintf(`  otlp:
    protocols:
      grpc:
        endpoint: %s%s
      http:
        endpoint: %s%s
`, grpcAddr, tlsCfg, httpAddr, tlsCfg), "")

	start := time.Now().Add(-time.Minute)
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", files.CA)
	for _, tt := range []struct {
		protocol exporter.Protocol
		endpoint string
	}{
		{exporter.ProtocolGRPC, "https://" + grpcAddr},
		{exporter.ProtocolHTTPProtobuf, "https://" + httpAddr},
	} {
		t.Run(string(tt.protocol), func(t *testing.T) {
			service := "mtls-" + strings.ReplaceAll(string(tt.protocol), "/", "-")
			// Without a client certificate: the handshake fails, the spans are dropped.
			t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "")
			t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", "")
			os.Unsetenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
			os.Unsetenv("OTEL_EXPORTER_OTLP_CLIENT_KEY")
			refused := export(t, tt.protocol, tt.endpoint, reconcileSpan(service+"-refused", nil))
			if refused.Exported != 0 || refused.Dropped != 1 {
				t.Errorf("without a client certificate: exported %d, dropped %d; want 0 and 1", refused.Exported, refused.Dropped)
			}
			// With it: exported, and the span arrives.
			t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", files.ClientCert)
			t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", files.ClientKey)
			st := export(t, tt.protocol, tt.endpoint, reconcileSpan(service, nil))
			if st.Exported != 1 || st.Dropped != 0 {
				t.Fatalf("with the client certificate: exported %d, dropped %d; want 1 and 0", st.Exported, st.Dropped)
			}
			rs := waitResourceSpans(t, jaeger, service, start)
			if got := resourceAttrs(rs[0])["service.name"]; got != service {
				t.Errorf("service.name %q, want %q", got, service)
			}
			if rs, _ := jaeger.FindTraces(service+"-refused", start, time.Now().Add(time.Minute)); len(rs) != 0 {
				t.Errorf("the span sent without a client certificate reached Jaeger")
			}
		})
	}
}

// TestK8sAttributesAssociation: the contrib k8sattributes processor, configured as
// docs/exporters.md shows (pod association from the resource attribute k8s.pod.uid), attributes
// the agent's spans to the pod they name: a Pod created in a real kube-apiserver (no kubelet
// needed) gets its name and a label onto the spans of a process whose k8s.pod.uid is the
// pod's UID; spans of an unknown UID get nothing.
func TestK8sAttributesAssociation(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-operator-7d9f", Labels: map[string]string{"app.kubernetes.io/name": "demo-operator"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "manager", Image: "example.com/manager:v1"}}},
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	jaeger := testenv.StartJaeger(t)
	grpcAddr := testenv.FreeAddr(t)
	// auth_type kubeConfig reads $KUBECONFIG (in a cluster: serviceAccount, with RBAC to
	// get/list/watch pods).
	t.Setenv("KUBECONFIG", env.Kubeconfig)
	startCollector(t, jaeger, fmt.Sprintf(`  otlp:
    protocols:
      grpc:
        endpoint: %s
`, grpcAddr), `  k8sattributes:
    auth_type: kubeConfig
    wait_for_metadata: true
    extract:
      metadata: [k8s.pod.name, k8s.namespace.name, k8s.node.name]
      labels:
        - tag_name: app.label.name
          key: app.kubernetes.io/name
          from: pod
    pod_association:
      - sources:
          - from: resource_attribute
            name: k8s.pod.uid
`, "k8sattributes")

	start := time.Now().Add(-time.Minute)
	// What the agent knows of a traced process whose pod it has not indexed: the pod UID
	// from its cgroup, no pod name.
	known := reconcileSpan("associated", &span.Workload{PodUID: string(pod.UID)})
	unknown := reconcileSpan("unassociated", &span.Workload{PodUID: "00000000-0000-0000-0000-000000000000"})
	if st := export(t, exporter.ProtocolGRPC, "http://"+grpcAddr, known, unknown); st.Exported != 2 {
		t.Fatalf("exported %d spans, dropped %d; want 2 exported", st.Exported, st.Dropped)
	}
	got := resourceAttrs(waitResourceSpans(t, jaeger, "associated", start)[0])
	for k, want := range map[string]string{
		"k8s.pod.uid":        string(pod.UID),
		"k8s.pod.name":       pod.Name,
		"k8s.namespace.name": "default",
		"k8s.node.name":      "node-1",
		"app.label.name":     "demo-operator",
	} {
		if got[k] != want {
			t.Errorf("resource attribute %s = %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
	other := resourceAttrs(waitResourceSpans(t, jaeger, "unassociated", start)[0])
	if other["app.label.name"] != "" || other["k8s.pod.name"] != "" {
		t.Errorf("a span of an unknown pod UID was attributed to a pod: %v", other)
	}
}
