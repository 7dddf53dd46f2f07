package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/span"
)

// agentEndpoint is the agent's metrics address as cmd/agent serves it (exporter.AgentHandler:
// its Metrics and SpanStream), fed the spans the test writes as the tracer would.
type agentEndpoint struct {
	srv    *httptest.Server
	writer exporter.Multi
	stream *exporter.SpanStream
}

func startAgent(t *testing.T, wrap func(http.Handler) http.Handler) *agentEndpoint {
	t.Helper()
	m := exporter.NewMetrics(exporter.MetricsOptions{})
	st := exporter.NewSpanStream(100, exporter.JSONClock)
	st.Register(m.Registry())
	h := exporter.AgentHandler(m, st)
	if wrap != nil {
		h = wrap(h)
	}
	a := &agentEndpoint{srv: httptest.NewServer(h), writer: exporter.Multi{st, m}, stream: st}
	t.Cleanup(a.srv.Close)
	return a
}

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// reconcile writes one span of controller on ns/name.
func (a *agentEndpoint) reconcile(i int, controller, ns, name string, result span.Result, d time.Duration) {
	s := &span.Span{Controller: controller, Namespace: ns, Name: name, Result: result, Duration: d,
		Start: uint64(t0.Add(time.Duration(i) * time.Second).UnixNano()), PID: 7, ReconcileID: fmt.Sprintf("id-%08d", i)}
	if result == span.ResultError {
		s.ErrorType, s.Error = "*errors.errorString", "boom"
	}
	s.Calls = []span.Call{{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "update", Resource: "widgets", Namespace: ns, Name: name, Status: 200},
		Start: s.Start + 10, Duration: time.Millisecond}}
	_ = a.writer.Write(s)
}

func (a *agentEndpoint) source(name string) source {
	return httpSource(name, a.srv.URL, a.srv.Client())
}

// fixture: two agents; widgets reconciles ns-a/w1 often and fast, gadgets ns-b/g1 rarely,
// slowly and with errors.
func twoAgents(t *testing.T) (*agentEndpoint, *agentEndpoint) {
	a, b := startAgent(t, nil), startAgent(t, nil)
	for i := range 6 {
		a.reconcile(i, "widgets", "ns-a", "w1", span.ResultSuccess, time.Millisecond)
	}
	a.reconcile(10, "widgets", "ns-a", "w2", span.ResultSuccess, time.Millisecond)
	b.reconcile(7, "widgets", "ns-a", "w1", span.ResultRequeue, time.Millisecond)
	b.reconcile(8, "gadgets", "ns-b", "g1", span.ResultError, 2*time.Second)
	b.reconcile(9, "gadgets", "ns-b", "g1", span.ResultError, 2*time.Second)
	b.reconcile(11, "gadgets", "ns-b", "g2", span.ResultSuccess, 3*time.Second)
	return a, b
}

func jsonNames(t *testing.T, out string) []string {
	t.Helper()
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var j exporter.JSONSpan
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("not a JSON span: %q", line)
		}
		if j.Schema != exporter.SpanSchema {
			t.Errorf("JSON span with schema %q, want %q: %s", j.Schema, exporter.SpanSchema, line)
		}
		names = append(names, j.Controller+" "+j.Namespace+"/"+j.Name+" "+j.Result)
	}
	return names
}

