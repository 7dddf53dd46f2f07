//go:build e2e

package e2e

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
)

// recvSpan is one received span with its resource's attributes: from the agent's OTLP export
// (testkit's receiver) or from Jaeger.
type recvSpan = testkit.ReceivedSpan

// attrMap indexes OTLP attributes by key.
var attrMap = testkit.AttrMap

func attrStr(m map[string]*commonpb.AnyValue, k string) string { return m[k].GetStringValue() }
func attrInt(m map[string]*commonpb.AnyValue, k string) int64  { return m[k].GetIntValue() }

// callSpanName is the name the exporter gives a call's span: "<verb> <resource>[/<sub>]".
func callSpanName(c exporter.JSONCall) string {
	verb := c.Verb
	if verb == "" {
		switch c.Kind {
		case "cache_get":
			verb = "GET"
		case "cache_list":
			verb = "LIST"
		default:
			verb = "CALL"
		}
	}
	if c.Resource == "" {
		return verb
	}
	res := c.Resource
	if c.Subresource != "" {
		res += "/" + c.Subresource
	}
	return verb + " " + res
}

// rootKey identifies a reconcile in both outputs: the same clock stamps both, to the
// nanosecond.
type rootKey struct {
	pid                  int64
	controller, ns, name string
	startNS              int64
}

func (k rootKey) String() string {
	return fmt.Sprintf("pid %d %s %s/%s @%d", k.pid, k.controller, k.ns, k.name, k.startNS)
}

func jsonKey(s exporter.JSONSpan) rootKey {
	return rootKey{int64(s.PID), s.Controller, s.Namespace, s.Name, s.Start.UnixNano()}
}

// otlpSummary says what compareOTLP checked.
type otlpSummary struct {
	roots, calls, links, requests int
}

// compareOTLP checks that the OTLP receiver got exactly the reconciles of the JSON output: one
// trace per reconcile with one root span "reconcile <controller>" carrying the same object,
// result, reconcile ID, UID and times, and one child span per call, each the child of the root
// (depth 0) or of the call enclosing it (depth d-1); the root links to the previous reconcile of
// the same object; the resource names the traced process and the node.
func compareOTLP(t *testing.T, spans []exporter.JSONSpan, rx *testkit.OTLPReceiver, node string) otlpSummary {
	t.Helper()
	got, requests := rx.Received()
	sum := otlpSummary{requests: requests}
	traces := map[string][]recvSpan{}
	for _, s := range got {
		if s.Span.GetKind() == tracepb.Span_SPAN_KIND_PRODUCER {
			continue // a lifeline span (docs/lifelines.md): in its object's trace, not a reconcile's
		}
		id := hex.EncodeToString(s.Span.GetTraceId())
		traces[id] = append(traces[id], s)
	}
	roots := map[rootKey]recvSpan{}
	for id, tr := range traces {
		var rs []recvSpan
		for _, s := range tr {
			if len(s.Span.GetParentSpanId()) == 0 {
				rs = append(rs, s)
			}
		}
		if len(rs) != 1 {
			t.Errorf("OTLP trace %s has %d root spans, want 1", id, len(rs))
			continue
		}
		r := rs[0]
		a := attrMap(r.Span.GetAttributes())
		k := rootKey{attrInt(r.Resource, "process.pid"), attrStr(a, "reconscope.controller"), attrStr(a, "k8s.object.namespace"),
			attrStr(a, "k8s.object.name"), int64(r.Span.GetStartTimeUnixNano())}
		if _, dup := roots[k]; dup {
			t.Errorf("two OTLP root spans for %s", k)
		}
		roots[k] = r
	}

	matched := map[rootKey]bool{}
	byObject := map[string][]exporter.JSONSpan{}
	for _, j := range spans {
		k := jsonKey(j)
		r, ok := roots[k]
		if !ok {
			t.Errorf("no OTLP root span for the reconcile %s (%s, %d calls)", k, j.Result, len(j.Calls))
			continue
		}
		matched[k] = true
		sum.roots++
		obj := fmt.Sprintf("%d|%s|%s|%s", j.PID, j.Controller, j.Namespace, j.Name)
		byObject[obj] = append(byObject[obj], j)
		a := attrMap(r.Span.GetAttributes())
		var bad []string
		check := func(what string, got, want any) {
			if fmt.Sprint(got) != fmt.Sprint(want) {
				bad = append(bad, fmt.Sprintf("%s %v, JSON says %v", what, got, want))
			}
		}
		check("name", r.Span.GetName(), "reconcile "+j.Controller)
		check("result", attrStr(a, "reconscope.result"), j.Result)
		check("reconcile_id", attrStr(a, "reconscope.reconcile_id"), j.ReconcileID)
		check("uid", attrStr(a, "k8s.object.uid"), j.UID)
		check("requeue_after_ns", attrInt(a, "reconscope.requeue_after_ns"), j.RequeueAfterNS)
		check("duration", int64(r.Span.GetEndTimeUnixNano()-r.Span.GetStartTimeUnixNano()), j.DurationNS)
		check("call_count", attrInt(a, "reconscope.call_count"), len(j.Calls))
		wantType := j.ErrorType
		if wantType == "unknown" {
			wantType = "_OTHER" // the exporter's word for a type it could not name
		}
		check("error.type", attrStr(a, "error.type"), wantType)
		check("resource process.pid", attrInt(r.Resource, "process.pid"), j.PID)
		check("resource service.name", attrStr(r.Resource, "service.name"), filepath.Base(j.Exe))
		check("resource k8s.node.name", attrStr(r.Resource, "k8s.node.name"), node)
		check("kind", r.Span.GetKind(), tracepb.Span_SPAN_KIND_INTERNAL)
		if (j.Result == "error") != (r.Span.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR) {
			bad = append(bad, fmt.Sprintf("status %v for result %s", r.Span.GetStatus().GetCode(), j.Result))
		}
		bad = append(bad, compareCalls(j, r, traces[hex.EncodeToString(r.Span.GetTraceId())])...)
		sum.calls += len(j.Calls)
		if len(bad) > 0 {
			t.Errorf("OTLP reconcile %s: %v", k, bad)
		}
	}
	for k := range roots {
		if !matched[k] {
			t.Errorf("OTLP root span %s is not in the JSON output", k)
		}
	}

	// Each reconcile after the first of an object links to the one before it.
	for _, list := range byObject {
		sort.Slice(list, func(a, b int) bool { return list[a].Start.Before(list[b].Start) })
		for i := 1; i < len(list); i++ {
			prev, cur := roots[jsonKey(list[i-1])].Span, roots[jsonKey(list[i])].Span
			if prev == nil || cur == nil {
				continue
			}
			linked := false
			for _, l := range cur.GetLinks() {
				if bytes.Equal(l.GetTraceId(), prev.GetTraceId()) && bytes.Equal(l.GetSpanId(), prev.GetSpanId()) {
					linked = true
				}
			}
			if !linked {
				t.Errorf("OTLP reconcile %s does not link to the previous reconcile of its object (%s)", jsonKey(list[i]), jsonKey(list[i-1]))
				continue
			}
			sum.links++
		}
	}
	return sum
}

