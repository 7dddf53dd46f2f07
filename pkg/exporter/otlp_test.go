package exporter

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/lifeline"
	"github.com/reconscope/reconscope/pkg/span"
)

// testClock is a fixed Clock: wall = monotonic + 1.7e18 ns, so expected times are exact.
var testClock = ktime.ClockAt(time.Unix(0, 1_700_000_000_000_000_000))

// received is one span as a collector got it, with its resource's attributes.
type received struct {
	resource map[string]*commonpb.AnyValue
	scope    *commonpb.InstrumentationScope
	span     *tracepb.Span
}

// collector keeps what an OTLP server received.
type collector struct {
	mu       sync.Mutex
	spans    []received
	headers  []map[string]string
	response *coltracepb.ExportTraceServiceResponse
	wantJSON bool // the HTTP collector accepts OTLP/JSON instead of protobuf
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest, headers map[string]string) *coltracepb.ExportTraceServiceResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, received{resource: res, scope: ss.GetScope(), span: s})
			}
		}
	}
	c.headers = append(c.headers, headers)
	if c.response != nil {
		return c.response
	}
	return &coltracepb.ExportTraceServiceResponse{}
}

// wantTenant fails t unless the first request carried the header x-tenant: want (gRPC
// metadata keeps the name as sent, HTTP canonicalizes it to X-Tenant).
func (c *collector) wantTenant(t *testing.T, want string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.headers) == 0 {
		t.Fatal("the collector got no request")
	}
	h := c.headers[0]["x-tenant"]
	if h == "" {
		h = c.headers[0]["X-Tenant"]
	}
	if h != want {
		t.Errorf("x-tenant = %q, want %q (headers %v)", h, want, c.headers[0])
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.spans)
}

func (c *collector) all() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.spans...)
}

// grpcCollector is a real OTLP/gRPC trace service.
type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	*collector
}

func (g *grpcCollector) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	h := map[string]string{}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, v := range md {
			h[k] = v[0]
		}
	}
	return g.add(req, h), nil
}

// startGRPCCollector serves OTLP/gRPC on l (a new loopback listener when nil).
func startGRPCCollector(t *testing.T, l net.Listener) (*collector, string) {
	t.Helper()
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	c := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, &grpcCollector{collector: c})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return c, l.Addr().String()
}

// startHTTPCollector serves OTLP/HTTP (protobuf) on l (a new loopback listener when nil).
func startHTTPCollector(t *testing.T, l net.Listener) (*collector, string) {
	t.Helper()
	c := &collector{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		switch ct := r.Header.Get("Content-Type"); {
		case ct == "application/x-protobuf" && !c.wantJSON:
			err = proto.Unmarshal(body, &req)
		case ct == "application/json" && c.wantJSON:
			// OTLP/JSON writes IDs in hex, which protojson reads as (wrong) base64: fine for names.
			err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, &req)
		default:
			err = fmt.Errorf("unexpected Content-Type %q", ct)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnsupportedMediaType)
			return
		}
		h := map[string]string{}
		for k := range r.Header {
			h[k] = r.Header.Get(k)
		}
		out, _ := proto.Marshal(c.add(&req, h))
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	if l != nil {
		srv.Listener.Close()
		srv.Listener = l
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return c, srv.Listener.Addr().String()
}

func startCollector(t *testing.T, p Protocol, l net.Listener) (*collector, string) {
	t.Helper()
	if p == ProtocolGRPC {
		return startGRPCCollector(t, l)
	}
	return startHTTPCollector(t, l)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// testOptions are fast-batching options for a collector at addr.
func testOptions(p Protocol, addr string) OTLPOptions {
	return OTLPOptions{
		Endpoint:     addr,
		Protocol:     p,
		Insecure:     true,
		NodeName:     "node-1",
		Clock:        testClock,
		BatchTimeout: 5 * time.Millisecond,
		Logger:       testkit.Quiet(),
	}
}

const ms = uint64(time.Millisecond)

// The spans of the main test: what the assembler would emit.
func testSpans() []*span.Span {
	manager := func(s *span.Span) *span.Span {
		s.PID, s.Exe, s.Pod, s.Container = 4242, "/manager", "ops/ctl-7d9f", "manager"
		return s
	}
	return []*span.Span{
		manager(&span.Span{
			Controller: "configmap", Namespace: "default", Name: "cm-a", UID: "uid-a", ResourceVersion: "41",
			ReconcileID: "11111111-aaaa", Goid: 318, Start: 1000 * ms, Duration: 5 * time.Millisecond,
			Result: span.ResultSuccess,
			Calls: []span.Call{
				{CallInfo: span.CallInfo{Kind: span.CallCacheGet, Verb: "GET", Resource: "configmaps", Namespace: "default", Name: "cm-a", UID: "uid-a", ResourceVersion: "41"},
					Start: 1000*ms + 100_000, Duration: 50 * time.Microsecond},
				{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "PUT", Resource: "configmaps", Namespace: "default", Name: "cm-a", Status: 200},
					Start: 1001 * ms, Duration: 2 * time.Millisecond},
			},
			Phases:    span.Phases{Fetch: 50 * time.Microsecond, Apply: 2 * time.Millisecond, Diff: 2950 * time.Microsecond},
			ProbeHits: span.ProbeHits{Emulated: 6},
		}),
		manager(&span.Span{
			Controller: "configmap", Namespace: "default", Name: "cm-b", ReconcileID: "22222222-bbbb", Goid: 319,
			Start: 2000 * ms, Duration: 3 * time.Millisecond, Result: span.ResultError,
			ErrorType: "*errors.StatusError", Error: `Operation cannot be fulfilled on configmaps "cm-b": the object has been modified`,
			Calls: []span.Call{
				{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "PUT", Resource: "configmaps", Subresource: "status", Namespace: "default", Name: "cm-b", Status: 409},
					Start: 2001 * ms, Duration: time.Millisecond},
			},
			Phases:    span.Phases{Apply: time.Millisecond, Diff: 2 * time.Millisecond},
			ProbeHits: span.ProbeHits{Emulated: 3, SingleStepped: 2},
		}),
		manager(&span.Span{
			Controller: "deployment", Namespace: "apps", Name: "web", ReconcileID: "33333333-cccc", Goid: 320,
			Start: 3000 * ms, Duration: time.Millisecond, Result: span.ResultRequeueAfter, RequeueAfter: 30 * time.Second,
			Noop: true, Phases: span.Phases{Diff: time.Millisecond}, ProbeHits: span.ProbeHits{Emulated: 2},
		}),
		manager(&span.Span{
			Controller: "deployment", Namespace: "apps", Name: "stuck", Goid: 321,
			Start: 4000 * ms, Duration: 10 * time.Second, Result: span.ResultAbandoned, Incomplete: true,
		}),
		// An inner call (depth 1) is appended before the call that made it, as the assembler does.
		manager(&span.Span{
			Controller: "configmap", Namespace: "default", Name: "cm-a", UID: "uid-a", ReconcileID: "44444444-dddd", Goid: 318,
			Start: 5000 * ms, Duration: 4 * time.Millisecond, Result: span.ResultRequeue,
			Calls: []span.Call{
				{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "GET", Resource: "secrets", Namespace: "default", Name: "token", Status: 404},
					Start: 5001*ms + 10_000, Duration: 500 * time.Microsecond, Depth: 1},
				{CallInfo: span.CallInfo{Kind: span.CallCacheGet, Verb: "GET", Resource: "secrets", Namespace: "default", Name: "token"},
					Start: 5001 * ms, Duration: time.Millisecond, Depth: 0},
			},
			Phases:    span.Phases{Fetch: time.Millisecond, Diff: 3 * time.Millisecond},
			ProbeHits: span.ProbeHits{Emulated: 2},
		}),
		// Another process, outside Kubernetes: service.name is the executable's base name.
		{Controller: "job", Namespace: "batch", Name: "nightly", PID: 99, Exe: "/usr/local/bin/other-operator", Goid: 7,
			Start: 6000 * ms, Duration: time.Millisecond, Result: span.ResultSuccess, Noop: true},
	}
}

