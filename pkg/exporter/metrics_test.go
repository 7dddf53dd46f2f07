package exporter

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/reconscope/reconscope/pkg/span"
)

const protobufAccept = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"

const openMetricsAccept = "application/openmetrics-text; version=1.0.0; charset=utf-8"

// get fetches url with the Accept header (none when empty) and returns the answer's headers
// and body; it fails t unless the answer is 200 OK.
func get(t *testing.T, url, accept string) (http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return resp.Header, body
}

// scrape fetches url with the Accept header and decodes the families, whatever the format.
func scrape(t *testing.T, url, accept string) (map[string]*dto.MetricFamily, http.Header) {
	t.Helper()
	hdr, body := get(t, url, accept)
	fams := map[string]*dto.MetricFamily{}
	format := expfmt.ResponseFormat(hdr)
	if format.FormatType() == expfmt.TypeTextPlain {
		p := expfmt.NewTextParser(model.UTF8Validation)
		var err error
		if fams, err = p.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
			t.Fatalf("parse text exposition: %v", err)
		}
		return fams, hdr
	}
	dec := expfmt.NewDecoder(bytes.NewReader(body), format)
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode %s: %v", format, err)
		}
		fams[mf.GetName()] = &mf
	}
	return fams, hdr
}

func labelsOf(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		if l.GetValue() == "" {
			continue // an empty label is no label, for Prometheus
		}
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// series maps each series' labels (sorted "k=v,k=v") to its metric.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string) map[string]*dto.Metric {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	out := map[string]*dto.Metric{}
	for _, m := range mf.GetMetric() {
		out[labelsOf(m)] = m
	}
	return out
}