// TestTailFilters: tail of two agents prints, in start order, the spans the filters select,
// as JSON lines the agent writes, or as trace's tree.
func TestTailFilters(t *testing.T) {
	a, b := twoAgents(t)
	sources := []source{a.source("agent-a"), b.source("agent-b")}
	for _, tt := range []struct {
		name   string
		filter exporter.SpanFilter
		want   []string
	}{
		{"all", exporter.SpanFilter{}, []string{
			"widgets ns-a/w1 success", "widgets ns-a/w1 success", "widgets ns-a/w1 success", "widgets ns-a/w1 success",
			"widgets ns-a/w1 success", "widgets ns-a/w1 success", "widgets ns-a/w1 requeue", "gadgets ns-b/g1 error",
			"gadgets ns-b/g1 error", "widgets ns-a/w2 success", "gadgets ns-b/g2 success"}},
		{"controller glob", exporter.SpanFilter{Controllers: []string{"gad*"}}, []string{
			"gadgets ns-b/g1 error", "gadgets ns-b/g1 error", "gadgets ns-b/g2 success"}},
		{"namespace and object", exporter.SpanFilter{Namespace: "ns-a", Object: "w2"}, []string{"widgets ns-a/w2 success"}},
		{"errors", exporter.SpanFilter{Errors: true}, []string{"gadgets ns-b/g1 error", "gadgets ns-b/g1 error"}},
		{"nothing", exporter.SpanFilter{Namespace: "ns-z"}, nil},
	} {
		var out, errOut bytes.Buffer
		if err := tail(context.Background(), sources, tt.filter, false, newSpanPrinter("json", &out), &errOut); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if got := jsonNames(t, out.String()); strings.Join(got, ";") != strings.Join(tt.want, ";") {
			t.Errorf("%s: tail -o json =\n%s\nwant\n%s", tt.name, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}

	// The tree is trace's: a line per reconcile, its calls below.
	var out bytes.Buffer
	if err := tail(context.Background(), sources, exporter.SpanFilter{Errors: true}, false, newSpanPrinter("tree", &out), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	tree := exporter.NewTreeWriter(&want, exporter.JSONClock)
	for _, i := range []int{8, 9} {
		s := &span.Span{Controller: "gadgets", Namespace: "ns-b", Name: "g1", Result: span.ResultError, Duration: 2 * time.Second,
			Start: uint64(t0.Add(time.Duration(i) * time.Second).UnixNano()), PID: 7, ReconcileID: fmt.Sprintf("id-%08d", i),
			ErrorType: "*errors.errorString", Error: "boom"}
		s.Calls = []span.Call{{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "update", Resource: "widgets", Namespace: "ns-b", Name: "g1", Status: 200},
			Start: s.Start + 10, Duration: time.Millisecond}}
		_ = tree.Write(s)
	}
	if out.String() != want.String() {
		t.Errorf("tail tree:\n%s\nwant:\n%s", out.String(), want.String())
	}
}

// TestTailOneAgentDown: an agent that cannot be read is reported, the others printed; when
// none can be read, tail fails.
func TestTailOneAgentDown(t *testing.T) {
	a, _ := twoAgents(t)
	down := httpSource("agent-down", "http://127.0.0.1:1", http.DefaultClient)
	var out, errOut bytes.Buffer
	if err := tail(context.Background(), []source{a.source("agent-a"), down}, exporter.SpanFilter{Object: "w2"}, false, newSpanPrinter("json", &out), &errOut); err != nil {
		t.Fatal(err)
	}
	if got := jsonNames(t, out.String()); len(got) != 1 || !strings.Contains(errOut.String(), "agent agent-down") {
		t.Errorf("out %v, stderr %q: want w2's span and agent-down named", got, errOut.String())
	}
	if err := tail(context.Background(), []source{down}, exporter.SpanFilter{}, false, newSpanPrinter("json", &out), &errOut); err == nil {
		t.Error("tail of no readable agent did not fail")
	}
}

// TestTailFollow: with follow, tail prints the spans the agents keep, then those that finish
// after it started, filtered.
func TestTailFollow(t *testing.T) {
	a, b := twoAgents(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testkit.LogBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- tail(ctx, []source{a.source("a"), b.source("b")}, exporter.SpanFilter{Controllers: []string{"gadgets"}}, true, newSpanPrinter("json", out), &bytes.Buffer{})
	}()
	testkit.Eventually(t, "both streams open", 10*time.Second, func() bool { return a.stream.Followers() > 0 && b.stream.Followers() > 0 })
	a.reconcile(20, "widgets", "ns-a", "w1", span.ResultSuccess, time.Millisecond) // not selected
	a.reconcile(21, "gadgets", "ns-c", "late", span.ResultSuccess, time.Millisecond)
	testkit.WaitFor(t, "the new span", 10*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("tail ended (%v) before the new span:\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), `"name":"late"`), out.String()
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("tail: %v", err)
	}
	got := jsonNames(t, out.String())
	if len(got) != 4 || got[3] != "gadgets ns-c/late success" {
		t.Errorf("followed %v, want gadgets' 3 kept spans then ns-c/late", got)
	}
}

// TestTopRanking: top of two agents ranks controllers and objects by rate, errors and p99,
// summed over the agents.
func TestTopRanking(t *testing.T) {
	a, b := twoAgents(t)
	rep, err := top(context.Background(), []source{a.source("a"), b.source("b")}, 0, exporter.SpanFilter{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctrlOrder := func() string {
		var s []string
		for _, c := range rep.controllers {
			s = append(s, fmt.Sprintf("%s:%g:%g", c.controller, c.reconciles, c.errors))
		}
		return strings.Join(s, " ")
	}
	objOrder := func() string {
		var s []string
		for _, o := range rep.objects {
			s = append(s, fmt.Sprintf("%s/%s:%g:%d", o.namespace, o.name, o.reconciles, o.errors))
		}
		return strings.Join(s, " ")
	}
	for _, tt := range []struct{ by, ctrl, objs string }{
		{"rate", "widgets:8:0 gadgets:3:2", "ns-a/w1:7:0 ns-b/g1:2:2 ns-b/g2:1:0 ns-a/w2:1:0"},
		{"errors", "gadgets:3:2 widgets:8:0", "ns-b/g1:2:2 ns-a/w1:7:0 ns-b/g2:1:0 ns-a/w2:1:0"},
		{"p99", "gadgets:3:2 widgets:8:0", "ns-b/g2:1:0 ns-b/g1:2:2 ns-a/w1:7:0 ns-a/w2:1:0"},
	} {
		rep.rank(tt.by)
		if got := ctrlOrder(); got != tt.ctrl {
			t.Errorf("--sort %s: controllers %s, want %s", tt.by, got, tt.ctrl)
		}
		if got := objOrder(); got != tt.objs {
			t.Errorf("--sort %s: objects %s, want %s", tt.by, got, tt.objs)
		}
	}
	// p99 of gadgets' 3 reconciles of 2 s, 2 s and 3 s: in the bucket (2.5 s, 5 s]
	for _, c := range rep.controllers {
		if c.controller == "gadgets" && (c.p99 <= 2.5 || c.p99 > 5) {
			t.Errorf("gadgets p99 %g s, want in (2.5, 5]", c.p99)
		}
		if c.controller == "widgets" && (c.p99 <= 0.0005 || c.p99 > 0.001) {
			t.Errorf("widgets p99 %g s, want in (0.5 ms, 1 ms]", c.p99)
		}
	}
	// -n: the objects of one namespace; the controllers stay
	inB, err := top(context.Background(), []source{a.source("a"), b.source("b")}, 0, exporter.SpanFilter{Namespace: "ns-b"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	inB.rank("rate")
	rep = inB
	objs := objOrder()
	if objs != "ns-b/g1:2:2 ns-b/g2:1:0" || len(inB.controllers) != 2 {
		t.Errorf("top -n ns-b: objects %s, %d controllers; want ns-b's two objects, both controllers", objs, len(inB.controllers))
	}
	var out bytes.Buffer
	rep.rank("rate")
	rep.print(&out, 0)
	for _, want := range []string{"CONTROLLER", "widgets", "OBJECT", "ns-b/g1", "2/2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("top's output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestTopInterval: the rates are of the reconciles between the two scrapes only.
func TestTopInterval(t *testing.T) {
	a, _ := twoAgents(t)
	src := a.source("a")
	before, err := scrapeMetrics(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		a.reconcile(30+i, "widgets", "ns-a", "w3", span.ResultError, time.Millisecond)
	}
	after, err := scrapeMetrics(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[controllerKey]*controllerRow{}
	addControllers(rows, before, after, exporter.SpanFilter{})
	var w *controllerRow
	for k, r := range rows {
		if k.controller == "widgets" {
			w = r
		}
	}
	if w == nil || w.reconciles != 4 || w.errors != 4 || w.count != 4 {
		t.Fatalf("widgets between the scrapes: %+v, want 4 reconciles, 4 errors, 4 observed", w)
	}
	if p := bucketQuantile(0.99, w.buckets, w.count); math.IsNaN(p) || p > 0.001 {
		t.Errorf("p99 %g, want <= 1 ms", p)
	}
}

func TestBucketQuantile(t *testing.T) {
	b := map[float64]float64{0.1: 0, 1: 50, 10: 100, math.Inf(1): 100}
	if got := bucketQuantile(0.5, b, 100); got != 1 {
		t.Errorf("p50 = %g, want 1", got)
	}
	if got := bucketQuantile(0.99, b, 100); math.Abs(got-9.82) > 1e-9 {
		t.Errorf("p99 = %g, want 9.82", got)
	}
	if !math.IsNaN(bucketQuantile(0.99, b, 0)) {
		t.Error("p99 of nothing is not NaN")
	}
}
