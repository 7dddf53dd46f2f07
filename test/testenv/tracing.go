package testenv

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Jaeger is a real Jaeger (v2, all in one: OTLP in, in-memory storage, the query API) built by
// test/tools/build-jaeger.sh and run by StartJaeger.
type Jaeger struct {
	// OTLPAddr is its OTLP/gRPC receiver (host:port on loopback).
	OTLPAddr string
	// QueryURL is the base URL of its query service (the UI and /api/v3).
	QueryURL string
	proc     *Process
}

// StartJaeger runs Jaeger with in-memory storage on free loopback ports, stopped at the end of
// the test, and returns once its query API answers.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	dir := ToolDir(t, "build-jaeger.sh", "jaeger")
	ports := make([]int, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		ports[i] = p
	}
	j := &Jaeger{OTLPAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), QueryURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	// The all-in-one configuration (cmd/jaeger/internal/all-in-one.yaml) cut to OTLP/gRPC in,
	// memory storage and the query service, on free ports, with no telemetry port of its own.
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`, ports[1], ports[2], j.OTLPAddr)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	j.proc = StartProcess(t, "jaeger", exec.Command(filepath.Join(dir, "jaeger"), "--config", path))
	waitServing(t, j.proc, "jaeger", j.QueryURL+"/api/v3/services")
	return j
}

// Collector is a real OpenTelemetry Collector (test/tools/otelcol, the components of
// deploy/otel-collector) run by StartCollector.
type Collector struct{ proc *Process }

// StartCollector runs the OpenTelemetry Collector with config (the YAML of a collector
// configuration), merged with each of overrides (YAML too, later ones win, as the collector
// merges several --config files), stopped at the end of the test. It returns once the
// collector has started its pipelines.
func StartCollector(t testing.TB, config string, overrides ...string) *Collector {
	t.Helper()
	dir := ToolDir(t, "build-otelcol.sh", "otelcol")
	tmp := t.TempDir()
	var args []string
	for i, c := range append([]string{config}, overrides...) {
		path := filepath.Join(tmp, fmt.Sprintf("collector-%d.yaml", i))
		if err := os.WriteFile(path, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config=file:"+path)
	}
	c := &Collector{proc: StartProcess(t, "otelcol", exec.Command(filepath.Join(dir, "otelcol"), args...))}
	testkit.Eventually(t, "testenv: the collector to start", 60*time.Second, func() bool {
		b, _ := os.ReadFile(c.proc.StderrPath())
		if bytes.Contains(b, []byte("Everything is ready. Begin running and processing data.")) {
			return true
		}
		if c.proc.Exited() {
			t.Fatalf("testenv: the collector exited at start: %v", c.proc.Wait())
		}
		return false
	})
	return c
}

// StderrPath is the file holding the collector's log (its debug exporter's output too).
func (c *Collector) StderrPath() string { return c.proc.StderrPath() }

// waitServing waits up to a minute for url to answer 200, failing the test when p exits.
func waitServing(t testing.TB, p *Process, name, u string) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	testkit.WaitFor(t, fmt.Sprintf("testenv: %s to answer %s", name, u), 60*time.Second, func() (bool, string) {
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		if p.Exited() {
			t.Fatalf("testenv: %s exited at start: %v", name, p.Wait())
		}
		return false, err.Error()
	})
}

// Services lists the service names Jaeger has spans of.
func (j *Jaeger) Services() ([]string, error) {
	var out struct {
		Services []string `json:"services"`
	}
	if err := j.get("/api/v3/services", &out); err != nil {
		return nil, err
	}
	return out.Services, nil
}

// FindTraces returns every span Jaeger has of service's traces that started in [from, to],
// unchanged (raw: no clock-skew adjustment), as OTLP resource spans.
func (j *Jaeger) FindTraces(service string, from, to time.Time) ([]*tracepb.ResourceSpans, error) {
	q := url.Values{}
	q.Set("query.service_name", service)
	q.Set("query.start_time_min", from.UTC().Format(time.RFC3339Nano))
	q.Set("query.start_time_max", to.UTC().Format(time.RFC3339Nano))
	q.Set("query.num_traces", "100000")
	q.Set("query.raw_traces", "true")
	return j.traces("/api/v3/traces?" + q.Encode())
}

// GetTrace returns the spans of one trace (its ID in hex).
func (j *Jaeger) GetTrace(traceID string) ([]*tracepb.ResourceSpans, error) {
	return j.traces("/api/v3/traces/" + traceID + "?raw_traces=true")
}

func (j *Jaeger) traces(path string) ([]*tracepb.ResourceSpans, error) {
	var out struct {
		Result json.RawMessage `json:"result"`
	}
	err := j.get(path, &out)
	if err == errNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeOTLPJSON(out.Result)
}

var errNotFound = fmt.Errorf("not found")

func (j *Jaeger) get(path string, v any) error {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(j.QueryURL + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return errNotFound
	default:
		return fmt.Errorf("jaeger GET %s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// decodeOTLPJSON decodes OTLP's JSON encoding of TracesData. It is protobuf's JSON mapping
// except that trace and span IDs are hex, not base64: they are rewritten before protojson reads
// the message.
func decodeOTLPJSON(b []byte) ([]*tracepb.ResourceSpans, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("decode OTLP JSON: %w", err)
	}
	if err := hexIDsToBase64(doc); err != nil {
		return nil, err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var td tracepb.TracesData
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &td); err != nil {
		return nil, fmt.Errorf("decode OTLP JSON: %w", err)
	}
	return td.GetResourceSpans(), nil
}

func hexIDsToBase64(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch k {
			case "traceId", "spanId", "parentSpanId":
				s, ok := x.(string)
				if !ok {
					continue
				}
				raw, err := hex.DecodeString(s)
				if err != nil {
					return fmt.Errorf("decode OTLP JSON: %s %s: %w", k, strconv.Quote(s), err)
				}
				v[k] = base64.StdEncoding.EncodeToString(raw)
			default:
				if err := hexIDsToBase64(x); err != nil {
					return err
				}
			}
		}
	case []any:
		for _, x := range v {
			if err := hexIDsToBase64(x); err != nil {
				return err
			}
		}
	}
	return nil
}