func wantValues(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]float64) {
	t.Helper()
	got := series(t, fams, name)
	for labels, v := range want {
		m, ok := got[labels]
		if !ok {
			t.Errorf("%s{%s} missing; have %v", name, labels, keys(got))
			continue
		}
		var val float64
		switch {
		case m.Counter != nil:
			val = m.GetCounter().GetValue()
		case m.Gauge != nil:
			val = m.GetGauge().GetValue()
		default:
			val = m.GetUntyped().GetValue()
		}
		if val != v {
			t.Errorf("%s{%s} = %v, want %v", name, labels, val, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s has series %v, want exactly %d", name, keys(got), len(want))
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func newTestMetrics(t *testing.T, opts MetricsOptions) (*Metrics, *httptest.Server, *fakeNow) {
	t.Helper()
	m := NewMetrics(opts)
	clock := &fakeNow{t: time.Unix(1_000_000, 0)} // a multiple of the slot length
	m.hot.now = clock.now
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return m, srv, clock
}

// TestAgentStatsEachScrape: every scrape reports the agent's statistics as read for that scrape,
// reconciles in flight included (they were set on a gauge from inside the stats callback, so a
// scrape could report the previous scrape's value), and a scrape changes nothing: the next one
// without new statistics reports the same.
func TestAgentStatsEachScrape(t *testing.T) {
	var mu sync.Mutex
	inFlight := 0
	_, srv, _ := newTestMetrics(t, MetricsOptions{AgentStats: func() AgentStats {
		mu.Lock()
		defer mu.Unlock()
		return AgentStats{ReconcilesInFlight: inFlight, ProcessesTraced: inFlight}
	}})
	for _, n := range []int{3, 7, 7, 0} {
		mu.Lock()
		inFlight = n
		mu.Unlock()
		fams, _ := scrape(t, srv.URL+"/metrics", "text/plain")
		wantValues(t, fams, "reconscope_reconciles_in_flight", map[string]float64{"": float64(n)})
		wantValues(t, fams, "reconscope_processes_traced", map[string]float64{"": float64(n)})
	}
}

func TestMetricsScrape(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{
		HotObjectsK: 2, HotObjectsWindow: time.Minute,
		AgentStats: func() AgentStats {
			return AgentStats{ReconcilesInFlight: 4, EventsLostRingBuffer: 3, EventsLostState: 2, ProbesAttached: 5, ProcessesTraced: 2, SpansExported: 100, SpansDropped: 7, SpansSampledOut: 11, OutputSpansDropped: 13, ErrorMessagesRedacted: 17, KernelProbeHits: 19, ExcludedKernel: 29, ExcludedAgent: 23, HeldForWriter: 31}
		},
	})
	for _, s := range testSpans() {
		if err := m.Write(s); err != nil {
			t.Fatal(err)
		}
	}

	fams, hdr := scrape(t, srv.URL+"/metrics", "text/plain")
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want text/plain", ct)
	}
	wantValues(t, fams, "reconscope_reconcile_total", withZeroResults(map[string]float64{
		"controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,result=success":        1,
		"controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,result=error":          1,
		"controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,result=requeue":        1,
		"controller=deployment,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,result=requeue_after": 1,
		"controller=deployment,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,result=abandoned":     1,
		"controller=job,result=success": 1,
	}))
	wantValues(t, fams, "reconscope_api_requests_total", map[string]float64{
		"code=200,controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,resource=configmaps,verb=PUT":        1,
		"code=409,controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,resource=configmaps/status,verb=PUT": 1,
		"code=404,controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,resource=secrets,verb=GET":           1,
	})
	wantValues(t, fams, "reconscope_noop_reconciles_total", map[string]float64{
		"controller=deployment,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f": 1,
		"controller=job": 1,
	})
	wantValues(t, fams, "reconscope_reconciles_in_flight", map[string]float64{"": 4})
	// One series per cause, each counted apart (sum without(cause) is the total).
	wantValues(t, fams, "reconscope_events_lost_total", map[string]float64{"cause=ring_buffer_full": 3, "cause=state": 2})
	wantValues(t, fams, "reconscope_probes_attached", map[string]float64{"": 5})
	wantValues(t, fams, "reconscope_processes_traced", map[string]float64{"": 2})
	wantValues(t, fams, "reconscope_spans_exported_total", map[string]float64{"": 100})
	wantValues(t, fams, "reconscope_spans_dropped_total", map[string]float64{"": 7})
	wantValues(t, fams, "reconscope_spans_sampled_out_total", map[string]float64{"": 11})
	wantValues(t, fams, "reconscope_output_spans_dropped_total", map[string]float64{"": 13})
	wantValues(t, fams, "reconscope_error_messages_redacted_total", map[string]float64{"": 17})
	wantValues(t, fams, "reconscope_kernel_probe_hits_total", map[string]float64{"": 19})
	wantValues(t, fams, "reconscope_spans_held_for_writer_total", map[string]float64{"": 31})
	// Each reconcile's hits by kind; both series exist for a controller seen, 0 or not.
	wantValues(t, fams, "reconscope_probe_hits_total", map[string]float64{
		"controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,kind=emulated":        11,
		"controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,kind=single_stepped":  2,
		"controller=deployment,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,kind=emulated":       2,
		"controller=deployment,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,kind=single_stepped": 0,
		"controller=job,kind=emulated":       0,
		"controller=job,kind=single_stepped": 0,
	})
	wantValues(t, fams, "reconscope_spans_excluded_total", map[string]float64{"where=kernel": 29, "where=agent": 23})
	wantValues(t, fams, "reconscope_hot_objects", map[string]float64{
		"controller=configmap,k8s_namespace_name=ops,object_name=cm-a,object_namespace=default": 2,
		"controller=configmap,k8s_namespace_name=ops,object_name=cm-b,object_namespace=default": 1,
		"controller=deployment,k8s_namespace_name=ops,object_name=stuck,object_namespace=apps":  1,
		"controller=deployment,k8s_namespace_name=ops,object_name=web,object_namespace=apps":    1,
		"controller=job,object_name=nightly,object_namespace=batch":                             1,
	})

	// Durations: configmap took 5, 3 and 4 ms; the abandoned deployment reconcile is not observed.
	dur := series(t, fams, "reconscope_reconcile_duration_seconds")
	if len(dur) != 3 {
		t.Errorf("duration series %v, want configmap, deployment, job", keys(dur))
	}
	h := dur["controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f"].GetHistogram()
	if h.GetSampleCount() != 3 || fmt.Sprintf("%.6f", h.GetSampleSum()) != "0.012000" {
		t.Errorf("configmap duration count %d sum %v, want 3 and 0.012", h.GetSampleCount(), h.GetSampleSum())
	}
	wantBuckets := map[float64]uint64{0.0001: 0, 0.0025: 0, 0.005: 3, 60: 3}
	finite := 0
	for _, b := range h.GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) { // the text parser adds the +Inf bucket
			finite++
		}
	}
	if finite != len(DurationBuckets) {
		t.Errorf("%d classic buckets, want %d", finite, len(DurationBuckets))
	}
	for _, b := range h.GetBucket() {
		if want, ok := wantBuckets[b.GetUpperBound()]; ok && b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if c := dur["controller=deployment,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f"].GetHistogram().GetSampleCount(); c != 1 {
		t.Errorf("deployment duration count %d, want 1 (abandoned not observed)", c)
	}

	phases := series(t, fams, "reconscope_reconcile_phase_seconds")
	if len(phases) != 9 {
		t.Errorf("phase series %v, want 3 controllers x 3 phases", keys(phases))
	}
	read := phases["controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f,phase=fetch"].GetHistogram()
	if read.GetSampleCount() != 3 || fmt.Sprintf("%.6f", read.GetSampleSum()) != "0.001050" {
		t.Errorf("configmap fetch phase count %d sum %v, want 3 and 0.00105", read.GetSampleCount(), read.GetSampleSum())
	}

	// Object names appear in no label but the hot-objects gauge's.
	for name, mf := range fams {
		if name == "reconscope_hot_objects" {
			continue
		}
		for _, met := range mf.GetMetric() {
			for _, l := range met.GetLabel() {
				if l.GetName() == "name" || l.GetName() == "namespace" || strings.HasPrefix(l.GetName(), "object_") {
					t.Errorf("%s has label %s", name, l.GetName())
				}
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing: Go and process collectors not registered", name)
		}
	}
}

func TestMetricsNativeHistogram(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	for _, s := range testSpans() {
		_ = m.Write(s)
	}
	fams, hdr := scrape(t, srv.URL+"/metrics", protobufAccept)
	if ct := hdr.Get("Content-Type"); !strings.Contains(ct, "application/vnd.google.protobuf") {
		t.Fatalf("Content-Type %q, want protobuf", ct)
	}
	for _, name := range []string{"reconscope_reconcile_duration_seconds", "reconscope_reconcile_phase_seconds"} {
		h := series(t, fams, name)
		for labels, met := range h {
			hist := met.GetHistogram()
			// Factor 1.1 is schema 3; a native histogram has a schema, a zero threshold and spans.
			if hist.Schema == nil || hist.GetSchema() != 3 || hist.GetZeroThreshold() <= 0 {
				t.Errorf("%s{%s}: schema %v zero threshold %v, want native schema 3", name, labels, hist.Schema, hist.GetZeroThreshold())
			}
			if hist.GetSampleCount() > hist.GetZeroCount() && len(hist.GetPositiveSpan()) == 0 {
				t.Errorf("%s{%s}: no native buckets", name, labels)
			}
			if len(hist.GetBucket()) != len(DurationBuckets) {
				t.Errorf("%s{%s}: %d classic buckets, want %d alongside", name, labels, len(hist.GetBucket()), len(DurationBuckets))
			}
		}
	}
	h := series(t, fams, "reconscope_reconcile_duration_seconds")["controller=configmap,k8s_container_name=manager,k8s_namespace_name=ops,k8s_pod_name=ctl-7d9f"].GetHistogram()
	// Native buckets are delta-encoded: each bucket's count is the previous one's plus its delta.
	var count, total int64
	for _, d := range h.GetPositiveDelta() {
		count += d
		total += count
	}
	if h.GetSampleCount() != 3 || uint64(total)+h.GetZeroCount() != 3 {
		t.Errorf("configmap native histogram: count %d, buckets hold %d, want 3", h.GetSampleCount(), uint64(total)+h.GetZeroCount())
	}

	// OpenMetrics is negotiated too.
	hdr, body := get(t, srv.URL+"/metrics", openMetricsAccept)
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") || !strings.HasSuffix(string(body), "# EOF\n") {
		t.Errorf("OpenMetrics scrape: Content-Type %q, body ends %q", ct, body[max(0, len(body)-20):])
	}
}

func TestMetricsHotObjectsBounded(t *testing.T) {
	const k = 3
	m, srv, clock := newTestMetrics(t, MetricsOptions{HotObjectsK: k, HotObjectsWindow: time.Minute})
	reconcile := func(controller, name string, times int) {
		for range times {
			_ = m.Write(&span.Span{Controller: controller, Namespace: "ns", Name: name, Result: span.ResultSuccess, Noop: true})
		}
	}
	// 20 objects of "busy", object i reconciled i times; 2 objects of "quiet".
	for i := 1; i <= 20; i++ {
		reconcile("busy", fmt.Sprintf("obj-%02d", i), i)
	}
	reconcile("quiet", "a", 2)
	reconcile("quiet", "b", 1)

	fams, _ := scrape(t, srv.URL+"/metrics", "")
	wantValues(t, fams, "reconscope_hot_objects", map[string]float64{
		"controller=busy,object_name=obj-20,object_namespace=ns": 20,
		"controller=busy,object_name=obj-19,object_namespace=ns": 19,
		"controller=busy,object_name=obj-18,object_namespace=ns": 18,
		"controller=quiet,object_name=a,object_namespace=ns":     2,
		"controller=quiet,object_name=b,object_namespace=ns":     1,
	})

	// 40s later a burst on obj-01 makes it the hottest; the window still holds the rest.
	clock.add(40 * time.Second)
	reconcile("busy", "obj-01", 30)
	fams, _ = scrape(t, srv.URL+"/metrics", "")
	wantValues(t, fams, "reconscope_hot_objects", map[string]float64{
		"controller=busy,object_name=obj-01,object_namespace=ns": 31,
		"controller=busy,object_name=obj-20,object_namespace=ns": 20,
		"controller=busy,object_name=obj-19,object_namespace=ns": 19,
		"controller=quiet,object_name=a,object_namespace=ns":     2,
		"controller=quiet,object_name=b,object_namespace=ns":     1,
	})

	// At 60s the first burst has left the one-minute window: its series are gone.
	clock.add(20 * time.Second)
	fams, _ = scrape(t, srv.URL+"/metrics", "")
	wantValues(t, fams, "reconscope_hot_objects", map[string]float64{
		"controller=busy,object_name=obj-01,object_namespace=ns": 30,
	})
	clock.add(time.Minute)
	fams, _ = scrape(t, srv.URL+"/metrics", "")
	if _, ok := fams["reconscope_hot_objects"]; ok {
		t.Errorf("hot objects still reported after the window: %v", keys(series(t, fams, "reconscope_hot_objects")))
	}
}

func TestMetricsHotObjectsMaxTracked(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{HotObjectsK: 10, HotObjectsMaxTracked: 2})
	for _, name := range []string{"a", "b", "c", "a"} {
		_ = m.Write(&span.Span{Controller: "c", Namespace: "ns", Name: name, Result: span.ResultSuccess})
	}
	fams, _ := scrape(t, srv.URL+"/metrics", "")
	wantValues(t, fams, "reconscope_hot_objects", map[string]float64{
		"controller=c,object_name=a,object_namespace=ns": 2,
		"controller=c,object_name=b,object_namespace=ns": 1,
	})
}