// wantAttr fails t unless attrs holds key with the value want, as get reads it.
func wantAttr[T comparable](t *testing.T, attrs map[string]*commonpb.AnyValue, key string, want T, get func(*commonpb.AnyValue) T) {
	t.Helper()
	v, ok := attrs[key]
	if !ok {
		t.Errorf("attribute %s missing, want %#v", key, want)
		return
	}
	if got := get(v); got != want {
		t.Errorf("attribute %s = %#v, want %#v", key, got, want)
	}
}

func wantStr(t *testing.T, attrs map[string]*commonpb.AnyValue, key, want string) {
	t.Helper()
	wantAttr(t, attrs, key, want, (*commonpb.AnyValue).GetStringValue)
}

func wantInt(t *testing.T, attrs map[string]*commonpb.AnyValue, key string, want int64) {
	t.Helper()
	wantAttr(t, attrs, key, want, (*commonpb.AnyValue).GetIntValue)
}

func wantBool(t *testing.T, attrs map[string]*commonpb.AnyValue, key string, want bool) {
	t.Helper()
	wantAttr(t, attrs, key, want, (*commonpb.AnyValue).GetBoolValue)
}

func wantAbsent(t *testing.T, attrs map[string]*commonpb.AnyValue, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := attrs[k]; ok {
			t.Errorf("attribute %s present, want absent", k)
		}
	}
}

func wantTimes(t *testing.T, s *tracepb.Span, start uint64, d time.Duration) {
	t.Helper()
	wantStart := uint64(testClock.Wall(start).UnixNano())
	if s.GetStartTimeUnixNano() != wantStart || s.GetEndTimeUnixNano() != wantStart+uint64(d) {
		t.Errorf("%s: times [%d, %d], want [%d, %d]", s.GetName(), s.GetStartTimeUnixNano(), s.GetEndTimeUnixNano(), wantStart, wantStart+uint64(d))
	}
}

// export writes spans to a new exporter talking to a new collector and shuts it down.
func export(t *testing.T, p Protocol, spans []*span.Span, tune func(*OTLPOptions)) ([]received, *collector, OTLPStats) {
	t.Helper()
	c, addr := startCollector(t, p, nil)
	opts := testOptions(p, addr)
	if tune != nil {
		tune(&opts)
	}
	st := exportWith(t, opts, spans...)
	return c.all(), c, st
}

