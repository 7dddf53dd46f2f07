//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/lifeline"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// spanSource is where a test reads the spans the agent sent: the test's own OTLP receiver, or
// the trace backend behind a real collector.
type spanSource interface {
	// all returns every span received so far and how many requests (or queries) it took.
	all() ([]recvSpan, int)
}

// collectorBackend is the placeholder in deploy/otel-collector's configuration for the
// backend's OTLP endpoint, which a user replaces with theirs (and the test with Jaeger's).
const collectorBackend = "tracing-backend.example.invalid:4317"

// exampleCollectorConfig returns the collector configuration of deploy/otel-collector (the
// ConfigMap's config.yaml) with the backend placeholder replaced by backend, as a user does.
func exampleCollectorConfig(t *testing.T, backend string) string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/otel-collector/collector.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if err != nil {
			t.Fatalf("deploy/otel-collector/collector.yaml: no ConfigMap with config.yaml (%v)", err)
		}
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(doc, &cm); err != nil {
			t.Fatalf("deploy/otel-collector/collector.yaml: %v", err)
		}
		if cm.Kind != "ConfigMap" || cm.Data["config.yaml"] == "" {
			continue
		}
		cfg := cm.Data["config.yaml"]
		if strings.Count(cfg, collectorBackend) != 1 {
			t.Fatalf("deploy/otel-collector's configuration names %s %d times, want once", collectorBackend, strings.Count(cfg, collectorBackend))
		}
		return strings.Replace(cfg, collectorBackend, backend, 1)
	}
}

// startExampleCollector runs the real OpenTelemetry Collector with deploy/otel-collector's
// configuration, forwarding to Jaeger. Its receivers listen where the configuration says
// (0.0.0.0:4317 and :4318); the one override turns its own metrics port off (the test bed's
// ports are not the cluster's).
func startExampleCollector(t *testing.T, jaeger *testenv.Jaeger) *testenv.Collector {
	t.Helper()
	c := testenv.StartCollector(t, exampleCollectorConfig(t, jaeger.OTLPAddr), "service: {telemetry: {metrics: {level: none}}}\n")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(c.StderrPath())
			if len(b) > 8<<10 {
				b = b[len(b)-8<<10:]
			}
			t.Logf("collector log (tail):\n%s", b)
		}
	})
	return c
}

// jaegerSpans reads the agent's spans back from Jaeger: every service's traces since from.
type jaegerSpans struct {
	t    *testing.T
	j    *testenv.Jaeger
	from time.Time
}

func (s jaegerSpans) all() ([]recvSpan, int) {
	services, err := s.j.Services()
	if err != nil {
		s.t.Logf("jaeger services: %v", err)
		return nil, 0
	}
	seen := map[string]bool{}
	var out []recvSpan
	queries := 1
	for _, svc := range services {
		rss, err := s.j.FindTraces(svc, s.from, time.Now().Add(time.Minute))
		queries++
		if err != nil {
			s.t.Logf("jaeger traces of %s: %v", svc, err)
			continue
		}
		for _, rs := range rss {
			res := attrMap(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					id := hex.EncodeToString(sp.GetTraceId()) + hex.EncodeToString(sp.GetSpanId())
					if seen[id] {
						continue
					}
					seen[id] = true
					out = append(out, recvSpan{Resource: res, Span: sp})
				}
			}
		}
	}
	return out, queries
}

