package testkit

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is a real OTLP/gRPC trace service on a loopback port that keeps every request
// it is sent: its spans, each with its resource's attributes, and the bytes that crossed the
// wire. It is the one OTLP receiver of the project's tests.
type OTLPReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// Addr is the receiver's host:port, for --otlp-endpoint (with --otlp-insecure).
	Addr string

	mu       sync.Mutex
	spans    []ReceivedSpan
	raw      [][]byte
	requests int
}

// ReceivedSpan is one received span with its resource's attributes.
type ReceivedSpan struct {
	Resource map[string]*commonpb.AnyValue
	Span     *tracepb.Span
}

// AttrMap indexes OTLP attributes by key.
func AttrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// StartOTLPReceiver serves OTLP/gRPC on a free loopback port until the test ends.
func StartOTLPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &OTLPReceiver{Addr: l.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return r
}

// Export implements the OTLP trace service.
func (r *OTLPReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.raw = append(r.raw, b)
	r.requests++
	for _, rs := range req.GetResourceSpans() {
		res := AttrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, ReceivedSpan{Resource: res, Span: sp})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (r *OTLPReceiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*tracepb.Span, len(r.spans))
	for i, s := range r.spans {
		out[i] = s.Span
	}
	return out
}

// Received returns the spans received so far with their resources, and how many export
// requests brought them.
func (r *OTLPReceiver) Received() ([]ReceivedSpan, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReceivedSpan(nil), r.spans...), r.requests
}

// Raw returns every request received so far, as sent (protobuf), one after the other: what a
// test searches for text that must or must not have left the agent.
func (r *OTLPReceiver) Raw() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Join(r.raw, nil)
}