// exportWith writes spans to a new exporter made with opts and shuts it down; it returns the
// exporter's statistics and fails t on any error.
func exportWith(t *testing.T, opts OTLPOptions, spans ...*span.Span) OTLPStats {
	t.Helper()
	e, err := NewOTLP(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range spans {
		if err := e.Write(s); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	return e.Stats()
}

// roots indexes root spans by reconcile ID (or object name when it has none) and children by
// parent span ID.
func index(got []received) (roots map[string]received, children map[string][]received) {
	roots, children = map[string]received{}, map[string][]received{}
	for _, r := range got {
		if len(r.span.GetParentSpanId()) == 0 {
			a := attrMap(r.span.GetAttributes())
			key := a["reconscope.reconcile_id"].GetStringValue()
			if key == "" {
				key = a["k8s.object.name"].GetStringValue()
			}
			roots[key] = r
			continue
		}
		p := hex.EncodeToString(r.span.GetParentSpanId())
		children[p] = append(children[p], r)
	}
	for _, cs := range children {
		sort.Slice(cs, func(i, j int) bool { return cs[i].span.GetStartTimeUnixNano() < cs[j].span.GetStartTimeUnixNano() })
	}
	return roots, children
}

func TestOTLPExport(t *testing.T) {
	for _, p := range []Protocol{ProtocolGRPC, ProtocolHTTPProtobuf} {
		t.Run(string(p), func(t *testing.T) {
			spans := testSpans()
			got, _, stats := export(t, p, spans, nil)
			total := 0
			for _, s := range spans {
				total += 1 + len(s.Calls)
			}
			if len(got) != total {
				t.Fatalf("collector got %d spans, want %d", len(got), total)
			}
			if stats.Exported != uint64(total) || stats.Dropped != 0 || stats.Queued != 0 {
				t.Errorf("stats = %+v, want %d exported, none dropped", stats, total)
			}
			roots, children := index(got)
			if len(roots) != len(spans) {
				t.Fatalf("got %d root spans, want %d", len(roots), len(spans))
			}

			// 1. A successful reconcile with a cache read and a write.
			r := roots["11111111-aaaa"]
			s := r.span
			if s.GetName() != "reconcile configmap" || s.GetKind() != tracepb.Span_SPAN_KIND_INTERNAL {
				t.Errorf("root: name %q kind %v", s.GetName(), s.GetKind())
			}
			wantTimes(t, s, spans[0].Start, spans[0].Duration)
			a := attrMap(s.GetAttributes())
			wantStr(t, a, "reconscope.controller", "configmap")
			wantStr(t, a, "k8s.object.namespace", "default")
			wantStr(t, a, "k8s.object.name", "cm-a")
			wantStr(t, a, "k8s.object.uid", "uid-a")
			wantStr(t, a, "k8s.object.resource_version", "41")
			wantStr(t, a, "reconscope.reconcile_id", "11111111-aaaa")
			wantStr(t, a, "reconscope.result", "success")
			wantBool(t, a, "reconscope.noop", false)
			wantBool(t, a, "reconscope.incomplete", false)
			// The pod's namespace and the PID are the resource's, never repeated on spans.
			wantAbsent(t, a, "process.pid", "k8s.namespace.name")
			wantInt(t, a, "reconscope.goid", 318)
			wantInt(t, a, "reconscope.probe_hits.emulated", 6)
			wantInt(t, a, "reconscope.probe_hits.single_stepped", 0)
			wantInt(t, a, "reconscope.phase.fetch_ns", 50_000)
			wantInt(t, a, "reconscope.phase.apply_ns", 2_000_000)
			wantInt(t, a, "reconscope.phase.diff_ns", 2_950_000)
			wantInt(t, a, "reconscope.phase.read_ns", 50_000)
			wantInt(t, a, "reconscope.phase.write_ns", 2_000_000)
			wantInt(t, a, "reconscope.phase.compute_ns", 2_950_000)
			wantAbsent(t, a, "error.type", "reconscope.requeue_after_ns")
			if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_UNSET {
				t.Errorf("success status = %v, want unset", s.GetStatus())
			}
			// Its one link is to the lifeline version it read (lifeline_test.go); no previous reconcile.
			if l := s.GetLinks(); len(l) != 1 || attrMap(l[0].GetAttributes())["reconscope.link.type"].GetStringValue() != "read_version" {
				t.Errorf("first reconcile of cm-a has links %v", s.GetLinks())
			}
			res := r.resource
			wantStr(t, res, "service.name", "manager")
			wantInt(t, res, "process.pid", 4242)
			wantStr(t, res, "process.executable.path", "/manager")
			wantStr(t, res, "k8s.pod.name", "ctl-7d9f")
			wantStr(t, res, "k8s.namespace.name", "ops")
			wantStr(t, res, "k8s.container.name", "manager")
			wantStr(t, res, "k8s.node.name", "node-1")

			kids := children[hex.EncodeToString(s.GetSpanId())]
			if len(kids) != 2 {
				t.Fatalf("cm-a has %d child spans, want 2", len(kids))
			}
			get, put := kids[0].span, kids[1].span
			for _, k := range kids {
				if string(k.span.GetTraceId()) != string(s.GetTraceId()) {
					t.Errorf("child %s in trace %x, want %x", k.span.GetName(), k.span.GetTraceId(), s.GetTraceId())
				}
			}
			if get.GetName() != "GET configmaps" || get.GetKind() != tracepb.Span_SPAN_KIND_INTERNAL {
				t.Errorf("cache read: name %q kind %v", get.GetName(), get.GetKind())
			}
			wantTimes(t, get, spans[0].Calls[0].Start, spans[0].Calls[0].Duration)
			ga := attrMap(get.GetAttributes())
			wantStr(t, ga, "reconscope.call.kind", "cache_get")
			wantStr(t, ga, "k8s.object.namespace", "default")
			wantAbsent(t, ga, "k8s.namespace.name", "reconscope.call.path_template")
			wantStr(t, ga, "k8s.object.name", "cm-a")
			wantStr(t, ga, "k8s.object.uid", "uid-a")
			wantStr(t, ga, "k8s.object.resource_version", "41")
			wantAbsent(t, ga, "http.request.method", "http.response.status_code")
			if put.GetName() != "PUT configmaps" || put.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("write: name %q kind %v", put.GetName(), put.GetKind())
			}
			wantTimes(t, put, spans[0].Calls[1].Start, spans[0].Calls[1].Duration)
			pa := attrMap(put.GetAttributes())
			wantStr(t, pa, "reconscope.call.kind", "api")
			wantStr(t, pa, "http.request.method", "PUT")
			wantInt(t, pa, "http.response.status_code", 200)
			wantStr(t, pa, "k8s.object.namespace", "default")
			wantStr(t, pa, "reconscope.call.path_template", "namespaces/{namespace}/configmaps/{name}")
			wantAbsent(t, pa, "k8s.namespace.name")
			wantStr(t, pa, "k8s.object.name", "cm-a")
			if put.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_UNSET {
				t.Errorf("200 status = %v, want unset", put.GetStatus())
			}

			// 2. An error.
			s = roots["22222222-bbbb"].span
			a = attrMap(s.GetAttributes())
			wantStr(t, a, "reconscope.result", "error")
			wantStr(t, a, "error.type", "*errors.StatusError")
			if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.GetStatus().GetMessage() != spans[1].Error {
				t.Errorf("error status = %v, want ERROR %q", s.GetStatus(), spans[1].Error)
			}
			kids = children[hex.EncodeToString(s.GetSpanId())]
			if len(kids) != 1 || kids[0].span.GetName() != "PUT configmaps/status" {
				t.Fatalf("error reconcile children = %v", kids)
			}
			ka := attrMap(kids[0].span.GetAttributes())
			wantInt(t, ka, "http.response.status_code", 409)
			wantStr(t, ka, "error.type", "409")
			if kids[0].span.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("409 call status = %v, want ERROR", kids[0].span.GetStatus())
			}

			// 3. requeue_after.
			s = roots["33333333-cccc"].span
			a = attrMap(s.GetAttributes())
			wantStr(t, a, "reconscope.result", "requeue_after")
			wantInt(t, a, "reconscope.requeue_after_ns", int64(30*time.Second))
			wantBool(t, a, "reconscope.noop", true)
			wantAbsent(t, a, "error.type", "k8s.object.uid")

			// 4. abandoned.
			s = roots["stuck"].span
			a = attrMap(s.GetAttributes())
			wantStr(t, a, "reconscope.result", "abandoned")
			wantStr(t, a, "error.type", "abandoned")
			wantBool(t, a, "reconscope.incomplete", true)
			wantTimes(t, s, spans[3].Start, spans[3].Duration)
			if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.GetStatus().GetMessage() == "" {
				t.Errorf("abandoned status = %v, want ERROR with a message", s.GetStatus())
			}

			// 5. The second reconcile of cm-a links to the first; its calls nest.
			first := roots["11111111-aaaa"].span
			s = roots["44444444-dddd"].span
			if len(s.GetLinks()) != 1 {
				t.Fatalf("second reconcile of cm-a has %d links, want 1", len(s.GetLinks()))
			}
			l := s.GetLinks()[0]
			if string(l.GetTraceId()) != string(first.GetTraceId()) || string(l.GetSpanId()) != string(first.GetSpanId()) {
				t.Errorf("link to %x/%x, want %x/%x", l.GetTraceId(), l.GetSpanId(), first.GetTraceId(), first.GetSpanId())
			}
			wantStr(t, attrMap(l.GetAttributes()), "reconscope.link.type", "previous_reconcile")
			if string(s.GetTraceId()) == string(first.GetTraceId()) {
				t.Error("second reconcile shares the first one's trace")
			}
			kids = children[hex.EncodeToString(s.GetSpanId())]
			if len(kids) != 1 || kids[0].span.GetName() != "GET secrets" || kids[0].span.GetKind() != tracepb.Span_SPAN_KIND_INTERNAL {
				t.Fatalf("children of the second cm-a reconcile = %v, want the cache read only", kids)
			}
			inner := children[hex.EncodeToString(kids[0].span.GetSpanId())]
			if len(inner) != 1 || inner[0].span.GetName() != "GET secrets" || inner[0].span.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
				t.Fatalf("calls inside the cache read = %v, want the API GET", inner)
			}
			wantTimes(t, inner[0].span, spans[4].Calls[0].Start, spans[4].Calls[0].Duration)
			wantInt(t, attrMap(inner[0].span.GetAttributes()), "reconscope.call.depth", 1)
			if string(inner[0].span.GetTraceId()) != string(s.GetTraceId()) {
				t.Error("nested call in another trace")
			}

			// 6. Another process has its own resource.
			r = roots["nightly"]
			wantStr(t, r.resource, "service.name", "other-operator")
			wantInt(t, r.resource, "process.pid", 99)
			wantStr(t, r.resource, "k8s.node.name", "node-1")
			wantAbsent(t, r.resource, "k8s.pod.name", "k8s.container.name", "k8s.namespace.name")
		})
	}
}

