package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/detail"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/test/testenv"
)

// agentRepository is the image name `make image` gives the agent's image, deploy/ runs and the
// chart defaults to.
const agentRepository = "ghcr.io/reconscope/reconscope-agent"

// releaseVersion is the file VERSION: the one source of the release's version.
func releaseVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION %q is not vMAJOR.MINOR.PATCH[-PRERELEASE]", v)
	}
	return v
}

// chartMeta is the part of Chart.yaml the tests read.
type chartMeta struct {
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

func readChartMeta(t *testing.T, dir string) chartMeta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c chartMeta
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReleaseVersion: the file VERSION is the version of everything a user installs: the
// chart's version (without the v) and appVersion, the image tag deploy/daemonset.yaml runs,
// the image `make image` builds and the version `make build` gives the agent. No "latest".
func TestReleaseVersion(t *testing.T) {
	v := releaseVersion(t)
	c := readChartMeta(t, chartDir)
	if c.AppVersion != v || c.Version != strings.TrimPrefix(v, "v") {
		t.Errorf("Chart.yaml: version %q, appVersion %q; want %q and %q (the file VERSION)", c.Version, c.AppVersion, strings.TrimPrefix(v, "v"), v)
	}
	ds, file := only[*appsv1.DaemonSet](t, manifests(t))
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != agentRepository+":"+v {
		t.Errorf("%s: image %q, want %s:%s", file, img, agentRepository, v)
	}
	make, err := exec.LookPath("make")
	if err != nil {
		t.Skipf("no make: %v", err)
	}
	// make -n prints the commands without running them.
	for target, want := range map[string]string{
		"build": "-X main.version=" + v + `"`,
		"image": "--ref " + agentRepository + ":" + v + " ",
	} {
		out, err := exec.Command(make, "-C", "..", "-n", "--no-print-directory", target, "CA_BUNDLE=VERSION").CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("make -n %s does not pass %q:\n%s", target, want, out)
		}
	}
}