func TestMetricsHealth(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status("/healthz"); s != http.StatusOK {
		t.Errorf("/healthz = %d", s)
	}
	if s := status("/readyz"); s != http.StatusServiceUnavailable {
		t.Errorf("/readyz before SetReady = %d, want 503", s)
	}
	m.SetReady(true)
	if s := status("/readyz"); s != http.StatusOK {
		t.Errorf("/readyz after SetReady(true) = %d, want 200", s)
	}
	m.SetReady(false)
	if s := status("/readyz"); s != http.StatusServiceUnavailable {
		t.Errorf("/readyz after SetReady(false) = %d, want 503", s)
	}
	// Without an AgentStats callback the self-metrics are not invented.
	fams, _ := scrape(t, srv.URL+"/metrics", "")
	if _, ok := fams["reconscope_spans_exported_total"]; ok {
		t.Error("reconscope_spans_exported_total reported with no AgentStats")
	}
}

// TestMetricsWorkloadLabels: the same controller name in two operators gives two sets of
// series, each naming its workload, and two hot-object lists.
func TestMetricsWorkloadLabels(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{BuildInfo: &BuildInfo{Version: "v0.3.0", Revision: "abc123", Dirty: true, GoVersion: "go1.26.8", GoArch: "arm64"}})
	for _, op := range []string{"alpha", "beta"} {
		_ = m.Write(&span.Span{Controller: "secret", Namespace: "ns", Name: "s1", Result: span.ResultSuccess, Duration: time.Millisecond,
			Pod: op + "-system/" + op + "-7d9f-x", Container: "manager",
			Workload: &span.Workload{Kind: "Deployment", Name: op + "-controller", ServiceName: op}})
	}
	fams, _ := scrape(t, srv.URL+"/metrics", "text/plain")
	wantValues(t, fams, "reconscope_reconcile_total", withZeroResults(map[string]float64{
		"controller=secret,k8s_container_name=manager,k8s_namespace_name=alpha-system,k8s_pod_name=alpha-7d9f-x,k8s_workload_kind=Deployment,k8s_workload_name=alpha-controller,result=success,service_name=alpha": 1,
		"controller=secret,k8s_container_name=manager,k8s_namespace_name=beta-system,k8s_pod_name=beta-7d9f-x,k8s_workload_kind=Deployment,k8s_workload_name=beta-controller,result=success,service_name=beta":     1,
	}))
	wantValues(t, fams, "reconscope_hot_objects", map[string]float64{
		"controller=secret,k8s_namespace_name=alpha-system,k8s_workload_name=alpha-controller,object_name=s1,object_namespace=ns": 1,
		"controller=secret,k8s_namespace_name=beta-system,k8s_workload_name=beta-controller,object_name=s1,object_namespace=ns":   1,
	})
	wantValues(t, fams, "reconscope_build_info", map[string]float64{
		"dirty=true,goarch=arm64,goversion=go1.26.8,revision=abc123,version=v0.3.0": 1,
	})
}

