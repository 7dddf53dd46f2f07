package deploy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	k8sdiscovery "k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/reconscope/reconscope/deploy/grafana"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/kubeapi"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/testenv"
)

// wantCapabilities are the capabilities the agent adds back after dropping ALL (DESIGN.md §7).
var wantCapabilities = []string{"BPF", "DAC_READ_SEARCH", "PERFMON", "SYS_PTRACE"}

const (
	agentNamespace = "reconscope"
	agentAccount   = "reconscope-agent"
)

// document is one YAML document of a manifest file.
type document struct {
	file string
	raw  []byte
	obj  runtime.Object
}

// notManifests are the folders of deploy/ that hold no kubectl manifests: the Helm chart
// (templates; chart_test.go renders it), the Prometheus rules (rules_test.go) and the chart
// test's values (testdata).
var notManifests = map[string]bool{"helm": true, "prometheus": true, "testdata": true}

// manifests returns every Kubernetes object in deploy/ (kustomization files aside), decoded
// with client-go's scheme.
func manifests(t *testing.T) []document {
	t.Helper()
	var docs []document
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if notManifests[path] {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" || filepath.Base(path) == "kustomization.yaml" {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: split YAML documents: %v", path, err)
			}
			if isEmptyDocument(raw) {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
			if err != nil {
				t.Fatalf("%s: decode document:\n%s\n%v", path, raw, err)
			}
			docs = append(docs, document{file: path, raw: raw, obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no manifests found in deploy/")
	}
	return docs
}

// isEmptyDocument reports whether a YAML document holds only comments and blank lines.
func isEmptyDocument(raw []byte) bool {
	for _, line := range strings.Split(string(raw), "\n") {
		if l := strings.TrimSpace(line); l != "" && l != "---" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func only[T runtime.Object](t *testing.T, docs []document) (T, string) {
	t.Helper()
	var found []T
	var files []string
	for _, d := range docs {
		if o, ok := d.obj.(T); ok {
			found = append(found, o)
			files = append(files, d.file)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T in deploy/, found %d", zero, len(found))
	}
	return found[0], files[0]
}

func TestManifestsParse(t *testing.T) {
	docs := manifests(t)
	kinds := map[string]int{}
	for _, d := range docs {
		kinds[d.obj.GetObjectKind().GroupVersionKind().Kind]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Deployment", "Service", "ConfigMap"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in deploy/", k)
		}
	}
}

// kustomizations are the folders users apply with kubectl apply -k: the agent, and the
// example collector, separately.
var kustomizations = []string{".", "otel-collector", metricsAuthDir, grafanaDir}

// metricsAuthDir is the kustomize component that turns on --metrics-secure and adds the RBAC
// it needs (off unless a user's overlay names it).
const metricsAuthDir = "metrics-auth"

// TestKustomizationsListEveryManifest checks that kubectl apply -k deploy/ or
// deploy/otel-collector/ applies every manifest file, and that every listed resource exists.
func TestKustomizationsListEveryManifest(t *testing.T) {
	covered := map[string]bool{}
	var visit func(dir string)
	visit = func(dir string) {
		b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		var k struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		for _, r := range k.Resources {
			p := filepath.Join(dir, r)
			fi, err := os.Stat(p)
			if err != nil {
				t.Errorf("%s/kustomization.yaml lists %s: %v", dir, r, err)
				continue
			}
			if fi.IsDir() {
				visit(p)
			} else {
				covered[p] = true
			}
		}
	}
	for _, k := range kustomizations {
		visit(k)
	}
	seen := map[string]bool{}
	for _, d := range manifests(t) {
		if !seen[d.file] && !covered[d.file] {
			t.Errorf("%s is in no kustomization.yaml", d.file)
		}
		seen[d.file] = true
	}
}

func TestRBACIsPodsReadOnly(t *testing.T) {
	// The agent's roles without the metrics-auth component (TestMetricsAuthRBAC checks its).
	docs := slices.DeleteFunc(manifests(t), func(d document) bool { return filepath.Dir(d.file) == metricsAuthDir })
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}
	var roles int
	for _, d := range docs {
		var rules []rbacv1.PolicyRule
		switch o := d.obj.(type) {
		case *rbacv1.ClusterRole:
			rules = o.Rules
			if o.AggregationRule != nil {
				t.Errorf("%s: ClusterRole %s aggregates other roles", d.file, o.Name)
			}
		case *rbacv1.Role:
			rules = o.Rules
		default:
			continue
		}
		roles++
		if len(rules) != len(want) {
			t.Errorf("%s: %d rules, want exactly %v", d.file, len(rules), want)
			continue
		}
		for i, r := range rules {
			w := want[i]
			if !slices.Equal(r.APIGroups, w.APIGroups) || !slices.Equal(r.Resources, w.Resources) ||
				!slices.Equal(sorted(r.Verbs), sorted(w.Verbs)) || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
				t.Errorf("%s: rule %+v, want exactly %+v", d.file, r, w)
			}
			for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs) {
				if strings.Contains(s, "*") || s == "secrets" {
					t.Errorf("%s: rule grants %q", d.file, s)
				}
			}
		}
	}
	if roles != 1 {
		t.Errorf("%d roles in deploy/, want 1 (the agent's)", roles)
	}
	crb, file := only[*rbacv1.ClusterRoleBinding](t, docs)
	role, _ := only[*rbacv1.ClusterRole](t, docs)
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != role.Name {
		t.Errorf("%s: binding refers to %+v, want ClusterRole %s", file, crb.RoleRef, role.Name)
	}
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: agentAccount, Namespace: agentNamespace}
	if len(crb.Subjects) != 1 || crb.Subjects[0] != wantSubject {
		t.Errorf("%s: subjects %+v, want only %+v", file, crb.Subjects, wantSubject)
	}
}