// checkJaegerTrace finds the reconciles of object name of the fixture's pod through Jaeger's
// API and checks what a user looks at there: each reconcile is a trace whose root is the
// reconcile span and whose other spans are its calls, children of the root (the fixture's Get
// of the object, then the calls its script makes: the ground truth's), and every reconcile
// after the first links to the one before it.
func checkJaegerTrace(t *testing.T, j *testenv.Jaeger, src spanSource, pod *corev1.Pod, name string, truth []groundtruth.Record) {
	t.Helper()
	wantReconciles, wantCalls := 0, 0
	for _, r := range truth {
		if r.Name == name {
			wantReconciles++
			wantCalls += 1 + len(r.Calls)
		}
	}
	var roots []recvSpan
	for _, s := range fixtureRoots(src, pod) {
		if attrStr(attrMap(s.Span.GetAttributes()), "k8s.object.name") == name {
			roots = append(roots, s)
		}
	}
	slices.SortFunc(roots, func(a, b recvSpan) int { return int(a.Span.GetStartTimeUnixNano() - b.Span.GetStartTimeUnixNano()) })
	if len(roots) != wantReconciles {
		t.Errorf("jaeger: %d reconcile spans of %s, want %d", len(roots), name, wantReconciles)
		return
	}
	totalCalls := 0
	var callNames []string
	for i, r := range roots {
		tid := hex.EncodeToString(r.Span.GetTraceId())
		rss, err := j.GetTrace(tid)
		if err != nil {
			t.Errorf("jaeger: trace %s of %s: %v", tid, name, err)
			continue
		}
		var others []string
		calls := 0
		for _, rs := range rss {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					switch {
					case bytes.Equal(sp.GetSpanId(), r.Span.GetSpanId()):
					case bytes.Equal(sp.GetParentSpanId(), r.Span.GetSpanId()):
						calls++
						callNames = append(callNames, sp.GetName())
					default:
						others = append(others, sp.GetName())
					}
				}
			}
		}
		if len(others) > 0 {
			t.Errorf("jaeger: trace %s of %s has spans that are neither its reconcile nor that reconcile's calls: %v", tid, name, others)
		}
		totalCalls += calls
		if i == 0 {
			continue
		}
		prev := roots[i-1].Span
		var linked bool
		for _, l := range r.Span.GetLinks() {
			if bytes.Equal(l.GetTraceId(), prev.GetTraceId()) && bytes.Equal(l.GetSpanId(), prev.GetSpanId()) &&
				attrStr(attrMap(l.GetAttributes()), "reconscope.link.type") == "previous_reconcile" {
				linked = true
			}
		}
		if !linked {
			t.Errorf("jaeger: reconcile %d of %s (trace %s) has no previous_reconcile link to reconcile %d (trace %s): links %v",
				i+1, name, tid, i, hex.EncodeToString(prev.GetTraceId()), r.Span.GetLinks())
		}
	}
	if totalCalls != wantCalls {
		t.Errorf("jaeger: the reconciles of %s have %d call spans %v, want %d", name, totalCalls, callNames, wantCalls)
	}
	t.Logf("jaeger: %d traces of %s, each linked to the one before, with %d call spans under their reconciles: %v", len(roots), name, totalCalls, callNames)
}

// startPodDiscoveryPrometheus runs Debian's Prometheus with the usual kubernetes-pods job:
// pods kept when annotated prometheus.io/scrape: "true", scraped at their prometheus.io/port
// and prometheus.io/path, labelled with their namespace and pod. Debian builds Prometheus
// without its Kubernetes service discovery ("field kubernetes_sd_configs not found"), so the
// pods come from the API server through http_sd_configs (podDiscovery: the same targets and
// __meta_kubernetes_pod_* labels kubernetes_sd_configs' pod role gives), and the job's
// relabelling is the one users write for kubernetes_sd_configs. It returns the base URL once
// Prometheus answers.
//
// features are Prometheus feature flags: exemplar-storage keeps the exemplars of OpenMetrics
// scrapes; native-histograms scrapes protobuf and ingests native histograms.
func startPodDiscoveryPrometheus(t *testing.T, cs kubernetes.Interface, features ...string) string {
	t.Helper()
	return startRulesPrometheus(t, cs, "", features...)
}