// Calls of two goroutines overlap: each nested call goes under the enclosing call of its own
// goroutine.
func TestOTLPCallsOfGoroutines(t *testing.T) {
	call := func(g int64, depth int, name string, start uint64, d time.Duration) span.Call {
		return span.Call{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "GET", Resource: name, Status: 200},
			Start: start, Duration: d, Depth: depth, Goroutine: g}
	}
	s := &span.Span{Controller: "c", Name: "o", ReconcileID: "r", PID: 1, Exe: "/m", Goid: 10,
		Start: 100 * ms, Duration: 20 * time.Millisecond, Result: span.ResultSuccess,
		Calls: []span.Call{
			call(11, 0, "b-outer", 102*ms, 2*time.Millisecond),       // a goroutine the reconcile started
			call(10, 1, "a-inner", 105*ms, time.Millisecond),         // inside a-outer, after b-outer began
			call(10, 0, "a-outer", 101*ms, 10*time.Millisecond),      // the reconcile's goroutine
			call(11, 1, "b-inner", 102*ms+500_000, time.Millisecond), // inside b-outer
		}}
	got, _, _ := export(t, ProtocolGRPC, []*span.Span{s}, nil)
	byName := map[string]*tracepb.Span{}
	for _, r := range got {
		byName[r.span.GetName()] = r.span
	}
	parentOf := func(name string) string {
		for n, sp := range byName {
			if string(sp.GetSpanId()) == string(byName[name].GetParentSpanId()) {
				return n
			}
		}
		return ""
	}
	for child, parent := range map[string]string{
		"GET a-outer": "reconcile c", "GET b-outer": "reconcile c",
		"GET a-inner": "GET a-outer", "GET b-inner": "GET b-outer",
	} {
		if got := parentOf(child); got != parent {
			t.Errorf("parent of %s = %q, want %q", child, got, parent)
		}
	}
	wantInt(t, attrMap(byName["GET b-inner"].GetAttributes()), "reconscope.goid", 11)
}

func TestOTLPEnvironment(t *testing.T) {
	for _, p := range []Protocol{ProtocolGRPC, ProtocolHTTPProtobuf} {
		t.Run(string(p), func(t *testing.T) {
			c, addr := startCollector(t, p, nil)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", string(p))
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme")
			t.Setenv("OTEL_SERVICE_NAME", "controllers")
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
			exportWith(t, OTLPOptions{Clock: testClock, BatchTimeout: 5 * time.Millisecond, Logger: testkit.Quiet()}, testSpans()[2])
			got := c.all()
			if len(got) != 1 {
				t.Fatalf("collector got %d spans, want 1", len(got))
			}
			wantStr(t, got[0].resource, "service.name", "controllers")
			wantStr(t, got[0].resource, "deployment.environment.name", "test")
			wantStr(t, got[0].resource, "k8s.container.name", "manager")
			c.wantTenant(t, "acme")
		})
	}
}

// TestOTLPOptionsOverrideEnvironment: the options' protocol, endpoint and headers win over the
// SDK's environment, with either client.
func TestOTLPOptionsOverrideEnvironment(t *testing.T) {
	for _, tt := range []struct {
		p   Protocol
		env string
	}{{ProtocolGRPC, "http/protobuf"}, {ProtocolHTTPProtobuf, "grpc"}} {
		t.Run(string(tt.p), func(t *testing.T) {
			c, addr := startCollector(t, tt.p, nil)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tt.env)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // nothing there
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=env")
			opts := testOptions(tt.p, "http://"+addr)
			opts.Headers = map[string]string{"x-tenant": "flag"}
			exportWith(t, opts, testSpans()[2])
			if c.count() != 1 {
				t.Fatalf("collector got %d spans, want 1", c.count())
			}
			c.wantTenant(t, "flag")
		})
	}
}

func TestOTLPHTTPEncoding(t *testing.T) {
	for _, tt := range []struct {
		env      string
		opt      Protocol
		wantJSON bool
	}{
		{env: "http/json", opt: ProtocolHTTPProtobuf, wantJSON: false}, // the option wins
		{env: "http/json", wantJSON: true},
		{env: "grpc", opt: ProtocolHTTPJSON, wantJSON: true},
	} {
		t.Run(tt.env+"+"+string(tt.opt), func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tt.env)
			c, addr := startHTTPCollector(t, nil)
			c.wantJSON = tt.wantJSON
			opts := testOptions(tt.opt, "http://"+addr)
			st := exportWith(t, opts, testSpans()[0])
			names := map[string]int{}
			for _, r := range c.all() {
				names[r.span.GetName()]++
			}
			if names["reconcile configmap"] != 1 || names["GET configmaps"] != 1 || names["PUT configmaps"] != 1 {
				t.Errorf("collector got %v", names)
			}
			if st.Exported != 3 {
				t.Errorf("stats %+v, want 3 exported", st)
			}
		})
	}
}