// TestMetricsAuthRBAC: the metrics-auth component lets the agent's ServiceAccount create
// TokenReviews and SubjectAccessReviews, nothing else, its reader role grants get on
// /metrics only (kubebuilder's metrics-reader), and its spans reader (kubectl reconscope) get
// on /metrics and /spans.
func TestMetricsAuthRBAC(t *testing.T) {
	var roles map[string][]rbacv1.PolicyRule = map[string][]rbacv1.PolicyRule{}
	var bindings []*rbacv1.ClusterRoleBinding
	for _, d := range manifests(t) {
		if filepath.Dir(d.file) != metricsAuthDir {
			continue
		}
		switch o := d.obj.(type) {
		case *rbacv1.ClusterRole:
			roles[o.Name] = o.Rules
		case *rbacv1.ClusterRoleBinding:
			bindings = append(bindings, o)
		default:
			t.Errorf("%s: unexpected %T", d.file, o)
		}
	}
	want := map[string][]rbacv1.PolicyRule{
		"reconscope-agent-metrics-auth": {
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		},
		"reconscope-agent-metrics-reader": {{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		"reconscope-agent-spans-reader":   {{NonResourceURLs: []string{"/metrics", "/spans"}, Verbs: []string{"get"}}},
	}
	if !reflect.DeepEqual(roles, want) {
		t.Errorf("metrics-auth roles %+v, want %+v", roles, want)
	}
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: agentAccount, Namespace: agentNamespace}
	if len(bindings) != 1 || bindings[0].RoleRef.Name != "reconscope-agent-metrics-auth" ||
		len(bindings[0].Subjects) != 1 || bindings[0].Subjects[0] != wantSubject {
		t.Errorf("metrics-auth bindings %+v: want one binding of reconscope-agent-metrics-auth to %+v (the reader role is for the user to bind)", bindings, wantSubject)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func TestDaemonSetSecurity(t *testing.T) {
	docs := manifests(t)
	ds, file := only[*appsv1.DaemonSet](t, docs)
	pod := ds.Spec.Template.Spec
	if ds.Namespace != agentNamespace || pod.ServiceAccountName != agentAccount {
		t.Errorf("%s: namespace %q, service account %q; want %q, %q", file, ds.Namespace, pod.ServiceAccountName, agentNamespace, agentAccount)
	}
	if !pod.HostPID {
		t.Errorf("%s: hostPID is off: the agent would see only its own processes", file)
	}
	if pod.HostNetwork || pod.HostIPC {
		t.Errorf("%s: hostNetwork or hostIPC set: not needed", file)
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s: hostPath volume %s: none is needed", file, v.Name)
		}
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "" && tl.Operator == corev1.TolerationOpExists && tl.Effect == ""
	}) {
		t.Errorf("%s: tolerations %+v: want every taint tolerated (operator: Exists), control-plane nodes included", file, pod.Tolerations)
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("%s: priorityClassName %q, want system-node-critical", file, pod.PriorityClassName)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("%s: nodeSelector %v, want kubernetes.io/os: linux", file, pod.NodeSelector)
	}
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("%s: %d containers and %d init containers, want one container", file, len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	if got := append(slices.Clone(c.Command), c.Args...); !slices.Equal(got, []string{"/reconscope-agent", "run", "--config=/etc/reconscope/config.yaml"}) {
		t.Errorf("%s: runs %q, want /reconscope-agent run --config=/etc/reconscope/config.yaml", file, got)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.MountPath == "/etc/reconscope" && m.ReadOnly && m.Name == "config"
	}) || !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
		return v.Name == "config" && v.ConfigMap != nil && v.ConfigMap.Name == "reconscope-config"
	}) {
		t.Errorf("%s: the reconscope-config ConfigMap is not mounted read-only at /etc/reconscope", file)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatalf("%s: no container securityContext with capabilities", file)
	}
	if got := capNames(sc.Capabilities.Drop); !slices.Equal(got, []string{"ALL"}) {
		t.Errorf("%s: drops %v, want [ALL]", file, got)
	}
	if got := sorted(capNames(sc.Capabilities.Add)); !slices.Equal(got, wantCapabilities) {
		t.Errorf("%s: adds %v, want exactly %v", file, got, wantCapabilities)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem is not true", file)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", file)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", file)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type == "" {
		t.Errorf("%s: no seccomp profile set", file)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("%s: runAsUser is not 0: added capabilities would not be effective", file)
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e, ok := env["NODE_NAME"]; !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("%s: NODE_NAME is not from fieldRef spec.nodeName: %+v", file, e)
	}
	// The example collector's OTLP/gRPC port, and the protocol named: an endpoint on 4317
	// spoken to in http/protobuf gets its connection reset (issue 13).
	endpoint, protocol := env["OTEL_EXPORTER_OTLP_ENDPOINT"].Value, env["OTEL_EXPORTER_OTLP_PROTOCOL"].Value
	if endpoint != "http://otel-collector.observability:4317" || protocol != "grpc" {
		t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT=%q OTEL_EXPORTER_OTLP_PROTOCOL=%q, want the collector's gRPC port 4317 with protocol grpc", file, endpoint, protocol)
	}
	if collectorPort(t) != "4317" {
		t.Errorf("the example collector's gRPC receiver is not on 4317")
	}
	if _, ok := env["OTEL_SERVICE_NAME"]; ok {
		t.Errorf("%s: OTEL_SERVICE_NAME is set: it would name every traced controller alike", file)
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
			t.Errorf("%s: no %s limit", file, r)
		}
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("%s: no %s request", file, r)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9464 {
		t.Errorf("%s: ports %+v, want metrics 9464", file, c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s: probe for %s: %+v", file, name, p)
		}
	}
	ann := ds.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "9464" {
		t.Errorf("%s: Prometheus scrape annotations: %v", file, ann)
	}
}