// TestMetricsExemplars: a reconcile exported over OTLP (to a real receiver) carries its trace
// ID as an exemplar on the duration and queue-wait histograms in an OpenMetrics scrape; a
// reconcile the sampler kept back carries none.
func TestMetricsExemplars(t *testing.T) {
	c, addr := startGRPCCollector(t, nil)
	otlp, err := NewOTLP(context.Background(), testOptions(ProtocolGRPC, "http://"+addr))
	if err != nil {
		t.Fatal(err)
	}
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	// The agent's order: the sampler and OTLP first, then metrics (which see every reconcile).
	chain := Multi{NewSampler(SamplerOptions{NoopRate: 0}, otlp), m}
	exported := &span.Span{Controller: "exported", Namespace: "ns", Name: "a", Result: span.ResultError, ErrorType: "*errors.StatusError",
		Duration: 3 * time.Millisecond, QueueWait: time.Millisecond, Pod: "ops/ctl", Container: "manager"}
	kept := &span.Span{Controller: "kept", Namespace: "ns", Name: "b", Result: span.ResultSuccess, Noop: true,
		Duration: 2 * time.Millisecond, QueueWait: time.Millisecond, Pod: "ops/ctl", Container: "manager"}
	for _, s := range []*span.Span{exported, kept} {
		if err := chain.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := otlp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := c.all()
	if len(got) != 1 {
		t.Fatalf("collector got %d spans, want 1", len(got))
	}
	traceID := hex.EncodeToString(got[0].span.GetTraceId())

	_, body := get(t, srv.URL+"/metrics", openMetricsAccept)
	var withExemplar []string
	for _, line := range strings.Split(string(body), "\n") {
		if i := strings.Index(line, " # {"); i >= 0 {
			withExemplar = append(withExemplar, line)
			if !strings.Contains(line, `controller="exported"`) || !strings.Contains(line, `trace_id="`+traceID+`"`) {
				t.Errorf("exemplar on a series it does not belong to, or with the wrong trace: %s", line)
			}
		}
	}
	var dur, wait bool
	for _, l := range withExemplar {
		dur = dur || strings.HasPrefix(l, "reconscope_reconcile_duration_seconds_bucket{")
		wait = wait || strings.HasPrefix(l, "reconscope_queue_wait_seconds_bucket{")
	}
	if !dur || !wait {
		t.Errorf("exemplars on duration %v, queue wait %v; want both; lines with exemplars:\n%s", dur, wait, strings.Join(withExemplar, "\n"))
	}
}

// TestMetricsTriggerLag: reconscope_trigger_lag_seconds observes reconciles whose trigger write
// was seen, labelled by the writing controller; others are not observed.
func TestMetricsTriggerLag(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	for _, s := range []*span.Span{
		{Controller: "replicaset", Result: span.ResultSuccess, TriggerController: "deployment", TriggerLag: 3 * time.Millisecond, TriggerLagKnown: true},
		{Controller: "replicaset", Result: span.ResultSuccess, TriggerController: "deployment", TriggerLag: 5 * time.Millisecond, TriggerLagKnown: true},
		{Controller: "replicaset", Result: span.ResultSuccess, TriggerController: "replicaset", TriggerLag: time.Millisecond, TriggerLagKnown: true},
		{Controller: "deployment", Result: span.ResultSuccess, TriggerController: span.TriggerUnknown},
		{Controller: "deployment", Result: span.ResultSuccess},
	} {
		if err := m.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	fams, _ := scrape(t, srv.URL+"/metrics", "")
	got := series(t, fams, "reconscope_trigger_lag_seconds")
	want := map[string]struct {
		n   uint64
		sum float64
	}{
		"controller=replicaset,trigger_controller=deployment": {2, 0.008},
		"controller=replicaset,trigger_controller=replicaset": {1, 0.001},
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %d", keys(got), len(want))
	}
	for labels, w := range want {
		h := got[labels].GetHistogram()
		if h.GetSampleCount() != w.n || h.GetSampleSum() < w.sum-1e-9 || h.GetSampleSum() > w.sum+1e-9 {
			t.Errorf("%s: count %d sum %v, want %+v", labels, h.GetSampleCount(), h.GetSampleSum(), w)
		}
	}
}

// TestMetricsTracing: reconscope_tracing has no series until SetTracing, then one: 1 while
// tracing, 0 with the reason when not, the previous state gone.
func TestMetricsTracing(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	state := func() []string {
		t.Helper()
		fams, _ := scrape(t, srv.URL+"/metrics", "")
		var out []string
		for _, mt := range fams["reconscope_tracing"].GetMetric() {
			out = append(out, fmt.Sprintf("%s=%v", labelsOf(mt), mt.GetGauge().GetValue()))
		}
		return out
	}
	if got := state(); len(got) != 0 {
		t.Errorf("before SetTracing: %v, want no series", got)
	}
	for _, tt := range []struct {
		reason string
		want   string
	}{
		{NotTracingBelowFloor, "reason=kernel_below_floor=0"},
		{"", "=1"},
		{NotTracingBelowFloor, "reason=kernel_below_floor=0"},
	} {
		m.SetTracing(tt.reason)
		if got := state(); len(got) != 1 || got[0] != tt.want {
			t.Errorf("SetTracing(%q): %v, want [%s]", tt.reason, got, tt.want)
		}
	}
}

// withZeroResults adds to want, for each series of reconscope_reconcile_total it names, the
// series of the same controller and workload for every other result, at 0 (Metrics.Write
// makes them when it first sees a controller).
func withZeroResults(want map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for labels, v := range want {
		out[labels] = v
	}
	for labels := range want {
		for _, r := range []string{"success", "error", "requeue", "requeue_after", "abandoned"} {
			l := regexp.MustCompile(`result=[a-z_]+`).ReplaceAllString(labels, "result="+r)
			if _, ok := out[l]; !ok {
				out[l] = 0
			}
		}
	}
	return out
}

// TestMetricsResultsStartAtZero: a controller's first reconcile makes its
// reconscope_reconcile_total series of every result, the others at 0, as controller-runtime's
// controller_runtime_reconcile_total does: an error ratio over a window without errors is 0,
// not no data. Another workload's controller of the same name gets its own.
func TestMetricsResultsStartAtZero(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	_ = m.Write(&span.Span{Controller: "widget", Namespace: "ns", Name: "a", Result: span.ResultSuccess, Duration: time.Millisecond, Pod: "team-a/op-1", Container: "manager"})
	_ = m.Write(&span.Span{Controller: "widget", Namespace: "ns", Name: "a", Result: span.ResultSuccess, Duration: time.Millisecond, Pod: "team-a/op-1", Container: "manager"})
	_ = m.Write(&span.Span{Controller: "widget", Namespace: "ns", Name: "b", Result: span.ResultError, Duration: time.Millisecond, Pod: "team-b/op-1", Container: "manager"})
	fams, _ := scrape(t, srv.URL+"/metrics", "text/plain")
	a := "controller=widget,k8s_container_name=manager,k8s_namespace_name=team-a,k8s_pod_name=op-1,result="
	b := "controller=widget,k8s_container_name=manager,k8s_namespace_name=team-b,k8s_pod_name=op-1,result="
	wantValues(t, fams, "reconscope_reconcile_total", map[string]float64{
		a + "success": 2, a + "error": 0, a + "requeue": 0, a + "requeue_after": 0, a + "abandoned": 0,
		b + "success": 0, b + "error": 1, b + "requeue": 0, b + "requeue_after": 0, b + "abandoned": 0,
	})
}

// TestMetricsWriteConflicts: each write answered 409 counts once, by its controller, the writer
// of the newer version (untraced when none was named) and its resource[/subresource]; other
// calls do not count.
func TestMetricsWriteConflicts(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	put := func(status int, other string) span.Call {
		return span.Call{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "PUT", Resource: "replicasets", Subresource: "status", Status: status, ConflictWriter: other}}
	}
	for _, s := range []*span.Span{
		{Controller: "replicaset", Result: span.ResultError, Calls: []span.Call{put(409, "foo-controller")}},
		{Controller: "replicaset", Result: span.ResultError, Calls: []span.Call{put(409, "foo-controller"), put(200, "")}},
		{Controller: "replicaset", Result: span.ResultError, Calls: []span.Call{put(409, "")}},
		{Controller: "replicaset", Result: span.ResultSuccess, Calls: []span.Call{{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "GET", Resource: "replicasets", Status: 409}}}},
	} {
		if err := m.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	fams, _ := scrape(t, srv.URL+"/metrics", "")
	got := series(t, fams, "reconscope_write_conflicts_total")
	want := map[string]float64{
		"controller=replicaset,other_writer=foo-controller,resource=replicasets/status": 2,
		"controller=replicaset,other_writer=untraced,resource=replicasets/status":       1,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %d", keys(got), len(want))
	}
	for labels, w := range want {
		if v := got[labels].GetCounter().GetValue(); v != w {
			t.Errorf("%s = %v, want %v", labels, v, w)
		}
	}
}

// TestMetricsHotLoopsAndStaleReads: a hot-loop episode counts once, at its start, by
// controller and kind; every stale read counts, by the reader and the read's resource
// (unknown when the read was no call).
func TestMetricsHotLoopsAndStaleReads(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	loop := func(kind span.HotLoopKind, start bool) []span.HotLoop {
		return []span.HotLoop{{Kind: kind, Namespace: "ns", Name: "obj", Count: 5, Start: start}}
	}
	stale := span.StaleRead{Namespace: "ns", Name: "obj", Resource: "configmaps", ResourceVersion: "1", NewerVersion: "2", NewerWriter: "w"}
	for _, s := range []*span.Span{
		{Controller: "looper", Result: span.ResultSuccess, HotLoops: loop(span.HotLoopSelfTriggered, true)},
		{Controller: "looper", Result: span.ResultSuccess, HotLoops: loop(span.HotLoopSelfTriggered, false)},
		{Controller: "looper", Result: span.ResultSuccess, HotLoops: loop(span.HotLoopNoopWrite, true)},
		{Controller: "reader", Result: span.ResultSuccess, StaleReads: []span.StaleRead{stale, stale}},
		{Controller: "reader", Result: span.ResultSuccess, StaleReads: []span.StaleRead{{Name: "obj", ResourceVersion: "1", NewerVersion: "2"}}},
	} {
		if err := m.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	fams, _ := scrape(t, srv.URL+"/metrics", "")
	for name, want := range map[string]map[string]float64{
		"reconscope_hot_loops_total": {
			"controller=looper,kind=self_triggered": 1,
			"controller=looper,kind=noop_write":     1,
		},
		"reconscope_stale_reads_total": {
			"controller=reader,resource=configmaps": 2,
			"controller=reader,resource=unknown":    1,
		},
	} {
		got := series(t, fams, name)
		if len(got) != len(want) {
			t.Errorf("%s: series %v, want %d", name, keys(got), len(want))
		}
		for labels, w := range want {
			if v := got[labels].GetCounter().GetValue(); v != w {
				t.Errorf("%s{%s} = %v, want %v", name, labels, v, w)
			}
		}
	}
}

// TestMetricsSpansUnnamed: reconscope_spans_unnamed_total counts the reconciles of processes in
// a pod the agent could not name (a pod UID or container ID, no pod), not those of named pods
// nor of processes outside Kubernetes; it is there at 0 before any.
func TestMetricsSpansUnnamed(t *testing.T) {
	m, srv, _ := newTestMetrics(t, MetricsOptions{})
	unnamed := func() float64 {
		t.Helper()
		fams, _ := scrape(t, srv.URL+"/metrics", "text/plain")
		f, ok := fams["reconscope_spans_unnamed_total"]
		if !ok || len(f.GetMetric()) != 1 {
			t.Fatalf("reconscope_spans_unnamed_total: %v", f)
		}
		return f.GetMetric()[0].GetCounter().GetValue()
	}
	if n := unnamed(); n != 0 {
		t.Errorf("before any span: %v, want 0", n)
	}
	for _, s := range []*span.Span{
		{Controller: "c", Name: "host", Result: span.ResultSuccess},
		{Controller: "c", Name: "named", Result: span.ResultSuccess, Pod: "ns/p", Container: "manager",
			Workload: &span.Workload{PodUID: "u1", ContainerID: "abc"}},
		{Controller: "c", Name: "no-pod-1", Result: span.ResultSuccess, Workload: &span.Workload{PodUID: "u2", ContainerID: "def"}},
		{Controller: "c", Name: "no-pod-2", Result: span.ResultError, Workload: &span.Workload{PodUID: "u2"}},
	} {
		_ = m.Write(s)
	}
	if n := unnamed(); n != 2 {
		t.Errorf("after 2 reconciles of a pod not known, 1 of a named pod, 1 of a host process: %v, want 2", n)
	}
}