// chartCopy copies the chart into a temporary folder, applying edit to each file's content
// (by path relative to the chart), and returns the copy's folder.
func chartCopy(t *testing.T, edit func(rel string, b []byte) []byte) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "reconscope")
	err := filepath.Walk(chartDir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if edit != nil {
			b = edit(rel, b)
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func renderChart(t *testing.T, helm, dir string, args ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	return objects(t, run(t, helm, append([]string{"template", "reconscope", dir, "--namespace", "reconscope"}, args...)...))
}

// TestChartUpgradeKeepsPods: a release of the chart that changes only its version changes no
// pod template, so `helm upgrade` rolls no agent (the chart's version and helm.sh/chart label
// stay out of the pod template and of the config checksum). A change of the config does roll
// them (TestChartOptions).
func TestChartUpgradeKeepsPods(t *testing.T) {
	helm := helmBinary(t)
	bumped := chartCopy(t, func(rel string, b []byte) []byte {
		if rel != "Chart.yaml" {
			return b
		}
		return regexp.MustCompile(`(?m)^version: .*$`).ReplaceAll(b, []byte("version: 9.9.9-bumped"))
	})
	if readChartMeta(t, bumped).Version != "9.9.9-bumped" {
		t.Fatal("the copy's Chart.yaml version was not bumped")
	}
	for _, values := range [][]string{nil, {"--values", filepath.Join("testdata", "chart-all-options.yaml")}} {
		before, after := renderChart(t, helm, chartDir, values...), renderChart(t, helm, bumped, values...)
		key := "DaemonSet/reconscope/reconscope-agent"
		var a, b appsv1.DaemonSet
		convert(t, before[key], &a)
		convert(t, after[key], &b)
		if a.Labels["helm.sh/chart"] == b.Labels["helm.sh/chart"] {
			t.Errorf("the DaemonSet's helm.sh/chart label %q did not change with the chart's version: the test bumped nothing", a.Labels["helm.sh/chart"])
		}
		if !reflect.DeepEqual(a.Spec.Template, b.Spec.Template) {
			ja, _ := yaml.Marshal(a.Spec.Template.ObjectMeta)
			jb, _ := yaml.Marshal(b.Spec.Template.ObjectMeta)
			t.Errorf("values %v: bumping only the chart's version changes the pod template (every agent would restart):\n--- before\n%s--- after\n%s", values, ja, jb)
		}
	}
}

// TestChartSchemaRejectsTypos: values.schema.json makes helm fail, naming the key, on a typo
// that would otherwise render silently (a misspelt value) or crash-loop every agent (an
// unknown field of the discovery config, which the agent refuses at start).
func TestChartSchemaRejectsTypos(t *testing.T) {
	helm := helmBinary(t)
	for _, tt := range []struct {
		set  string
		want string
	}{
		{"otlp.endpont=http://collector:4317", "'endpont' not allowed"},
		{"podMonitr.enabled=true", "'podMonitr' not allowed"},
		{"config.include[0].namespace=team-a", "'namespace' not allowed"},
		{"config.exclude[0].podselector=track=canary", "'podselector' not allowed"},
		{"serviceAccount.crate=false", "'crate' not allowed"},
		{"logLevel=verbose", "logLevel"},
		{"sampling.noopRate=2", "noopRate"},
		{"image.digest=abc", "digest"},
		{"prometheusRule.disabled[0]=ReconscopeAgentDwn", "ReconscopeAgentDown"},
		{"updateStrategy.type=Recreate", "updateStrategy"},
		{"prometheusRule.for.ReconscopeAgentDwn=1m", "ReconscopeAgentDwn"},
		{"prometheusRule.for.ReconscopeAgentDown=5 minutes", "ReconscopeAgentDown"},
		{"extraArgs[0]=-scan-interval=5s", "extraArgs"}, // a long flag takes two dashes
	} {
		cmd := exec.Command(helm, "template", "reconscope", chartDir, "--set", tt.set)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("helm template --set %s: rendered, want a schema error", tt.set)
			continue
		}
		if !strings.Contains(string(out), tt.want) {
			t.Errorf("helm template --set %s: %s\nwant an error naming %q", tt.set, out, tt.want)
		}
	}
	// An empty include rule is refused too (the agent refuses a rule that sets no field).
	empty := filepath.Join(t.TempDir(), "empty-rule.yaml")
	if err := os.WriteFile(empty, []byte("config:\n  include:\n    - {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(helm, "template", "reconscope", chartDir, "--values", empty).CombinedOutput(); err == nil {
		t.Errorf("helm template with an empty include rule rendered, want a schema error:\n%s", out)
	}
}

// TestChartConfigAcceptedByAgent: what the schema lets through, the agent accepts: the
// schema's include/exclude rule has exactly the fields of the agent's discovery.Rule, and the
// config the chart renders from the all-options values loads with discovery.LoadConfig.
func TestChartConfigAcceptedByAgent(t *testing.T) {
	schema := chartSchema(t)
	var fields []string
	rt := reflect.TypeOf(discovery.Rule{})
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	for _, list := range []string{"include", "exclude"} {
		rule := schemaAt(t, schema, "config", list, "[]")
		if rule["additionalProperties"] != false {
			t.Errorf("config.%s[] rule: additionalProperties %v, want false", list, rule["additionalProperties"])
		}
		if got := sorted(keysOf(rule["properties"])); !slices.Equal(got, sorted(fields)) {
			t.Errorf("config.%s[] rule: schema fields %v, discovery.Rule's %v", list, got, sorted(fields))
		}
	}

	helm := helmBinary(t)
	objs := helmTemplate(t, helm, "--values", filepath.Join("testdata", "chart-all-options.yaml"))
	var cm corev1.ConfigMap
	convert(t, objs["ConfigMap/reconscope/reconscope-config"], &cm)
	cfg := loadConfig(t, cm)
	if len(cfg.Include) == 0 || len(cfg.Exclude) == 0 {
		t.Errorf("config %+v: want the values' include and exclude rules", cfg)
	}
}

func chartSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	return s
}

// schemaAt walks the schema down properties (a name) and array items ("[]").
func schemaAt(t *testing.T, s map[string]any, path ...string) map[string]any {
	t.Helper()
	cur := s
	for _, p := range path {
		var next any
		if p == "[]" {
			next = cur["items"]
		} else if props, ok := cur["properties"].(map[string]any); ok {
			next = props[p]
		}
		m, ok := next.(map[string]any)
		if !ok {
			t.Fatalf("values.schema.json has nothing at %v", path)
		}
		cur = m
	}
	return cur
}

func keysOf(v any) []string {
	m, _ := v.(map[string]any)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestChartSchemaCoversValues: every value of values.yaml is in the schema, and the schema
// names no value values.yaml lacks; where the schema lists an object's keys it refuses others
// (additionalProperties: false), so that a typo fails. The alerts prometheusRule.disabled may
// name are those of the rule file.
func TestChartSchemaCoversValues(t *testing.T) {
	schema := chartSchema(t)
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		props, listed := s["properties"].(map[string]any)
		m, isMap := v.(map[string]any)
		if !listed {
			return // a Kubernetes object or a free map (labels): passed through
		}
		if !isMap {
			t.Errorf("%s: values.yaml has %T, the schema an object", path, v)
			return
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s: the schema lists its keys but allows others: a typo would pass", path)
		}
		for k, sub := range m {
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s.%s: in values.yaml, not in values.schema.json", path, k)
				continue
			}
			walk(path+"."+k, sub, ps)
		}
		for k := range props {
			if _, ok := m[k]; !ok && !(path == "" && k == "global") {
				t.Errorf("%s.%s: in values.schema.json, not in values.yaml", path, k)
			}
		}
	}
	walk("", values, schema)

	var alerts []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(mustRead(t, filepath.Join("prometheus", "reconscope-rules.yaml"))), -1) {
		alerts = append(alerts, m[1])
	}
	var enum []string
	for _, e := range schemaAt(t, schema, "prometheusRule", "disabled", "[]")["enum"].([]any) {
		enum = append(enum, e.(string))
	}
	if !slices.Equal(sorted(enum), sorted(alerts)) || len(alerts) == 0 {
		t.Errorf("prometheusRule.disabled may name %v; the rule file's alerts are %v", enum, alerts)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// renderNotes renders the chart's NOTES.txt as helm install prints it, through a copy of the
// chart with one more template that includes it (helm template prints no notes).
func renderNotes(t *testing.T, helm string, args ...string) string {
	t.Helper()
	dir := chartCopy(t, nil)
	tpl := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes-under-test}\ndata:\n  NOTES.txt: {{ include (print $.Template.BasePath \"/NOTES.txt\") . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes-under-test.yaml"), []byte(tpl), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, helm, dir, args...)
	notes, _, _ := unstructured.NestedString(objs["ConfigMap//notes-under-test"].Object, "data", "NOTES.txt")
	if notes == "" {
		t.Fatal("NOTES.txt rendered empty")
	}
	return notes
}

// TestChartNotes: after install, NOTES.txt says which image runs (and, for the default one,
// that it is not published and how to get it onto the nodes), where spans and metrics go, and
// how to check that a node traces.
func TestChartNotes(t *testing.T) {
	helm := helmBinary(t)
	v := releaseVersion(t)
	for _, tt := range []struct {
		args         []string
		want, absent []string
	}{
		{
			want: []string{"Image: " + agentRepository + ":" + v, "No image is published", "make image", "ctr -n k8s.io images import",
				"OTLP (grpc) to http://otel-collector.observability:4317", "prometheus.io/scrape", "reconscope_tracing", "/proxy/readyz"},
		},
		{
			args: []string{"--set", "image.repository=registry.example.com/reconscope-agent", "--set", "image.tag=v9", "--set", "otlp.endpoint=",
				"--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "dashboard.enabled=true"},
			want:   []string{"Image: registry.example.com/reconscope-agent:v9", "metrics only", "PodMonitor reconscope-agent", "PrometheusRule reconscope-agent", "docs/runbook.md", "reconscope-agent-dashboard"},
			absent: []string{"No image is published", "prometheus.io/scrape"},
		},
	} {
		notes := renderNotes(t, helm, tt.args...)
		for _, w := range tt.want {
			if !strings.Contains(notes, w) {
				t.Errorf("%v: NOTES.txt lacks %q:\n%s", tt.args, w, notes)
			}
		}
		for _, a := range tt.absent {
			if strings.Contains(notes, a) {
				t.Errorf("%v: NOTES.txt says %q:\n%s", tt.args, a, notes)
			}
		}
	}
}

// agentRunFlags builds the agent and returns the flags `reconscope-agent run --help` lists.
func agentRunFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := testkit.Build(t, "./cmd/agent")
	out, err := exec.Command(bin, "run", "--help").Output()
	if err != nil {
		t.Fatalf("reconscope-agent run --help: %v", err)
	}
	flags := map[string]bool{}
	// pflag's listing: "  -o, --output string" or "      --config string".
	for _, m := range regexp.MustCompile(`(?m)^(?:  -[a-z], |      )--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 10 {
		t.Fatalf("run --help lists %d flags:\n%s", len(flags), out)
	}
	return flags
}

// TestChartKnobs renders the chart with the knobs a platform team sets and checks each lands
// where it acts: the agent's own flags (which must be flags `reconscope-agent run` has),
// names, ServiceAccount and RBAC, update strategy, security contexts, the cluster's name, the
// monitors' relabelings (the node by default) without the scrape annotations, the dashboard's
// ConfigMap and the alert rules.
func TestChartKnobs(t *testing.T) {
	helm := helmBinary(t)
	values := filepath.Join(t.TempDir(), "knobs.yaml")
	if err := os.WriteFile(values, []byte(`
fullnameOverride: rs
logLevel: debug
logFormat: text
clusterName: prod-eu-1
sampling: {noopRate: 0.25, slowThreshold: 500ms}
goroutineInheritance: "off"
detail: reconcile
detailFor: [{controller: "replica*", detail: calls}]
detailSwitch: {max: 2, for: 10m, when: p99}
errorMessages: {mode: drop, redact: ['token=[^&\s]+', 'key: "?\w+']}
extraArgs: ["--scan-interval=5s", "--keep-attached=2m"]
serviceAccount: {create: false, name: platform-agents}
rbac: {create: false}
updateStrategy: {type: OnDelete}
podSecurityContext: {fsGroup: 2000}
securityContext:
  seccompProfile: {type: Unconfined}
  appArmorProfile: {type: Unconfined}
podMonitor: {enabled: true}
serviceMonitor: {enabled: true}
dashboard:
  enabled: true
  namespace: monitoring
  labels: {grafana_dashboard: "1", team: platform}
  annotations: {grafana_folder: Kubernetes}
prometheusRule:
  enabled: true
  disabled: [ReconscopeReconcileSlow]
  additionalLabels: {team: platform}
  thresholds: {errorRatio: 0.25}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := helmTemplate(t, helm, "--values", values)
	var ds appsv1.DaemonSet
	if objs["DaemonSet/reconscope/rs"] == nil {
		t.Fatalf("no DaemonSet rs (fullnameOverride): %v", keysOfObjects(objs))
	}
	convert(t, objs["DaemonSet/reconscope/rs"], &ds)
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]

	wantArgs := []string{"run", "--config=/etc/reconscope/config.yaml", "--log-level=debug", "--log-format=text", "--sample-noop-rate=0.25",
		"--slow-threshold=500ms", "--goroutine-inheritance=off", "--detail-switch-max=2", "--detail-switch-for=10m", "--detail-switch-when=p99", "--error-messages=drop", `--redact-errors=token=[^&\s]+`, `--redact-errors=key: "?\w+`,
		"--scan-interval=5s", "--keep-attached=2m"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %q, want %q", c.Args, wantArgs)
	}
	// detail and detailFor are the config file's detail section, which the agents reload: in
	// the ConfigMap as the agent reads it, and not in the checksum that rolls the pods.
	var cfgMap corev1.ConfigMap
	convert(t, objs["ConfigMap/reconscope/rs-config"], &cfgMap)
	dc, err := detail.ParseConfig(loadConfig(t, cfgMap).Detail)
	if err != nil {
		t.Fatalf("the chart's config.yaml:\n%s\n%v", cfgMap.Data["config.yaml"], err)
	}
	if def, rules, err := dc.Levels(probes.DetailCalls, nil); err != nil || def != probes.DetailReconcile ||
		!slices.Equal(rules, []detail.Rule{{Pattern: "replica*", Detail: probes.DetailCalls}}) {
		t.Errorf("the config's detail: %s %v %v; want reconcile, replica*=calls:\n%s", def, rules, err, cfgMap.Data["config.yaml"])
	}
	other := filepath.Join(t.TempDir(), "other.yaml")
	if err := os.WriteFile(other, []byte("detailFor: [{controller: deployment, detail: calls}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ds2 appsv1.DaemonSet
	convert(t, helmTemplate(t, helm, "--values", values, "--values", other)["DaemonSet/reconscope/rs"], &ds2)
	if a, b := ds.Spec.Template.Annotations["checksum/config"], ds2.Spec.Template.Annotations["checksum/config"]; a == "" || a != b {
		t.Errorf("checksum/config %q, with another detailFor %q: want one (the agents reload the detail, the pods stay)", a, b)
	}

	flags := agentRunFlags(t)
	for _, a := range c.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("the chart passes %s, which reconscope-agent run does not have", a)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["OTEL_RESOURCE_ATTRIBUTES"] != "k8s.cluster.name=prod-eu-1" {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES %q, want k8s.cluster.name=prod-eu-1", env["OTEL_RESOURCE_ATTRIBUTES"])
	}

	if pod.ServiceAccountName != "platform-agents" {
		t.Errorf("serviceAccountName %q, want platform-agents", pod.ServiceAccountName)
	}
	for k := range objs {
		if kind, _, _ := strings.Cut(k, "/"); kind == "ServiceAccount" || kind == "ClusterRole" || kind == "ClusterRoleBinding" {
			t.Errorf("%s rendered with serviceAccount.create and rbac.create false", k)
		}
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Errorf("updateStrategy %+v, want OnDelete", ds.Spec.UpdateStrategy)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil || *pod.SecurityContext.FSGroup != 2000 {
		t.Errorf("pod securityContext %+v, want fsGroup 2000", pod.SecurityContext)
	}
	sc := c.SecurityContext
	if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined ||
		sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
		t.Fatalf("container securityContext %+v: want seccomp and AppArmor Unconfined", sc)
	}
	// The overrides merge with the default: least privilege stays.
	if got := sorted(capNames(sc.Capabilities.Add)); !slices.Equal(got, wantCapabilities) || !slices.Equal(capNames(sc.Capabilities.Drop), []string{"ALL"}) ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v: the overrides lost the default's least privilege", sc)
	}

	// Monitors: the node label by default; no scrape annotations beside them.
	for k, field := range map[string]string{"PodMonitor/reconscope/rs": "podMetricsEndpoints", "ServiceMonitor/reconscope/rs": "endpoints"} {
		if objs[k] == nil {
			t.Errorf("no %s", k)
			continue
		}
		eps, _, _ := unstructured.NestedSlice(objs[k].Object, "spec", field)
		rl, _, _ := unstructured.NestedSlice(eps[0].(map[string]any), "relabelings")
		var node bool
		for _, r := range rl {
			m := r.(map[string]any)
			src, _, _ := unstructured.NestedStringSlice(m, "sourceLabels")
			node = node || m["targetLabel"] == "node" && slices.Equal(src, []string{"__meta_kubernetes_pod_node_name"})
		}
		if !node {
			t.Errorf("%s: relabelings %v, want the node name as label node", k, rl)
		}
	}
	for a := range ds.Spec.Template.Annotations {
		if strings.HasPrefix(a, "prometheus.io/") {
			t.Errorf("pod annotation %s with a PodMonitor and a ServiceMonitor: every agent would be scraped twice", a)
		}
	}

	// The dashboard: the sidecar's label, in the namespace asked, the dashboard file as is.
	cmObj := objs["ConfigMap/monitoring/rs-dashboard"]
	if cmObj == nil {
		t.Fatalf("no ConfigMap monitoring/rs-dashboard: %v", keysOfObjects(objs))
	}
	var cm corev1.ConfigMap
	convert(t, cmObj, &cm)
	if cm.Labels["grafana_dashboard"] != "1" || cm.Labels["team"] != "platform" || cm.Annotations["grafana_folder"] != "Kubernetes" {
		t.Errorf("dashboard ConfigMap labels %v, annotations %v", cm.Labels, cm.Annotations)
	}
	dash := mustRead(t, filepath.Join("grafana", "reconscope-dashboard.json"))
	if strings.TrimSpace(cm.Data["reconscope-dashboard.json"]) != strings.TrimSpace(string(dash)) {
		t.Error("the dashboard ConfigMap does not hold deploy/grafana/reconscope-dashboard.json")
	}

	// The rules: one left out, the others labelled, the agents found by this release's pods.
	groups, _, _ := unstructured.NestedSlice(objs["PrometheusRule/reconscope/rs"].Object, "spec", "groups")
	var alerts []string
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			m := r.(map[string]any)
			alerts = append(alerts, m["alert"].(string))
			if team, _, _ := unstructured.NestedString(m, "labels", "team"); team != "platform" {
				t.Errorf("alert %s: labels %v, want team: platform added", m["alert"], m["labels"])
			}
			if m["alert"] == "ReconscopeReconcileErrors" && !strings.HasSuffix(strings.TrimSpace(m["expr"].(string)), "> 0.25") {
				t.Errorf("alert ReconscopeReconcileErrors: %s, want the threshold 0.25", m["expr"])
			}
			if expr := m["expr"].(string); strings.Contains(expr, "reconscope-agent-") || strings.Contains(expr, "pod=") && !strings.Contains(expr, `pod=~"rs-.*"`) {
				t.Errorf("alert %s: %s selects another release's pods", m["alert"], expr)
			}
		}
	}
	if slices.Contains(alerts, "ReconscopeReconcileSlow") || !slices.Contains(alerts, "ReconscopeAgentDown") || !slices.Contains(alerts, "ReconscopeAgentNotTracing") {
		t.Errorf("alerts %v: want ReconscopeReconcileSlow left out, the agent alerts in", alerts)
	}
	// promtool accepts the rendered rules.
	if promtool, err := exec.LookPath("promtool"); err == nil {
		f := filepath.Join(t.TempDir(), "rules.yaml")
		b, _ := yaml.Marshal(map[string]any{"groups": groups})
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules of the chart's rendered PrometheusRule: %v\n%s", err, out)
		}
	}
}