// configMap returns the last ConfigMap in deploy/ for which is returns true, and fails t when
// there is none (what names it in the failure).
func configMap(t *testing.T, what string, is func(*corev1.ConfigMap) bool) *corev1.ConfigMap {
	t.Helper()
	var cm *corev1.ConfigMap
	for _, d := range manifests(t) {
		if c, ok := d.obj.(*corev1.ConfigMap); ok && is(c) {
			cm = c
		}
	}
	if cm == nil {
		t.Fatalf("no %s ConfigMap in deploy/", what)
	}
	return cm
}

// collectorPort returns the port of the example collector's OTLP gRPC receiver, from its
// configuration.
func collectorPort(t *testing.T) string {
	t.Helper()
	cm := configMap(t, "the example collector's", func(c *corev1.ConfigMap) bool { return c.Namespace == "observability" })
	var cfg struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					GRPC struct {
						Endpoint string `json:"endpoint"`
					} `json:"grpc"`
				} `json:"protocols"`
			} `json:"otlp"`
		} `json:"receivers"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(cfg.Receivers.OTLP.Protocols.GRPC.Endpoint, ":")
	return port
}

func capNames(cs []corev1.Capability) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

// TestEachCapabilityIsExplained checks in the YAML text that each added capability has a
// comment saying why: on its line, or on the comment lines right above it.
func TestEachCapabilityIsExplained(t *testing.T) {
	b, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	item := regexp.MustCompile(`^(\s*)-\s*"?([A-Z_]+)"?\s*(#.*)?$`)
	inAdd, addIndent := false, 0
	explained := map[string]bool{}
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if trimmed == "add:" {
			inAdd, addIndent = true, indent
			continue
		}
		if !inAdd || trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		m := item.FindStringSubmatch(line)
		if m == nil || len(m[1]) < addIndent {
			inAdd = false
			continue
		}
		capability, inline := m[2], strings.TrimSpace(strings.TrimPrefix(m[3], "#"))
		above := ""
		for j := i - 1; j >= 0 && strings.HasPrefix(strings.TrimSpace(lines[j]), "#"); j-- {
			above = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[j]), "#")) + " " + above
		}
		if len(inline)+len(strings.TrimSpace(above)) < 20 {
			t.Errorf("daemonset.yaml:%d: capability %s has no comment saying why", i+1, capability)
		}
		explained[capability] = true
	}
	if got := sorted(keys(explained)); !slices.Equal(got, wantCapabilities) {
		t.Errorf("capabilities found under add: %v, want %v", got, wantCapabilities)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// exportedMetrics returns the metric families the agent's exporter registers, fed one span of
// each kind so every vector has a series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m := exporter.NewMetrics(exporter.MetricsOptions{AgentStats: func() exporter.AgentStats { return exporter.AgentStats{} }})
	s := &span.Span{
		Controller: "c", Namespace: "n", Name: "o", Result: span.ResultSuccess, Duration: time.Millisecond, Noop: true, QueueWait: time.Millisecond,
		Calls: []span.Call{{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "GET", Resource: "pods", Status: 200}}},
	}
	if err := m.Write(s); err != nil {
		t.Fatal(err)
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "reconscope_") {
			out[mf.GetName()] = true
		}
	}
	return out
}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true}
)