func TestOTLPBadProtocol(t *testing.T) {
	if _, err := NewOTLP(context.Background(), OTLPOptions{Protocol: "thrift"}); err == nil {
		t.Fatal("NewOTLP accepted protocol thrift")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "carrier-pigeon")
	if _, err := NewOTLP(context.Background(), OTLPOptions{}); err == nil {
		t.Fatal("NewOTLP accepted OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=carrier-pigeon")
	}
}

func TestOTLPPartialSuccess(t *testing.T) {
	for _, p := range []Protocol{ProtocolGRPC, ProtocolHTTPProtobuf} {
		t.Run(string(p), func(t *testing.T) {
			c, addr := startCollector(t, p, nil)
			c.response = &coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{
				RejectedSpans: 1, ErrorMessage: "span too old",
			}}
			opts := testOptions(p, addr)
			opts.BatchTimeout = time.Hour // one batch of the 3 spans, sent by Shutdown: one response rejecting one span
			st := exportWith(t, opts, testSpans()[0])
			if st.Exported != 2 || st.Dropped != 1 {
				t.Errorf("stats = %+v, want 2 exported, 1 dropped", st)
			}
		})
	}
}

func TestOTLPLinkCacheBounded(t *testing.T) {
	obj := func(name, id string, start uint64) *span.Span {
		return &span.Span{Controller: "c", Namespace: "ns", Name: name, ReconcileID: id, PID: 1, Exe: "/m",
			Start: start, Duration: time.Millisecond, Result: span.ResultSuccess}
	}
	spans := []*span.Span{obj("a", "1", 1*ms), obj("b", "2", 2*ms), obj("a", "3", 3*ms), obj("a", "4", 4*ms)}
	got, _, _ := export(t, ProtocolGRPC, spans, func(o *OTLPOptions) { o.MaxLinks = 1 })
	roots, _ := index(got)
	// With room for one object, b pushed a out: a's second reconcile has no link, its third does.
	for id, want := range map[string]int{"1": 0, "2": 0, "3": 0, "4": 1} {
		if n := len(roots[id].span.GetLinks()); n != want {
			t.Errorf("reconcile %s has %d links, want %d", id, n, want)
		}
	}
	if l := roots["4"].span.GetLinks(); len(l) == 1 && string(l[0].GetSpanId()) != string(roots["3"].span.GetSpanId()) {
		t.Error("reconcile 4 does not link to reconcile 3")
	}
}

func TestOTLPWriteAfterShutdown(t *testing.T) {
	_, addr := startGRPCCollector(t, nil)
	e, err := NewOTLP(context.Background(), testOptions(ProtocolGRPC, addr))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Write(testSpans()[0]); !errors.Is(err, ErrExporterClosed) {
		t.Errorf("write after shutdown: %v, want ErrExporterClosed", err)
	}
	if st := e.Stats(); st.Dropped != 3 || st.Exported != 0 {
		t.Errorf("stats = %+v, want 3 dropped", st)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Errorf("second shutdown: %v", err)
	}
}

// TestOTLPCollectorDown writes while nothing listens at the endpoint: every write returns, the
// queue never holds more than its bound, every span is accounted for as dropped; then a collector
// comes up at that address and spans flow again.
func TestOTLPCollectorDown(t *testing.T) {
	for _, p := range []Protocol{ProtocolGRPC, ProtocolHTTPProtobuf} {
		t.Run(string(p), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close() // nothing listens there now

			const queue = 16
			opts := testOptions(p, addr)
			opts.MaxQueueSize = queue
			opts.MaxExportBatchSize = 8
			opts.ExportTimeout = 500 * time.Millisecond
			opts.Retry = &RetryOptions{InitialInterval: 5 * time.Millisecond, MaxInterval: 20 * time.Millisecond, MaxElapsedTime: 100 * time.Millisecond}
			opts.ReconnectMaxDelay = 50 * time.Millisecond
			e, err := NewOTLP(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Shutdown(context.Background()) })

			mk := func(i int) *span.Span {
				s := *testSpans()[1] // one root and one call
				s.Start = uint64(i+1) * ms
				return &s
			}
			const n = 500
			written := 0
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range n {
					_ = e.Write(mk(i))
				}
			}()
			select {
			case <-done:
			case <-time.After(60 * time.Second): // a hang guard, not a measurement
				t.Fatal("writes blocked while the collector is down")
			}
			written += 2 * n

			st := e.Stats()
			if st.Exported != 0 {
				t.Errorf("exported %d spans with no collector", st.Exported)
			}
			if got := st.Exported + st.Dropped + uint64(st.Queued); got != uint64(written) {
				t.Errorf("exported %d + dropped %d + queued %d = %d, want %d", st.Exported, st.Dropped, st.Queued, got, written)
			}
			if st.Dropped < uint64(written-queue) {
				t.Errorf("dropped %d, want at least %d (queue holds %d)", st.Dropped, written-queue, queue)
			}
			e.acct.mu.Lock()
			peak := e.acct.peak
			e.acct.mu.Unlock()
			if peak > queue {
				t.Errorf("queue held %d spans, bound is %d", peak, queue)
			}

			// Failed exports give the queued spans up, counted.
			testkit.Eventually(t, "failed exports to settle", 30*time.Second, func() bool { return e.Stats().Queued == 0 })
			if st := e.Stats(); st.Dropped != uint64(written) || st.Exported != 0 {
				t.Errorf("after failures: %+v, want all %d dropped", st, written)
			}

			// The collector comes up at the same address: spans flow again.
			l, err = net.Listen("tcp", addr)
			if err != nil {
				bpftest.SkipOrFail(t, "cannot listen again on %s (another process took the port?): %v", addr, err)
			}
			c, _ := startCollector(t, p, l)
			i := n
			testkit.Eventually(t, "spans to reach the recovered collector", 30*time.Second, func() bool {
				_ = e.Write(mk(i))
				i++
				written += 2
				return c.count() > 0
			})
			if err := e.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			st = e.Stats()
			if st.Exported+st.Dropped != uint64(written) || st.Queued != 0 {
				t.Errorf("after shutdown: %+v, want exported + dropped = %d", st, written)
			}
			if st.Exported != uint64(c.count()) || st.Exported == 0 {
				t.Errorf("exported %d, collector received %d", st.Exported, c.count())
			}
		})
	}
}

