package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/discovery"
)

const chartDir = "helm/reconscope"

// helmOnlyLabels are the labels the chart adds to every object (Helm's conventions) and to the
// DaemonSet's selector and pod template (app.kubernetes.io/instance, so that releases stay
// apart). They are the documented difference between the chart's default render and deploy/.
var helmOnlyLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// helmBinary returns Helm, built (once, cached) by test/tools/build-helm.sh.
func helmBinary(t *testing.T) string {
	t.Helper()
	return testkit.Helm(t)
}

func helmTemplate(t *testing.T, helm string, args ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	return objects(t, run(t, helm, append([]string{"template", "reconscope", chartDir, "--namespace", "reconscope"}, args...)...))
}

// normalize removes what the chart adds by design (helmOnlyLabels, the config checksum) and
// round-trips the object through its Go type, so that the same object written two ways (a
// defaulted field, key order, quoting) compares equal.
func normalize(t *testing.T, u *unstructured.Unstructured) map[string]any {
	t.Helper()
	strip := func(m map[string]string) map[string]string {
		for _, l := range helmOnlyLabels {
			delete(m, l)
		}
		return m
	}
	u = u.DeepCopy()
	u.SetLabels(strip(u.GetLabels()))
	var typed any
	switch u.GetKind() {
	case "DaemonSet":
		var ds appsv1.DaemonSet
		convert(t, u, &ds)
		strip(ds.Spec.Selector.MatchLabels)
		strip(ds.Spec.Template.Labels)
		delete(ds.Spec.Template.Annotations, "checksum/config")
		typed = &ds
	case "ConfigMap":
		var cm corev1.ConfigMap
		convert(t, u, &cm)
		// config.yaml compares as the YAML document it is (the chart writes it with toYaml).
		for k, v := range cm.Data {
			var doc any
			if err := yaml.Unmarshal([]byte(v), &doc); err != nil {
				t.Fatalf("ConfigMap %s: %s: %v", cm.Name, k, err)
			}
			b, _ := json.Marshal(doc)
			cm.Data[k] = string(b)
		}
		typed = &cm
	default:
		typed = u.Object
	}
	b, err := json.Marshal(typed)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
		if l, ok := md["labels"].(map[string]any); ok && len(l) == 0 {
			delete(md, "labels")
		}
	}
	return m
}

// loadConfig reads the config.yaml of cm as the agent reads the file the ConfigMap is mounted
// as (discovery.LoadConfig), failing t with the file when the agent would refuse it.
func loadConfig(t *testing.T, cm corev1.ConfigMap) discovery.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := discovery.LoadConfig(path)
	if err != nil {
		t.Fatalf("the agent refuses the config.yaml of ConfigMap %s:\n%s\n%v", cm.Name, cm.Data["config.yaml"], err)
	}
	return cfg
}

func convert(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

// grafanaDir is the kustomize component that adds the Grafana dashboard as a ConfigMap for
// Grafana's dashboard sidecar (the chart's dashboard.enabled).
const grafanaDir = "grafana"

// TestChartMatchesKustomize: the chart's default render (release "reconscope" in namespace
// reconscope) and `kubectl kustomize deploy/` make the same agent: DaemonSet, ServiceAccount,
// ClusterRole and binding, ConfigMap. The only differences are documented ones: Helm's labels
// (helmOnlyLabels) and the config checksum annotation; the chart adds a headless metrics
// Service; the kustomization creates the namespace (the chart does with namespace.create).
// Likewise metrics.secure=true and an overlay of deploy/ with the metrics-auth component make
// the same agent and the same RBAC, and dashboard.enabled=true and the grafana component the
// same dashboard ConfigMap.
func TestChartMatchesKustomize(t *testing.T) {
	helm := helmBinary(t)
	kubectl := kubectlBinary(t)
	for _, tt := range []struct {
		name       string
		helmArgs   []string
		components []string
		compared   int
	}{
		{name: "default", compared: 5},
		{name: "metrics.secure", helmArgs: []string{"--set", "metrics.secure=true"}, components: []string{metricsAuthDir}, compared: 9},
		{name: "dashboard", helmArgs: []string{"--set", "dashboard.enabled=true"}, components: []string{grafanaDir}, compared: 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			chart := helmTemplate(t, helm, tt.helmArgs...)
			kust := objects(t, run(t, kubectl, "kustomize", overlay(t, tt.components...)))
			compareChartKustomize(t, chart, kust, tt.compared)
		})
	}
}