// metricNames returns the metric names a PromQL expression selects. It strips strings, label
// matchers, ranges and grouping clauses; what is left that is not a function, an aggregation
// or a keyword is a metric name.
func metricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if promKeywords[id] || strings.HasPrefix(rest, "(") {
			continue // keyword, function or aggregation
		}
		names = append(names, id)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (controller, result) (rate(reconscope_reconcile_total{controller=~"$controller"}[$__rate_interval]))`: "reconscope_reconcile_total",
		`histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y"}[5m])))`:                                           "a_bucket",
		`sum(rate(a[1m])) / ignoring(phase) group_left sum(b)`:                                                        "a b",
		`topk(5, max without (pod) (c{l="a{b}"}))`:                                                                    "c",
		`up`: "up",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

func TestDashboard(t *testing.T) {
	d, err := grafana.Read()
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want 39 or later", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type + " " + string(v.Query)
	}
	if vars["datasource"] != `datasource "prometheus"` {
		t.Errorf("datasource variable: %q, want a datasource variable of type prometheus", vars["datasource"])
	}
	if !strings.Contains(vars["controller"], "label_values(reconscope_reconcile_total{") || !strings.Contains(vars["controller"], "}, controller)") {
		t.Errorf("controller variable: %q", vars["controller"])
	}
	for _, v := range []string{"cluster", "job", "namespace", "workload"} {
		if vars[v] == "" {
			t.Errorf("no %s variable", v)
		}
	}

	exported := exportedMetrics(t)
	// A histogram family h is queried as h_bucket, h_sum and h_count.
	allowed := map[string]bool{}
	for name := range exported {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			allowed[name+suffix] = true
		}
	}
	ids := map[int]bool{}
	used := map[string]bool{}
	for _, p := range d.AllPanels() {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d is not unique", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("panel %q: datasource %s, want ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, tg := range p.Targets {
			// Every selector of a job is one of the chosen cluster's; a quantile reads native
			// histograms, or the classic buckets when Prometheus has no native ones.
			if strings.Count(tg.Expr, `job=~"$job"`) != strings.Count(tg.Expr, `cluster=~"$cluster", job=~"$job"`) {
				t.Errorf("panel %q: a selector without the cluster variable: %s", p.Title, tg.Expr)
			}
			// A histogram is read native first, then " or " the classic series (the e2e runs the
			// part before " or " alone against a Prometheus that ingests native histograms).
			if classic := strings.Contains(tg.Expr, "_bucket{") || strings.Contains(tg.Expr, "_seconds_sum{") || strings.Contains(tg.Expr, "_seconds_count{"); classic {
				native, rest, ok := strings.Cut(tg.Expr, " or ")
				if !ok || strings.Contains(native, "_bucket{") || strings.Contains(native, "_sum{") || strings.Contains(native, "_count{") || strings.Contains(rest, " or ") {
					t.Errorf("panel %q: classic histogram series without a native reading before them: %s", p.Title, tg.Expr)
				}
			}
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: expr %q selects no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				if !strings.HasPrefix(n, "reconscope_") || !allowed[n] {
					t.Errorf("panel %q: expr uses %q, which the agent does not export", p.Title, n)
				}
				used[n] = true
			}
		}
	}
	for _, want := range []string{
		"reconscope_reconcile_total", "reconscope_reconcile_duration_seconds_bucket", "reconscope_api_requests_total",
		"reconscope_hot_objects", "reconscope_reconcile_phase_seconds_sum", "reconscope_events_lost_total",
		"reconscope_probes_attached", "reconscope_processes_traced", "reconscope_spans_dropped_total",
	} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