// compareCalls checks the child spans of one reconcile's trace against its JSON calls.
func compareCalls(j exporter.JSONSpan, root recvSpan, trace []recvSpan) []string {
	var bad []string
	byID := map[string]*tracepb.Span{}
	type callKey struct {
		name    string
		startNS int64
		status  int64
	}
	children := map[callKey]int{}
	for _, s := range trace {
		byID[hex.EncodeToString(s.Span.GetSpanId())] = s.Span
		if s.Span == root.Span {
			continue
		}
		a := attrMap(s.Span.GetAttributes())
		children[callKey{s.Span.GetName(), int64(s.Span.GetStartTimeUnixNano()), attrInt(a, "http.response.status_code")}]++
	}
	if n := len(trace) - 1; n != len(j.Calls) {
		bad = append(bad, fmt.Sprintf("%d call spans for %d JSON calls", n, len(j.Calls)))
	}
	for _, c := range j.Calls {
		k := callKey{callSpanName(c), c.Start.UnixNano(), int64(c.Status)}
		if children[k] == 0 {
			bad = append(bad, fmt.Sprintf("no call span %q at %d status %d", k.name, k.startNS, k.status))
			continue
		}
		children[k]--
	}
	rootID := hex.EncodeToString(root.Span.GetSpanId())
	for _, s := range trace {
		if s.Span == root.Span {
			continue
		}
		sp := s.Span
		a := attrMap(sp.GetAttributes())
		depth := attrInt(a, "reconscope.call.depth")
		parentID := hex.EncodeToString(sp.GetParentSpanId())
		parent, ok := byID[parentID]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("call span %q has parent %s, not in its trace", sp.GetName(), parentID))
		case depth == 0 && parentID != rootID:
			bad = append(bad, fmt.Sprintf("call span %q of depth 0 is not a child of the reconcile", sp.GetName()))
		case depth > 0:
			pd := attrInt(attrMap(parent.GetAttributes()), "reconscope.call.depth")
			if parentID == rootID || pd != depth-1 ||
				parent.GetStartTimeUnixNano() > sp.GetStartTimeUnixNano() || parent.GetEndTimeUnixNano() < sp.GetEndTimeUnixNano() {
				bad = append(bad, fmt.Sprintf("call span %q of depth %d has parent %q (depth %d) that does not enclose it", sp.GetName(), depth, parent.GetName(), pd))
			}
		}
		wantKind := tracepb.Span_SPAN_KIND_CLIENT
		if k := attrStr(a, "reconscope.call.kind"); k != "api" {
			wantKind = tracepb.Span_SPAN_KIND_INTERNAL
		}
		if sp.GetKind() != wantKind {
			bad = append(bad, fmt.Sprintf("call span %q kind %v", sp.GetName(), sp.GetKind()))
		}
	}
	return bad
}