// TestPartialSuccessRejected: only an error that is nothing but partial successes counts some
// spans as exported (the SDK's text; TestOTLPPartialSuccess has the SDK make it).
func TestPartialSuccessRejected(t *testing.T) {
	partial := errors.New("OTLP partial success: span too old (3 spans rejected)")
	for _, c := range []struct {
		name string
		err  error
		n    int64
		ok   bool
	}{
		{name: "nil"},
		{name: "plain", err: errors.New("connection refused")},
		{name: "partial", err: partial, n: 3, ok: true},
		{name: "wrapped", err: fmt.Errorf("traces export: %w", errors.Join(partial)), n: 3, ok: true},
		{name: "with a failure", err: errors.Join(partial, errors.New("rpc error: code = Unavailable"))},
		{name: "no count", err: errors.New("OTLP partial success: empty message")},
	} {
		if n, ok := partialSuccessRejected(c.err); n != c.n || ok != c.ok {
			t.Errorf("%s: partialSuccessRejected(%v) = %d, %v; want %d, %v", c.name, c.err, n, ok, c.n, c.ok)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	h, err := ParseHeaders("authorization=Bearer%20abc, x-tenant=acme,,")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h["authorization"] != "Bearer abc" || h["x-tenant"] != "acme" {
		t.Errorf("ParseHeaders = %v", h)
	}
	for _, bad := range []string{"novalue", "=v", "k=%zz"} {
		if _, err := ParseHeaders(bad); err == nil {
			t.Errorf("ParseHeaders(%q) accepted", bad)
		}
	}
}

// listen4317 listens on port 4317 of a loopback address of its own (127.0.0.0/8), so the test
// does not need the machine's 127.0.0.1:4317 to be free.
func listen4317(t *testing.T) net.Listener {
	t.Helper()
	var last error
	for i := 0; i < 50; i++ {
		addr := fmt.Sprintf("127.%d.%d.%d:4317", 43+i%7, 17+i, 2+os.Getpid()%200)
		l, err := net.Listen("tcp", addr)
		if err == nil {
			return l
		}
		last = err
	}
	t.Fatalf("no loopback address with port 4317 free: %v", last)
	return nil
}

func TestDefaultProtocol(t *testing.T) {
	for _, tt := range []struct {
		endpoint string
		want     Protocol
	}{
		{"http://otel-collector.observability:4317", ProtocolGRPC},
		{"https://collector.example:4317/", ProtocolGRPC},
		{"collector:4317", ProtocolGRPC},
		{"http://otel-collector.observability:4318", ProtocolHTTPProtobuf},
		{"http://collector/otlp", ProtocolHTTPProtobuf},
		{"collector:14317", ProtocolHTTPProtobuf},
		{"", ProtocolHTTPProtobuf},
	} {
		if got := DefaultProtocol(tt.endpoint); got != tt.want {
			t.Errorf("DefaultProtocol(%q) = %s, want %s", tt.endpoint, got, tt.want)
		}
	}
}

// TestOTLPDefaultProtocolPort4317 is the DaemonSet's case: only OTEL_EXPORTER_OTLP_ENDPOINT is
// set, on the collector's gRPC port; the spans must reach a real OTLP/gRPC receiver.
func TestOTLPDefaultProtocolPort4317(t *testing.T) {
	for _, env := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""} {
		t.Run(cmp.Or(env, "option"), func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
			c, addr := startGRPCCollector(t, listen4317(t))
			opts := OTLPOptions{Clock: testClock, BatchTimeout: 5 * time.Millisecond, Logger: testkit.Quiet()}
			if env != "" {
				t.Setenv(env, "http://"+addr)
			} else {
				opts.Endpoint, opts.Insecure = addr, true
			}
			st := exportWith(t, opts, testSpans()[0])
			if c.count() != 3 {
				t.Fatalf("gRPC receiver on %s got %d spans, want 3 (stats %+v)", addr, c.count(), st)
			}
		})
	}
	// Any other port: http/protobuf, the specification's default.
	t.Run("other port", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
		c, addr := startHTTPCollector(t, nil)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
		exportWith(t, OTLPOptions{Clock: testClock, BatchTimeout: 5 * time.Millisecond, Logger: testkit.Quiet()}, testSpans()[0])
		if c.count() != 3 {
			t.Fatalf("HTTP receiver got %d spans, want 3", c.count())
		}
	})
}

func TestTracesExportersFromEnv(t *testing.T) {
	for _, tt := range []struct {
		disabled, exporters string
		want                []string
		explicit, wantErr   bool
	}{
		{want: []string{"otlp"}},
		{exporters: "otlp", want: []string{"otlp"}, explicit: true},
		{exporters: "console", want: []string{"console"}, explicit: true},
		{exporters: "otlp, console,otlp", want: []string{"otlp", "console"}, explicit: true},
		{exporters: "none", explicit: true},
		{exporters: "zipkin", explicit: true, wantErr: true},
		{disabled: "true", exporters: "otlp", explicit: true},
		{disabled: "false", want: []string{"otlp"}},
		{disabled: "maybe", wantErr: true},
	} {
		t.Setenv("OTEL_SDK_DISABLED", tt.disabled)
		t.Setenv("OTEL_TRACES_EXPORTER", tt.exporters)
		got, explicit, err := TracesExportersFromEnv()
		if (err != nil) != tt.wantErr || explicit != tt.explicit || !slices.Equal(got, tt.want) {
			t.Errorf("OTEL_SDK_DISABLED=%q OTEL_TRACES_EXPORTER=%q: got %v, explicit %v, err %v; want %v, explicit %v, err %v",
				tt.disabled, tt.exporters, got, explicit, err, tt.want, tt.explicit, tt.wantErr)
		}
	}
}

// TestConsoleExporter: OTEL_TRACES_EXPORTER=console prints the spans (the SDK's JSON) and, with
// otlp too, still sends them to the collector.
func TestConsoleExporter(t *testing.T) {
	c, addr := startGRPCCollector(t, nil)
	var out bytes.Buffer
	opts := testOptions(ProtocolGRPC, "http://"+addr)
	opts.Exporters = []string{ExporterOTLP, ExporterConsole}
	opts.Console = &out
	st := exportWith(t, opts, testSpans()[0])
	if c.count() != 3 {
		t.Errorf("collector got %d spans, want 3", c.count())
	}
	if n := strings.Count(out.String(), `"Name":"reconcile configmap"`); n != 1 {
		t.Errorf("console printed the reconcile %d times, want once:\n%s", n, out.String())
	}
	if st.Exported != 3 || st.Dropped != 0 {
		t.Errorf("stats %+v, want 3 exported", st)
	}
}