// TestManifestsOnAPIServer creates every manifest on a real kube-apiserver with strict field
// validation (an unknown or misspelt field fails), then checks as the agent's service account
// that it may do what the agent needs and nothing else, and runs the agent's pod index with
// that identity.
func TestManifestsOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	docs := manifests(t)
	env := testenv.Start(t, testenv.Options{})
	ctx := context.Background()

	dc, err := k8sdiscovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// Namespaces first.
	sort.SliceStable(docs, func(i, j int) bool {
		return docs[i].obj.GetObjectKind().GroupVersionKind().Kind == "Namespace" &&
			docs[j].obj.GetObjectKind().GroupVersionKind().Kind != "Namespace"
	})
	for _, d := range docs {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(d.raw, &u.Object); err != nil {
			t.Fatalf("%s: %v", d.file, err)
		}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s: %v", d.file, gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if u.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, &u, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Errorf("%s: create %s %s/%s: %v", d.file, gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	admin := kubernetes.NewForConfigOrDie(env.Config)
	sa := "system:serviceaccount:" + agentNamespace + ":" + agentAccount
	for _, tt := range []struct {
		verb, resource string
		allowed        bool
	}{
		{"get", "pods", true}, {"list", "pods", true}, {"watch", "pods", true},
		{"create", "pods", false}, {"delete", "pods", false}, {"patch", "pods", false},
		{"list", "secrets", false}, {"get", "configmaps", false}, {"list", "nodes", false},
		{"create", "pods/exec", false},
	} {
		resource, sub, _ := strings.Cut(tt.resource, "/")
		review := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:               sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: tt.verb, Resource: resource, Subresource: sub},
		}}
		got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tt.allowed {
			t.Errorf("service account may %s %s: %v, want %v", tt.verb, tt.resource, got.Status.Allowed, tt.allowed)
		}
	}

	// The agent's pod index, as the agent's service account, sees a pod of its node.
	node := "node-1"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "manager"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "manager", Image: "example.com/manager:v1"}}},
	}
	created, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("ab", 32)
	created.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "manager", Image: "example.com/manager:v1", ImageID: "example.com/manager@sha256:" + strings.Repeat("0", 64),
		ContainerID: "containerd://" + id,
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}
	if _, err := admin.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	agentCfg := rest.CopyConfig(env.Config)
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace}}
	agent, err := kubeapi.NewForConfig(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	x, err := discovery.NewPodIndex(discovery.PodIndexOptions{
		Client:   agent,
		NodeName: node,
		Logger:   logs.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Go(t, x.Run)
	waitCtx, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	if !x.WaitSynced(waitCtx) {
		t.Fatalf("pod index did not sync as the agent's service account:\n%s", logs.String())
	}
	var info discovery.PodInfo
	testkit.WaitFor(t, "the pod index to find the pod's container", 20*time.Second, func() (bool, string) {
		var ok bool
		info, ok = x.Lookup(id)
		return ok, "logs:\n" + logs.String()
	})
	if info.Name != "manager" || info.Container != "manager" || info.Node != node {
		t.Errorf("Lookup = %+v", info)
	}
}

// TestAgentConfigMap: the discovery config the DaemonSet mounts parses as the agent reads it.
func TestAgentConfigMap(t *testing.T) {
	cm := configMap(t, "the reconscope-config", func(c *corev1.ConfigMap) bool { return c.Name == "reconscope-config" })
	if _, err := discovery.NewFilter(loadConfig(t, *cm)); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
}
