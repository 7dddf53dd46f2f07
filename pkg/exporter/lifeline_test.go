package exporter

import (
	"encoding/hex"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/reconscope/reconscope/pkg/lifeline"
	"github.com/reconscope/reconscope/pkg/span"
)

// TestOTLPLifelines: each new version an API write made is a span in its object's lifeline
// trace with the derived IDs; the reconcile links to the version it read and to those it
// wrote, the write call to its version; a no-op write (it returned the version read) and a
// version already exported make no lifeline span.
func TestOTLPLifelines(t *testing.T) {
	const dep, rs = "d0000000-0000-4000-8000-000000000001", "d0000000-0000-4000-8000-000000000002"
	at := func(ms int) uint64 { return uint64(time.Duration(ms) * time.Millisecond) }
	api := func(verb, res, sub, name, uid, rv string, status, ms int) span.Call {
		return span.Call{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: verb, Resource: res, Subresource: sub,
			Namespace: "ns", Name: name, UID: uid, ResourceVersion: rv, Status: status}, Start: at(ms), Duration: time.Millisecond}
	}
	spans := []*span.Span{
		{Controller: "deployment", Namespace: "ns", Name: "web", UID: dep, ResourceVersion: "5", ReconcileID: "r1",
			PID: 1, Exe: "/kcm", Pod: "kube-system/kcm-node-1", Start: at(0), Duration: 20 * time.Millisecond, Result: span.ResultSuccess,
			Calls: []span.Call{
				{CallInfo: span.CallInfo{Kind: span.CallCacheGet, Verb: "GET", Namespace: "ns", Name: "web", UID: dep, ResourceVersion: "5"}, Start: at(1)},
				api("POST", "replicasets", "", "web-1", rs, "6", 201, 2),
				api("PUT", "deployments", "status", "web", dep, "7", 200, 4),
				api("PATCH", "deployments", "", "web", dep, "5", 200, 6), // no-op: the version read
				api("PUT", "deployments", "status", "web", "", "", 409, 8),
			}},
		// The replicaset controller reads the version the deployment controller made.
		{Controller: "replicaset", Namespace: "ns", Name: "web-1", UID: rs, ResourceVersion: "6", ReconcileID: "r2",
			PID: 1, Exe: "/kcm", Pod: "kube-system/kcm-node-1", Start: at(30), Duration: 5 * time.Millisecond, Result: span.ResultSuccess,
			Calls: []span.Call{api("PUT", "replicasets", "status", "web-1", rs, "9", 200, 31)}},
		// A later reconcile whose write returned a version already exported (seen twice).
		{Controller: "replicaset", Namespace: "ns", Name: "web-1", UID: rs, ResourceVersion: "8", ReconcileID: "r3",
			PID: 1, Exe: "/kcm", Pod: "kube-system/kcm-node-1", Start: at(40), Duration: 5 * time.Millisecond, Result: span.ResultSuccess,
			Calls: []span.Call{api("PUT", "replicasets", "status", "web-1", rs, "9", 200, 41)}},
	}
	got, _, stats := export(t, ProtocolGRPC, spans, nil)
	// 3 roots + 7 calls + lifelines: rs@6, dep@7, rs@9 (once)
	if len(got) != 3+7+3 || stats.Dropped != 0 {
		t.Fatalf("collector got %d spans (stats %+v), want 13", len(got), stats)
	}
	byID := map[string]*tracepb.Span{}
	roots := map[string]*tracepb.Span{}
	for _, r := range got {
		// Lifeline spans belong to the lifelines service, not to the writing process (so a
		// process's reconcile spans stay its only root spans); the writer is in attributes.
		if r.span.GetKind() == tracepb.Span_SPAN_KIND_PRODUCER {
			wantStr(t, r.resource, "service.name", LifelineService)
			wantStr(t, r.resource, "k8s.node.name", "node-1")
			wantAbsent(t, r.resource, "k8s.pod.name", "process.pid")
			a := attrMap(r.span.GetAttributes())
			wantStr(t, a, "reconscope.lifeline.writer_service", "kcm")
			wantInt(t, a, "process.pid", 1)
			wantStr(t, a, "k8s.pod.name", "kcm-node-1")
			wantStr(t, a, "k8s.namespace.name", "kube-system")
			wantStr(t, a, "k8s.node.name", "node-1")
		}
		byID[hex.EncodeToString(r.span.GetSpanId())] = r.span
		a := attrMap(r.span.GetAttributes())
		if len(r.span.GetParentSpanId()) == 0 && r.span.GetKind() == tracepb.Span_SPAN_KIND_INTERNAL {
			roots[a["reconscope.reconcile_id"].GetStringValue()] = r.span
		}
	}
	lifelineSpan := func(uid, rv string) *tracepb.Span {
		t.Helper()
		s := byID[lifeline.SpanID(uid, rv).String()]
		if s == nil {
			t.Fatalf("no lifeline span for %s@%s", uid, rv)
		}
		if hex.EncodeToString(s.GetTraceId()) != lifeline.TraceID(uid).String() || len(s.GetParentSpanId()) != 0 || s.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER {
			t.Errorf("lifeline span %s@%s: trace %x parent %x kind %v", uid, rv, s.GetTraceId(), s.GetParentSpanId(), s.GetKind())
		}
		return s
	}
	links := func(s *tracepb.Span, typ string) []string {
		var ids []string
		for _, l := range s.GetLinks() {
			if attrMap(l.GetAttributes())["reconscope.link.type"].GetStringValue() == typ {
				ids = append(ids, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
			}
		}
		return ids
	}
	ref := func(uid, rv string) string {
		return lifeline.TraceID(uid).String() + "/" + lifeline.SpanID(uid, rv).String()
	}

	// The deployment controller's writes made rs@6 and dep@7.
	rs6, dep7 := lifelineSpan(rs, "6"), lifelineSpan(dep, "7")
	a := attrMap(dep7.GetAttributes())
	wantStr(t, a, "reconscope.lifeline.writer", "deployment")
	wantStr(t, a, "reconscope.call.subresource", "status")
	wantStr(t, a, "k8s.object.resource_version", "7")
	if dep7.GetName() != "PUT deployments/status" {
		t.Errorf("lifeline span name %q", dep7.GetName())
	}
	if _, ok := byID[lifeline.SpanID(dep, "5").String()]; ok {
		t.Error("the no-op patch (it returned the version read) made a lifeline span")
	}
	r1 := roots["r1"]
	if got := links(r1, "read_version"); len(got) != 1 || got[0] != ref(dep, "5") {
		t.Errorf("r1 read_version links %v, want %s", got, ref(dep, "5"))
	}
	if got := links(r1, "wrote_version"); len(got) != 2 || got[0] != ref(rs, "6") || got[1] != ref(dep, "7") {
		t.Errorf("r1 wrote_version links %v", got)
	}
	// The write call span links to its version, and the version to the call span.
	for _, v := range []*tracepb.Span{rs6, dep7} {
		w := links(v, "writer")
		if len(w) != 1 {
			t.Fatalf("lifeline span %s has writer links %v", v.GetName(), w)
		}
		call := byID[w[0][33:]]
		if call == nil || call.GetName() != v.GetName() || hex.EncodeToString(call.GetTraceId()) != hex.EncodeToString(r1.GetTraceId()) {
			t.Fatalf("writer link of %s goes to %v", v.GetName(), call)
		}
		if got := links(call, "wrote_version"); len(got) != 1 || got[0] != hex.EncodeToString(v.GetTraceId())+"/"+hex.EncodeToString(v.GetSpanId()) {
			t.Errorf("call %s wrote_version links %v", call.GetName(), got)
		}
	}
	// The replicaset reconcile's trigger is the deployment controller's write: one graph.
	if got := links(roots["r2"], "read_version"); len(got) != 1 || got[0] != hex.EncodeToString(rs6.GetTraceId())+"/"+hex.EncodeToString(rs6.GetSpanId()) {
		t.Errorf("r2 read_version links %v, want the lifeline span of rs@6", got)
	}
	// rs@9 exported once, and both reconciles that saw it written link to it.
	lifelineSpan(rs, "9")
	for _, id := range []string{"r2", "r3"} {
		if got := links(roots[id], "wrote_version"); len(got) != 1 || got[0] != ref(rs, "9") {
			t.Errorf("%s wrote_version links %v", id, got)
		}
	}
}