// TestOTLPWorkloadResource: a process whose pod the agent knows is one resource with the pod's
// identity as OpenTelemetry names it (what the collector's k8sattributes processor associates
// on), the service identity resolved by the agent, and the object's identity on spans only.
func TestOTLPWorkloadResource(t *testing.T) {
	s := &span.Span{
		Controller: "widget", Namespace: "shop", Name: "w1", ReconcileID: "55555555-eeee", Goid: 30,
		Start: 1000 * ms, Duration: time.Millisecond, Result: span.ResultSuccess,
		PID: 77, Exe: "/manager", Pod: "widget-system/widget-controller-7c9f8d-abcde", Container: "manager",
		Workload: &span.Workload{
			PodUID: "0f6c1a52-8a7e-4a43-9b8e-6a0d6f1f3d2b", Node: "node-7",
			Kind: "Deployment", Name: "widget-controller", ReplicaSet: "widget-controller-7c9f8d",
			ServiceName: "widget-operator", ServiceNamespace: "widget-system",
			ServiceInstanceID: "widget-system.widget-controller-7c9f8d-abcde.manager",
			ServiceVersion:    "v2.3.1",
			ContainerID:       "3f1c9a0d5e7b2c4a6f8e0d1b3c5a7e9f1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a",
			Attributes:        map[string]string{"deployment.environment.name": "prod"},
		},
		Calls: []span.Call{{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "PATCH", Resource: "widgets", Subresource: "status", Namespace: "shop", Name: "w1", Status: 200},
			Start: 1000*ms + 10, Duration: 100 * time.Microsecond}},
	}
	got, _, _ := export(t, ProtocolGRPC, []*span.Span{s}, func(o *OTLPOptions) { o.Version = "v0.1.0" })
	if len(got) != 2 {
		t.Fatalf("collector got %d spans, want 2", len(got))
	}
	for _, r := range got {
		if sc := r.scope; sc.GetName() != instrumentationScope || sc.GetVersion() != "v0.1.0" {
			t.Errorf("span %s: instrumentation scope %q version %q, want %q version v0.1.0 (the agent's)", r.span.GetName(), sc.GetName(), sc.GetVersion(), instrumentationScope)
		}
	}
	if s.TraceID == "" || hex.EncodeToString(got[0].span.GetTraceId()) != s.TraceID {
		t.Errorf("span.TraceID = %q, collector's trace %x", s.TraceID, got[0].span.GetTraceId())
	}
	res := got[0].resource
	for k, v := range map[string]string{
		"service.name":                "widget-operator",
		"service.namespace":           "widget-system",
		"service.instance.id":         "widget-system.widget-controller-7c9f8d-abcde.manager",
		"k8s.pod.uid":                 "0f6c1a52-8a7e-4a43-9b8e-6a0d6f1f3d2b",
		"k8s.pod.name":                "widget-controller-7c9f8d-abcde",
		"k8s.namespace.name":          "widget-system",
		"k8s.container.name":          "manager",
		"k8s.node.name":               "node-7", // the pod's node wins over OTLPOptions.NodeName
		"k8s.deployment.name":         "widget-controller",
		"k8s.replicaset.name":         "widget-controller-7c9f8d",
		"deployment.environment.name": "prod",
		"service.version":             "v2.3.1",
		"container.id":                "3f1c9a0d5e7b2c4a6f8e0d1b3c5a7e9f1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a",
	} {
		wantStr(t, res, k, v)
	}
	wantInt(t, res, "process.pid", 77)
	wantAbsent(t, res, "k8s.statefulset.name", "k8s.daemonset.name")
	for _, r := range got {
		a := attrMap(r.span.GetAttributes())
		wantStr(t, a, "k8s.object.namespace", "shop")
		wantStr(t, a, "k8s.object.name", "w1")
		wantAbsent(t, a, "k8s.namespace.name", "process.pid", "k8s.pod.name")
		if r.span.GetName() == "PATCH widgets/status" {
			wantStr(t, a, "reconscope.call.path_template", "namespaces/{namespace}/widgets/{name}/status")
			wantStr(t, a, "http.request.method", "PATCH")
			wantInt(t, a, "http.response.status_code", 200)
		}
	}
}

// TestOTLPFightEvent: a reconcile whose write took part in a controller fight carries one
// span event per fight, at the write's return, naming the object, writers and opponents.
func TestOTLPFightEvent(t *testing.T) {
	const uid = "44444444-4444-4444-4444-444444444444"
	s := &span.Span{Controller: "alpha", Namespace: "fight", Name: "arena", ReconcileID: "r", PID: 1, Exe: "/m", Goid: 10,
		Start: 100 * ms, Duration: 20 * time.Millisecond, Result: span.ResultSuccess,
		Fights: []span.Fight{{Namespace: "fight", Name: "arena", UID: uid, Resource: "configmaps",
			Writers: []string{"alpha", "beta"}, Processes: []uint32{1, 2}, Alternations: 4, Start: true, At: 110 * ms}}}
	got, _, _ := export(t, ProtocolGRPC, []*span.Span{s}, nil)
	var evs []*tracepb.Span_Event
	for _, r := range got {
		if r.span.GetName() == "reconcile alpha" {
			evs = r.span.GetEvents()
		}
	}
	if len(evs) != 1 || evs[0].GetName() != "reconscope.controller_fight" {
		t.Fatalf("events %v, want one reconscope.controller_fight", evs)
	}
	if want := uint64(testClock.Wall(110 * ms).UnixNano()); evs[0].GetTimeUnixNano() != want {
		t.Errorf("event at %d, want %d (the write's return)", evs[0].GetTimeUnixNano(), want)
	}
	a := attrMap(evs[0].GetAttributes())
	wantStr(t, a, "k8s.object.uid", uid)
	wantStr(t, a, "k8s.object.name", "arena")
	wantStr(t, a, "reconscope.call.resource", "configmaps")
	wantInt(t, a, "reconscope.fight.alternations", 4)
	wantBool(t, a, "reconscope.fight.start", true)
	wantAbsent(t, a, "reconscope.call.subresource")
	var writers, opponents []string
	for _, v := range a["reconscope.fight.writers"].GetArrayValue().GetValues() {
		writers = append(writers, v.GetStringValue())
	}
	for _, v := range a["reconscope.fight.opponents"].GetArrayValue().GetValues() {
		opponents = append(opponents, v.GetStringValue())
	}
	if strings.Join(writers, ",") != "alpha,beta" || strings.Join(opponents, ",") != "beta" {
		t.Errorf("writers %v opponents %v, want alpha,beta and beta", writers, opponents)
	}
}

