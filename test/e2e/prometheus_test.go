//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/testenv"
)

// requirePrometheusEnv, set to 1 (CI sets it), makes a missing Prometheus fail the tests that
// need one instead of skipping them. RECONSCOPE_REQUIRE_BPF says only that eBPF must work.
const requirePrometheusEnv = "RECONSCOPE_REQUIRE_PROMETHEUS"

// prometheusRequired says whether a missing Prometheus is a failure, from the environment.
func prometheusRequired(getenv func(string) string) bool { return getenv(requirePrometheusEnv) == "1" }

// requirePrometheus returns the path of a real Prometheus server (Debian's prometheus package
// installs /usr/bin/prometheus). Without one the test skips with the reason, or fails when
// RECONSCOPE_REQUIRE_PROMETHEUS=1 (CI).
func requirePrometheus(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus"
	}
	const reason = "no prometheus binary in PATH or /usr/bin (Debian: apt-get install prometheus)"
	if prometheusRequired(os.Getenv) {
		t.Fatalf("Prometheus is required (%s=1) but missing: %s", requirePrometheusEnv, reason)
	}
	t.Skipf("skipping: needs a real Prometheus: %s (set %s=1 to fail instead)", reason, requirePrometheusEnv)
	return ""
}

// startPrometheus runs Prometheus scraping target (host:port, /metrics) every second as job
// "reconscope", with its storage in t.TempDir, and returns its base URL once the target is up.
func startPrometheus(t *testing.T, bin, target string) (string, *testenv.Process) {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: reconscope
    static_configs:
      - targets: [%q]
`, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	p := testenv.StartProcess(t, "prometheus", exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	))
	base := "http://" + addr
	testkit.WaitFor(t, "Prometheus ready", 60*time.Second, func() (bool, string) {
		mustRun(t, p, "prometheus")
		_, err := httpGet(base + "/-/ready")
		return err == nil, fmt.Sprint(err)
	})
	testkit.WaitFor(t, "Prometheus scrapes the agent", 60*time.Second, func() (bool, string) {
		s, err := promQuery(base, `up{job="reconscope"}`)
		if err != nil || len(s) != 1 {
			return false, fmt.Sprintf("%v %v", s, err)
		}
		return s[0].Value == 1, fmt.Sprintf("up = %v", s[0].Value)
	})
	return base, p
}

// promSample is one element of an instant vector from Prometheus's HTTP API.
type promSample struct {
	Metric map[string]string
	Time   float64 // evaluation time, Unix seconds
	Value  float64
}

// promQuery runs an instant query through Prometheus's HTTP API (/api/v1/query).
func promQuery(base, q string) ([]promSample, error) {
	body, err := httpGet(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, fmt.Errorf("query %q: %w: %s", q, err, body)
	}
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		return nil, fmt.Errorf("query %q: %w", q, err)
	}
	if resp.Status != "success" || resp.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: status %s, type %s: %s", q, resp.Status, resp.Data.ResultType, resp.Error)
	}
	out := make([]promSample, 0, len(resp.Data.Result))
	for _, r := range resp.Data.Result {
		ts, _ := r.Value[0].(float64)
		vs, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(vs, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %q: %w", q, vs, err)
		}
		out = append(out, promSample{Metric: r.Metric, Time: ts, Value: v})
	}
	return out, nil
}

// promScalar runs q, which must return exactly one sample, and returns its value. An empty
// result is an error, never 0: a metric renamed or gone must not read as "nothing lost".
func promScalar(base, q string) (float64, error) {
	s, err := promQuery(base, q)
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return 0, fmt.Errorf("query %q: %d samples, want one (a missing series is not 0: is the metric renamed or gone?)", q, len(s))
	}
	return s[0].Value, nil
}

// counts is a count per label key (labels joined by '|').
type counts map[string]int

func (c counts) String() string {
	keys := sortedKeys(c)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// diffCounts lists the keys whose counts differ (a missing key counts 0).
func diffCounts(got, want counts) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range []counts{got, want} {
		for _, k := range sortedKeys(c) {
			if seen[k] {
				continue
			}
			seen[k] = true
			if got[k] != want[k] {
				out = append(out, fmt.Sprintf("%s: %d, want %d", k, got[k], want[k]))
			}
		}
	}
	return out
}

// promCounts runs q (a sum by the given labels) and returns its samples as counts. An empty
// result is an error: a metric renamed or gone must not read as zero counts. Zero-valued
// samples are left out of the counts (diffCounts reads a missing key as 0).
func promCounts(base, q string, labels ...string) (counts, error) {
	s, err := promQuery(base, q)
	if err != nil {
		return nil, err
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("query %q: no series (is the metric renamed or gone?)", q)
	}
	out := counts{}
	for _, x := range s {
		vals := make([]string, len(labels))
		for i, l := range labels {
			vals[i] = x.Metric[l]
		}
		if x.Value != float64(int(x.Value)) {
			return nil, fmt.Errorf("query %q: non-integer count %v for %v", q, x.Value, x.Metric)
		}
		if x.Value != 0 {
			out[strings.Join(vals, "|")] = int(x.Value)
		}
	}
	return out, nil
}

// controllerRuntimeTotals scrapes a controller-runtime process's own /metrics and returns
// controller_runtime_reconcile_total of controller by result (zeros left out), and
// controller_runtime_reconcile_panics_total.
func controllerRuntimeTotals(metricsURL, controller string) (counts, int, error) {
	body, err := httpGet(metricsURL)
	if err != nil {
		return nil, 0, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("parse %s: %w", metricsURL, err)
	}
	out := counts{}
	panics := 0
	if f := fams["controller_runtime_reconcile_total"]; f != nil {
		for _, m := range f.GetMetric() {
			var ctl, res string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "controller":
					ctl = l.GetValue()
				case "result":
					res = l.GetValue()
				}
			}
			if ctl == controller && m.GetCounter().GetValue() != 0 {
				out[res] = int(m.GetCounter().GetValue())
			}
		}
	} else {
		return nil, 0, fmt.Errorf("%s has no controller_runtime_reconcile_total", metricsURL)
	}
	f := fams["controller_runtime_reconcile_panics_total"]
	if f == nil {
		return nil, 0, fmt.Errorf("%s has no controller_runtime_reconcile_panics_total (a missing series is not 0 panics)", metricsURL)
	}
	seen := false
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "controller" && l.GetValue() == controller {
				panics += int(m.GetCounter().GetValue())
				seen = true
			}
		}
	}
	if !seen {
		return nil, 0, fmt.Errorf("%s: controller_runtime_reconcile_panics_total has no series of controller %q", metricsURL, controller)
	}
	return out, panics, nil
}

// TestPrometheusRequiredByItsOwnVariable: RECONSCOPE_REQUIRE_BPF (eBPF must work) does not make
// a missing Prometheus a failure; RECONSCOPE_REQUIRE_PROMETHEUS does.
func TestPrometheusRequiredByItsOwnVariable(t *testing.T) {
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	if prometheusRequired(env(map[string]string{"RECONSCOPE_REQUIRE_BPF": "1"})) {
		t.Error("RECONSCOPE_REQUIRE_BPF=1 alone requires Prometheus")
	}
	if !prometheusRequired(env(map[string]string{requirePrometheusEnv: "1"})) {
		t.Errorf("%s=1 does not require Prometheus", requirePrometheusEnv)
	}
}

// TestPromHelpersMissingSeries: a query whose metric is gone returns an empty vector from
// Prometheus's HTTP API; promScalar and promCounts fail on it instead of reading 0, and read
// a present series as it is. Against a server that answers as Prometheus's /api/v1/query does.
func TestPromHelpersMissingSeries(t *testing.T) {
	answers := map[string]string{
		"gone":    `[]`,
		"present": `[{"metric":{},"value":[1700000000.5,"0"]}]`,
		"two":     `[{"metric":{"result":"success"},"value":[1700000000.5,"3"]},{"metric":{"result":"error"},"value":[1700000000.5,"0"]}]`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := answers[r.URL.Query().Get("query")]
		if r.URL.Path != "/api/v1/query" || !ok {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":%s}}`, res)
	}))
	defer srv.Close()

	if v, err := promScalar(srv.URL, "gone"); err == nil {
		t.Errorf("promScalar of a missing series = %v, nil error; want an error", v)
	}
	if v, err := promScalar(srv.URL, "present"); err != nil || v != 0 {
		t.Errorf("promScalar of a present 0 = %v, %v; want 0, nil", v, err)
	}
	if _, err := promScalar(srv.URL, "two"); err == nil {
		t.Error("promScalar of two samples: no error")
	}
	if c, err := promCounts(srv.URL, "gone", "result"); err == nil {
		t.Errorf("promCounts of a missing series = %v, nil error; want an error", c)
	}
	if c, err := promCounts(srv.URL, "two", "result"); err != nil || c.String() != "success=3" {
		t.Errorf("promCounts = %v, %v; want success=3", c, err)
	}
}