func keysOfObjects(objs map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range objs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestChartAlertThresholds: prometheusRule.thresholds change the two thresholds of the rule
// file, in the expression and in the text, and prometheusRule.for an alert's for, that alert's
// only (the defaults render the file unchanged: TestChartOptions; TestChartKnobs runs promtool
// on rules rendered with a threshold).
func TestChartAlertThresholds(t *testing.T) {
	helm := helmBinary(t)
	objs := helmTemplate(t, helm, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.thresholds.errorRatio=0.3",
		"--set", "prometheusRule.thresholds.reconcileP99Seconds=2.5", "--set", "prometheusRule.for.ReconscopeAgentDown=30s")
	groups, _, _ := unstructured.NestedSlice(objs["PrometheusRule/reconscope/reconscope-agent"].Object, "spec", "groups")
	found := 0
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			m := r.(map[string]any)
			expr := strings.TrimSpace(m["expr"].(string))
			desc, _, _ := unstructured.NestedString(m, "annotations", "description")
			if forAlert, want := m["for"], map[bool]string{true: "30s", false: "5m"}[m["alert"] == "ReconscopeAgentDown"]; m["alert"] == "ReconscopeAgentDown" || m["alert"] == "ReconscopeAgentNotTracing" {
				if forAlert != want {
					t.Errorf("%s: for %v, want %s", m["alert"], forAlert, want)
				}
			}
			switch m["alert"] {
			case "ReconscopeReconcileErrors":
				found++
				if !strings.HasSuffix(expr, "> 0.3") {
					t.Errorf("ReconscopeReconcileErrors: %s, want > 0.3", expr)
				}
			case "ReconscopeReconcileSlow":
				found++
				if !strings.HasSuffix(expr, ") > 2.5") || !strings.Contains(desc, "(threshold 2.5s)") {
					t.Errorf("ReconscopeReconcileSlow: %s / %s, want > 2.5 and threshold 2.5s", expr, desc)
				}
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d of the two threshold alerts", found)
	}
}

// TestRunbook: every alert has a runbook_url into docs/runbook.md whose section exists, and
// every section of the runbook is an alert's.
func TestRunbook(t *testing.T) {
	const base = "https://github.com/reconscope/reconscope/blob/main/docs/runbook.md#"
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join("prometheus", "reconscope-rules.yaml")), &rules); err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)\s*$`).FindAllStringSubmatch(string(mustRead(t, "../docs/runbook.md")), -1) {
		sections[strings.ToLower(m[1])] = true
	}
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], base)
			if !ok || anchor != strings.ToLower(r.Alert) {
				t.Errorf("alert %s: runbook_url %q, want %s%s", r.Alert, r.Annotations["runbook_url"], base, strings.ToLower(r.Alert))
			}
			if !sections[anchor] {
				t.Errorf("alert %s: docs/runbook.md has no section ## %s", r.Alert, r.Alert)
			}
			seen[anchor] = true
		}
	}
	for s := range sections {
		if !seen[s] {
			t.Errorf("docs/runbook.md has a section %s that is no alert's", s)
		}
	}
}

// TestChartDashboardCopy: the chart's copy of the dashboard is deploy/grafana's file.
func TestChartDashboardCopy(t *testing.T) {
	a := mustRead(t, filepath.Join("grafana", "reconscope-dashboard.json"))
	b := mustRead(t, filepath.Join(chartDir, "dashboards", "reconscope-dashboard.json"))
	if !bytes.Equal(a, b) {
		t.Error("deploy/grafana/reconscope-dashboard.json and the chart's dashboards/reconscope-dashboard.json differ: copy one onto the other")
	}
}

// TestChartInstallOnAPIServer runs `helm install` as a user would, against a real
// kube-apiserver (--dry-run=server: every object goes through the API server's admission and
// validation, nothing is created; no kubelet here): a typo in the values fails the install
// naming the key; the notes Helm prints warn that the namespace lacks the Pod Security label
// the agent needs, and stop warning once it has it.
func TestChartInstallOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	helm := helmBinary(t)
	env := testenv.Start(t, testenv.Options{})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "reconscope"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	install := func(args ...string) (string, error) {
		out, err := exec.Command(helm, append([]string{"install", "reconscope", chartDir, "--namespace", "reconscope",
			"--kubeconfig", env.Kubeconfig, "--dry-run=server"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := install("--set", "config.include[0].namespace=team-a"); err == nil || !strings.Contains(out, "'namespace' not allowed") {
		t.Errorf("helm install with config.include[0].namespace: %v\n%s\nwant a failure naming namespace", err, out)
	}
	const warning = "Pod Security: namespace reconscope is not labelled pod-security.kubernetes.io/enforce=privileged"
	out, err := install()
	if err != nil {
		t.Fatalf("helm install --dry-run=server: %v\n%s", err, out)
	}
	if !strings.Contains(out, "NOTES:") || !strings.Contains(out, warning) || !strings.Contains(out, "kind: DaemonSet") {
		t.Errorf("helm install into an unlabelled namespace: want the DaemonSet and notes warning %q:\n%s", warning, out)
	}
	ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}
	if err := env.Client.Update(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	if out, err := install(); err != nil || strings.Contains(out, "Pod Security:") || !strings.Contains(out, "NOTES:") {
		t.Errorf("helm install into a namespace labelled privileged: %v; want notes without the Pod Security warning:\n%s", err, out)
	}
}