// TestOTLPTriggerLinks: a reconcile links to the lifeline span of each watch event's version
// among its triggers (derived from the event's UID and resourceVersion, as the writer's agent
// derives its lifeline span), once per version, with the trigger's attributes; requeues have
// no version to link to. reconscope.triggers sums the set up in one attribute, and
// read_version_writer is an attribute of its own.
func TestOTLPTriggerLinks(t *testing.T) {
	const podUID, cmUID = "55555555-5555-5555-5555-555555555555", "66666666-6666-6666-6666-666666666666"
	pod := span.ObjectRef{Kind: "Pod", Namespace: "ns", Name: "web-1", UID: podUID, ResourceVersion: "812"}
	s := &span.Span{Controller: "owner", Namespace: "ns", Name: "web", ReconcileID: "r", PID: 1, Exe: "/m", Goid: 10,
		Start: 100 * ms, Duration: 20 * time.Millisecond, Result: span.ResultSuccess,
		Triggers: []span.Trigger{
			{Kind: span.TriggerMapped, Event: span.WatchAdd, Object: pod, Writer: "replicaset", Time: 90 * ms},
			{Kind: span.TriggerMapped, Event: span.WatchAdd, Object: pod, Writer: "replicaset", Time: 91 * ms}, // one version, one link
			{Kind: span.TriggerRetry, Time: 95 * ms},
			{Kind: span.TriggerOther, Function: "main.resyncAll", Time: 95 * ms},
			{Kind: span.TriggerEvent, Event: span.WatchUpdate, Object: span.ObjectRef{Kind: "ConfigMap", Namespace: "ns", Name: "web", UID: cmUID, ResourceVersion: "9"}, Writer: span.WriterUntraced, Time: 96 * ms},
		},
		TriggersDropped:   2,
		TriggerController: span.TriggerUnknown, ReadVersionWriter: "owner"}
	got, _, _ := export(t, ProtocolGRPC, []*span.Span{s}, nil)
	var root *tracepb.Span
	for _, r := range got {
		if r.span.GetName() == "reconcile owner" {
			root = r.span
		}
	}
	if root == nil {
		t.Fatal("no reconcile span")
	}
	a := attrMap(root.GetAttributes())
	wantStr(t, a, "reconscope.triggers", "mapped add Pod ns/web-1@812 by replicaset, mapped add Pod ns/web-1@812 by replicaset, retry, other from main.resyncAll, event update ConfigMap ns/web@9 by untraced (+2 more)")
	wantStr(t, a, "reconscope.trigger.controller", span.TriggerUnknown)
	wantStr(t, a, "reconscope.read_version.writer", "owner")
	var links []*tracepb.Span_Link
	for _, l := range root.GetLinks() {
		if attrMap(l.GetAttributes())["reconscope.link.type"].GetStringValue() == "trigger" {
			links = append(links, l)
		}
	}
	if len(links) != 2 {
		t.Fatalf("%d trigger links, want 2 (one per version): %v", len(links), root.GetLinks())
	}
	for i, want := range []struct {
		uid, rv, kind, event, writer, objKind, name string
	}{
		{podUID, "812", "mapped", "add", "replicaset", "Pod", "web-1"},
		{cmUID, "9", "event", "update", span.WriterUntraced, "ConfigMap", "web"},
	} {
		l := links[i]
		v := lifeline.Version(want.uid, want.rv)
		if hex.EncodeToString(l.GetTraceId()) != v.TraceID().String() {
			t.Errorf("link %d to trace %x, want the lifeline trace %s", i, l.GetTraceId(), v.TraceID())
		}
		if hex.EncodeToString(l.GetSpanId()) != v.SpanID().String() {
			t.Errorf("link %d to span %x, want the version's lifeline span %s", i, l.GetSpanId(), v.SpanID())
		}
		la := attrMap(l.GetAttributes())
		wantStr(t, la, "k8s.object.uid", want.uid)
		wantStr(t, la, "k8s.object.resource_version", want.rv)
		wantStr(t, la, "reconscope.trigger.kind", want.kind)
		wantStr(t, la, "reconscope.trigger.event", want.event)
		wantStr(t, la, "reconscope.trigger.writer", want.writer)
		wantStr(t, la, "k8s.object.kind", want.objKind)
		wantStr(t, la, "k8s.object.name", want.name)
		wantStr(t, la, "k8s.object.namespace", "ns")
	}
}

// TestOTLPHotLoopAndStaleReadEvents: a reconcile in a hot loop carries a reconscope.hot_loop
// event, one with a stale read a reconscope.stale_read event at the read's start naming both
// versions, the newer one's writer and the age.
func TestOTLPHotLoopAndStaleReadEvents(t *testing.T) {
	const uid = "44444444-4444-4444-4444-444444444444"
	s := &span.Span{Controller: "looper", Namespace: "ns", Name: "obj", ReconcileID: "r", PID: 1, Exe: "/m", Goid: 10,
		Start: 100 * ms, Duration: 20 * time.Millisecond, Result: span.ResultSuccess,
		HotLoops: []span.HotLoop{{Kind: span.HotLoopSelfTriggered, Namespace: "ns", Name: "obj", UID: uid, Count: 5, Start: true, At: 100 * ms}},
		StaleReads: []span.StaleRead{{Namespace: "ns", Name: "obj", UID: uid, Resource: "configmaps", ResourceVersion: "213",
			NewerVersion: "216", NewerWriter: "writer", Age: 3 * time.Millisecond, At: 105 * ms}}}
	got, _, _ := export(t, ProtocolGRPC, []*span.Span{s}, nil)
	evs := map[string]*tracepb.Span_Event{}
	for _, r := range got {
		if r.span.GetName() == "reconcile looper" {
			for _, e := range r.span.GetEvents() {
				evs[e.GetName()] = e
			}
		}
	}
	h, st := evs["reconscope.hot_loop"], evs["reconscope.stale_read"]
	if len(evs) != 2 || h == nil || st == nil {
		t.Fatalf("events %v, want reconscope.hot_loop and reconscope.stale_read", evs)
	}
	a := attrMap(h.GetAttributes())
	wantStr(t, a, "reconscope.hot_loop.kind", "self_triggered")
	wantStr(t, a, "k8s.object.uid", uid)
	wantInt(t, a, "reconscope.hot_loop.count", 5)
	wantBool(t, a, "reconscope.hot_loop.start", true)
	wantAbsent(t, a, "reconscope.call.resource")
	if want := uint64(testClock.Wall(105 * ms).UnixNano()); st.GetTimeUnixNano() != want {
		t.Errorf("stale read event at %d, want %d (the read's start)", st.GetTimeUnixNano(), want)
	}
	a = attrMap(st.GetAttributes())
	wantStr(t, a, "k8s.object.resource_version", "213")
	wantStr(t, a, "reconscope.stale_read.newer_resource_version", "216")
	wantStr(t, a, "reconscope.stale_read.newer_writer", "writer")
	wantInt(t, a, "reconscope.stale_read.age_ns", int64(3*time.Millisecond))
	wantStr(t, a, "reconscope.call.resource", "configmaps")
}