// overlay returns deploy/ itself, or a kustomization in a temporary folder that has deploy/
// as its resource and components (folders of deploy/), as a user's overlay would.
func overlay(t *testing.T, components ...string) string {
	t.Helper()
	if len(components) == 0 {
		return "."
	}
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, wd)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\ncomponents:\n", rel)
	for _, c := range components {
		k += fmt.Sprintf("  - %s\n", filepath.Join(rel, c))
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func compareChartKustomize(t *testing.T, chart, kust map[string]*unstructured.Unstructured, wantCompared int) {
	t.Helper()
	var chartKeys, kustKeys []string
	for k := range chart {
		chartKeys = append(chartKeys, k)
	}
	for k := range kust {
		kustKeys = append(kustKeys, k)
	}
	sort.Strings(chartKeys)
	sort.Strings(kustKeys)
	wantOnlyChart := []string{"Service/reconscope/reconscope-agent-metrics"}
	wantOnlyKustomize := []string{"Namespace//reconscope"}
	var onlyChart, onlyKust []string
	for _, k := range chartKeys {
		if kust[k] == nil {
			onlyChart = append(onlyChart, k)
		}
	}
	for _, k := range kustKeys {
		if chart[k] == nil {
			onlyKust = append(onlyKust, k)
		}
	}
	if !slices.Equal(onlyChart, wantOnlyChart) || !slices.Equal(onlyKust, wantOnlyKustomize) {
		t.Errorf("objects only in the chart %v (want %v), only in deploy/ %v (want %v)", onlyChart, wantOnlyChart, onlyKust, wantOnlyKustomize)
	}
	compared := 0
	for _, k := range kustKeys {
		if chart[k] == nil {
			continue
		}
		compared++
		a, b := normalize(t, kust[k]), normalize(t, chart[k])
		if !reflect.DeepEqual(a, b) {
			ja, _ := yaml.Marshal(a)
			jb, _ := yaml.Marshal(b)
			t.Errorf("%s differs:\n--- kubectl kustomize deploy/\n%s\n--- helm template\n%s", k, ja, jb)
		}
	}
	if compared != wantCompared {
		t.Errorf("compared %d objects (%v), want %d", compared, kustKeys, wantCompared)
	}
	// The labels the chart adds are present (the comparison above removed them).
	ds := chart["DaemonSet/reconscope/reconscope-agent"]
	if ds == nil {
		t.Fatal("chart renders no DaemonSet reconscope-agent")
	}
	if got := ds.GetLabels()["app.kubernetes.io/instance"]; got != "reconscope" {
		t.Errorf("DaemonSet instance label %q", got)
	}
}

func TestChartLint(t *testing.T) {
	helm := helmBinary(t)
	run(t, helm, "lint", "--strict", chartDir)
	run(t, helm, "lint", "--strict", chartDir, "--values", filepath.Join("testdata", "chart-all-options.yaml"))
}

// TestChartOptions renders the chart with every option set (testdata/chart-all-options.yaml)
// and checks each lands where the agent reads it.
func TestChartOptions(t *testing.T) {
	helm := helmBinary(t)
	objs := helmTemplate(t, helm, "--values", filepath.Join("testdata", "chart-all-options.yaml"))
	for _, k := range []string{
		"Namespace//reconscope", "PodMonitor/reconscope/reconscope-agent", "ServiceMonitor/reconscope/reconscope-agent",
		"PrometheusRule/reconscope/reconscope-agent", "Service/reconscope/reconscope-agent-metrics",
	} {
		if objs[k] == nil {
			t.Errorf("no %s", k)
		}
	}
	var ds appsv1.DaemonSet
	convert(t, objs["DaemonSet/reconscope/reconscope-agent"], &ds)
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "registry.example.com/reconscope-agent@sha256:"+strings.Repeat("ab", 32) || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s %s: want the digest and Always", c.Image, c.ImagePullPolicy)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, want := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":           "https://collector.example.com:4318",
		"OTEL_EXPORTER_OTLP_PROTOCOL":           "http/protobuf",
		"OTEL_EXPORTER_OTLP_CERTIFICATE":        "/etc/reconscope/otlp-tls/ca.crt",
		"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/etc/reconscope/otlp-tls/tls.crt",
		"OTEL_EXPORTER_OTLP_CLIENT_KEY":         "/etc/reconscope/otlp-tls/tls.key",
		"RECONSCOPE_SCAN_INTERVAL":              "5s",
	} {
		if env[name].Value != want {
			t.Errorf("%s = %q, want %q", name, env[name].Value, want)
		}
	}
	if h := env["OTEL_EXPORTER_OTLP_HEADERS"]; h.ValueFrom == nil || h.ValueFrom.SecretKeyRef == nil || h.ValueFrom.SecretKeyRef.Name != "otlp-headers" {
		t.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %+v, want from Secret otlp-headers", h)
	}
	var mounts, volumes []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, fmt.Sprintf("%s:%s:%v", m.Name, m.MountPath, m.ReadOnly))
	}
	for _, v := range pod.Volumes {
		volumes = append(volumes, v.Name)
	}
	if !slices.Equal(mounts, []string{"config:/etc/reconscope:true", "otlp-tls:/etc/reconscope/otlp-tls:true", "metrics-tls:/etc/reconscope/metrics-tls:true", "scratch:/tmp:false"}) ||
		!slices.Equal(volumes, []string{"config", "otlp-tls", "metrics-tls", "scratch"}) {
		t.Errorf("mounts %v, volumes %v", mounts, volumes)
	}

	// config: the agent reads the rules the chart wrote, controllers included.
	var cm corev1.ConfigMap
	convert(t, objs["ConfigMap/reconscope/reconscope-config"], &cm)
	f, err := discovery.NewFilter(loadConfig(t, cm))
	if err != nil {
		t.Fatal(err)
	}
	kcm := discovery.Target{Process: discovery.Process{PID: 1, Exe: "/usr/local/bin/kube-controller-manager"}}
	if c := f.ControllersOf(kcm); !slices.Equal(c.Include, []string{"deployment", "replicaset"}) || !slices.Equal(c.Exclude, []string{"garbage_collector_*"}) {
		t.Errorf("kube-controller-manager's controllers from the chart's config: %+v", c)
	}

	// metrics.secure: the agent's flags, HTTPS probes, the RBAC, and monitors that scrape over
	// HTTPS with the token Secret and the CA given.
	wantArgs := []string{"run", "--config=/etc/reconscope/config.yaml", "--metrics-secure",
		"--metrics-cert-file=/etc/reconscope/metrics-tls/tls.crt", "--metrics-key-file=/etc/reconscope/metrics-tls/tls.key"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %q, want %q", c.Args, wantArgs)
	}
	if c.LivenessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS || c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("probes over %s and %s, want HTTPS", c.LivenessProbe.HTTPGet.Scheme, c.ReadinessProbe.HTTPGet.Scheme)
	}
	if v := pod.Volumes[2]; v.Secret == nil || v.Secret.SecretName != "agent-metrics-tls" {
		t.Errorf("metrics-tls volume %+v, want Secret agent-metrics-tls", v)
	}
	for _, k := range []string{"ClusterRole//reconscope-agent-metrics-auth", "ClusterRoleBinding//reconscope-agent-metrics-auth", "ClusterRole//reconscope-agent-metrics-reader", "ClusterRole//reconscope-agent-spans-reader"} {
		if objs[k] == nil {
			t.Errorf("no %s", k)
		}
	}
	for k, field := range map[string]string{"PodMonitor/reconscope/reconscope-agent": "podMetricsEndpoints", "ServiceMonitor/reconscope/reconscope-agent": "endpoints"} {
		eps, _, _ := unstructured.NestedSlice(objs[k].Object, "spec", field)
		ep, _ := eps[0].(map[string]any)
		scheme, _, _ := unstructured.NestedString(ep, "scheme")
		cred, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
		ca, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "name")
		if scheme != "https" || cred != "prometheus-token" || ca != "agent-metrics-tls" {
			t.Errorf("%s endpoint: scheme %q, token Secret %q, CA Secret %q; want https, prometheus-token, agent-metrics-tls", k, scheme, cred, ca)
		}
	}
	// A PodMonitor and a ServiceMonitor scrape the agents: no prometheus.io annotations too.
	for a := range ds.Spec.Template.Annotations {
		if strings.HasPrefix(a, "prometheus.io/") {
			t.Errorf("pod annotation %s beside the PodMonitor and ServiceMonitor: a double scrape", a)
		}
	}
	if pod.PriorityClassName != "" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" {
		t.Errorf("priorityClassName %q, tolerations %+v: the values' overrides are not applied", pod.PriorityClassName, pod.Tolerations)
	}

	// The PrometheusRule holds deploy/prometheus/reconscope-rules.yaml's groups.
	var plain map[string]any
	b, err := os.ReadFile(filepath.Join("prometheus", "reconscope-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &plain); err != nil {
		t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedFieldNoCopy(objs["PrometheusRule/reconscope/reconscope-agent"].Object, "spec")
	if !reflect.DeepEqual(jsonRoundTrip(t, spec.(map[string]any)["groups"]), jsonRoundTrip(t, plain["groups"])) {
		t.Error("the chart's PrometheusRule and deploy/prometheus/reconscope-rules.yaml hold different rules")
	}

	// A change of config rolls the pods: the checksum annotation changes with it.
	checksum := func(args ...string) string {
		var d appsv1.DaemonSet
		convert(t, helmTemplate(t, helm, args...)["DaemonSet/reconscope/reconscope-agent"], &d)
		return d.Spec.Template.Annotations["checksum/config"]
	}
	a, b2 := checksum(), checksum("--set", "config.include[0].executables[0]=kube-controller-manager")
	if a == "" || a == b2 {
		t.Errorf("checksum/config %q, after a config change %q: want a checksum that changes", a, b2)
	}
}

func jsonRoundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