// startRulesPrometheus is startPodDiscoveryPrometheus that also evaluates the rule file rules
// (none when ""), every second.
func startRulesPrometheus(t *testing.T, cs kubernetes.Interface, rules string, features ...string) string {
	t.Helper()
	bin := requirePrometheus(t)
	sd := podDiscovery(t, cs)
	dir := t.TempDir()
	ruleFiles := ""
	if rules != "" {
		ruleFiles = fmt.Sprintf("rule_files: [%q]\n", rules)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
%sscrape_configs:
  - job_name: kubernetes-pods
    http_sd_configs:   # in place of kubernetes_sd_configs: [{role: pod}]
      - url: %s
        refresh_interval: 1s
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
        action: keep
        regex: "true"
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
        action: replace
        target_label: __metrics_path__
        regex: (.+)
      - source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
        action: replace
        regex: ([^:]+)(?::\d+)?;(\d+)
        replacement: $1:$2
        target_label: __address__
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
`, ruleFiles, sd)
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	args := []string{"--config.file=" + path, "--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr}
	if len(features) > 0 {
		args = append(args, "--enable-feature="+strings.Join(features, ","))
	}
	p := testenv.StartProcess(t, "prometheus", exec.Command(bin, args...))
	base := "http://" + addr
	testkit.WaitFor(t, "Prometheus ready", 60*time.Second, func() (bool, string) {
		mustRun(t, p, "prometheus")
		_, err := httpGet(base + "/-/ready")
		return err == nil, fmt.Sprint(err)
	})
	return base
}

// checkExemplars checks that the exemplars Prometheus kept for pod's reconcile durations lead
// to traces: each trace_id is a trace in Jaeger whose root is a reconcile of that pod.
func checkExemplars(t *testing.T, prom string, j *testenv.Jaeger, pod *corev1.Pod, since time.Time) {
	t.Helper()
	q := fmt.Sprintf(`reconscope_reconcile_duration_seconds_bucket{k8s_pod_name=%q}`, pod.Name)
	var ids []string
	testkit.WaitFor(t, "exemplars of "+pod.Name+"'s reconcile durations", 60*time.Second, func() (bool, string) {
		body, err := httpGet(fmt.Sprintf("%s/api/v1/query_exemplars?%s", prom,
			url.Values{"query": {q}, "start": {fmt.Sprint(since.Unix())}, "end": {fmt.Sprint(time.Now().Unix())}}.Encode()))
		if err != nil {
			return false, err.Error()
		}
		var r struct {
			Data []struct {
				Exemplars []struct {
					Labels map[string]string `json:"labels"`
				} `json:"exemplars"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			return false, err.Error()
		}
		ids = ids[:0]
		for _, s := range r.Data {
			for _, e := range s.Exemplars {
				ids = append(ids, e.Labels["trace_id"])
			}
		}
		return len(ids) > 0, "no exemplar yet"
	})
	for _, id := range ids {
		rss, err := j.GetTrace(id)
		if err != nil {
			t.Errorf("exemplar trace_id %s: %v", id, err)
			continue
		}
		found := false
		for _, rs := range rss {
			if attrStr(attrMap(rs.GetResource().GetAttributes()), "k8s.pod.name") != pod.Name {
				continue
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					if len(sp.GetParentSpanId()) == 0 && strings.HasPrefix(sp.GetName(), "reconcile ") {
						found = true
					}
				}
			}
		}
		if !found {
			t.Errorf("exemplar trace_id %s: Jaeger has no reconcile of %s in that trace (%d resource spans)", id, pod.Name, len(rss))
		}
	}
	t.Logf("exemplars: %d trace IDs on %s's reconcile durations, each a reconcile's trace in Jaeger", len(ids), pod.Name)
}

// sdTargetGroup is one entry of Prometheus's HTTP service discovery response.
type sdTargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// podDiscovery serves the API server's running pods as Prometheus HTTP service discovery
// target groups, one per container port (one per container without ports), with the
// addresses and __meta_kubernetes_* labels of kubernetes_sd_configs' pod role. It returns the
// URL.
func podDiscovery(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pods, err := cs.CoreV1().Pods("").List(r.Context(), metav1.ListOptions{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		groups := []sdTargetGroup{}
		for _, p := range pods.Items {
			if p.Status.PodIP == "" {
				continue
			}
			base := map[string]string{
				"__meta_kubernetes_namespace":     p.Namespace,
				"__meta_kubernetes_pod_name":      p.Name,
				"__meta_kubernetes_pod_ip":        p.Status.PodIP,
				"__meta_kubernetes_pod_uid":       string(p.UID),
				"__meta_kubernetes_pod_node_name": p.Spec.NodeName,
				"__meta_kubernetes_pod_phase":     string(p.Status.Phase),
				"__meta_kubernetes_pod_ready":     strconv.FormatBool(podReady(&p)),
				"__meta_kubernetes_pod_host_ip":   p.Status.HostIP,
			}
			for k, v := range p.Labels {
				base["__meta_kubernetes_pod_label_"+promName(k)] = v
				base["__meta_kubernetes_pod_labelpresent_"+promName(k)] = "true"
			}
			for k, v := range p.Annotations {
				base["__meta_kubernetes_pod_annotation_"+promName(k)] = v
				base["__meta_kubernetes_pod_annotationpresent_"+promName(k)] = "true"
			}
			for _, c := range p.Spec.Containers {
				ports := c.Ports
				if len(ports) == 0 {
					ports = []corev1.ContainerPort{{}}
				}
				for _, port := range ports {
					labels := maps.Clone(base)
					labels["__meta_kubernetes_pod_container_name"] = c.Name
					labels["__meta_kubernetes_pod_container_image"] = c.Image
					target := p.Status.PodIP
					if port.ContainerPort != 0 {
						target = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))
						labels["__meta_kubernetes_pod_container_port_name"] = port.Name
						labels["__meta_kubernetes_pod_container_port_number"] = strconv.Itoa(int(port.ContainerPort))
						labels["__meta_kubernetes_pod_container_port_protocol"] = string(port.Protocol)
					}
					groups = append(groups, sdTargetGroup{Targets: []string{target}, Labels: labels})
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(groups)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String() + "/pods"
}

// promName is a Kubernetes label or annotation key as kubernetes_sd_configs names its meta
// label: every character outside [a-zA-Z0-9_] becomes _.
func promName(k string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, k)
}

// waitScraped waits until Prometheus's pod discovery scrapes pod successfully.
func waitScraped(t *testing.T, base string, pod *corev1.Pod) {
	t.Helper()
	q := fmt.Sprintf(`up{job="kubernetes-pods",namespace=%q,pod=%q}`, pod.Namespace, pod.Name)
	testkit.WaitFor(t, "Prometheus discovers and scrapes pod "+pod.Namespace+"/"+pod.Name, 90*time.Second, func() (bool, string) {
		s, err := promQuery(base, q)
		if err != nil || len(s) != 1 {
			return false, fmt.Sprintf("%s: %v %v", q, s, err)
		}
		return s[0].Value == 1, fmt.Sprintf("%s = %v", q, s[0].Value)
	})
}

// checkLifelineInJaeger follows, through Jaeger's API, the causal link between two
// controllers of kube-controller-manager for the fixture's ReplicaSet: a reconcile of it by the
// replicaset controller links (read_version) to the version the deployment controller created,
// whose lifeline span Jaeger holds in the trace derived from the ReplicaSet's UID
// (pkg/lifeline). The IDs are derived on both sides, not exchanged. Every read_version link of
// the ReplicaSet's reconciles is in that trace.
func checkLifelineInJaeger(t *testing.T, j *testenv.Jaeger, src spanSource, kcmPod string, rs *appsv1.ReplicaSet) {
	t.Helper()
	want := lifeline.TraceID(string(rs.UID))
	found := map[string]string{} // link type -> the version whose lifeline span the deployment controller wrote
	testkit.WaitFor(t, "a replicaset reconcile of "+rs.Name+" linked, as its read version and as its trigger, to the version the deployment controller wrote", 90*time.Second, func() (bool, string) {
		all, _ := src.all()
		writers := map[string]map[string]string{} // link type -> resourceVersion -> its lifeline span's writer
		for _, s := range all {
			if attrStr(s.Resource, "k8s.pod.name") != kcmPod || s.Span.GetName() != "reconcile replicaset" ||
				attrStr(attrMap(s.Span.GetAttributes()), "k8s.object.name") != rs.Name {
				continue
			}
			for _, l := range s.Span.GetLinks() {
				typ := attrStr(attrMap(l.GetAttributes()), "reconscope.link.type")
				if typ != "read_version" && typ != "trigger" {
					continue
				}
				rv := attrStr(attrMap(l.GetAttributes()), "k8s.object.resource_version")
				if typ == "trigger" && attrStr(attrMap(l.GetAttributes()), "k8s.object.uid") != string(rs.UID) {
					continue // an event of another object (the ReplicaSet's pods), in that object's trace
				}
				if !bytes.Equal(l.GetTraceId(), want[:]) {
					t.Fatalf("lifeline: a %s link of %s (version %s) is in trace %x, not the one derived from its UID %s (%s)", typ, rs.Name, rv, l.GetTraceId(), rs.UID, want)
				}
				if writers[typ] == nil {
					writers[typ] = map[string]string{}
				}
				writers[typ][rv] = lifelineWriter(j, l)
				if writers[typ][rv] == "deployment" {
					found[typ] = rv
				}
			}
		}
		return len(found) == 2, fmt.Sprintf("versions of %s that replicaset reconciles read and were triggered by, by the writer of their lifeline span in Jaeger: %v", rs.Name, writers)
	})
	t.Logf("lifeline: replicaset controller's reconciles of %s read version %s and were triggered by version %s, whose lifeline spans (trace %s, derived from UID %s) the deployment controller wrote, found in Jaeger",
		rs.Name, found["read_version"], found["trigger"], want, rs.UID)
}

// lifelineWriter returns the writer controller of the lifeline span link l points to, as
// Jaeger holds it, or "" when Jaeger has no such span.
func lifelineWriter(j *testenv.Jaeger, l *tracepb.Span_Link) string {
	rss, err := j.GetTrace(hex.EncodeToString(l.GetTraceId()))
	if err != nil {
		return ""
	}
	for _, r := range rss {
		for _, ss := range r.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				if bytes.Equal(sp.GetSpanId(), l.GetSpanId()) {
					return attrStr(attrMap(sp.GetAttributes()), "reconscope.lifeline.writer")
				}
			}
		}
	}
	return ""
}
