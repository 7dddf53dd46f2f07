// Package lifeline derives the OpenTelemetry IDs of object lifelines: one trace per
// Kubernetes object, whose trace ID comes from the object's UID, and one span per version of
// the object, whose span ID comes from (UID, resourceVersion). Because the IDs are derived
// and not exchanged, agents that never talk to each other (one tracing kube-controller-manager
// on a control-plane node, one tracing an operator on a worker node) name the same version
// with the same IDs, and their spans join in any OTLP backend.
//
// The derivation is a contract (docs/lifelines.md):
//
//	trace ID = SHA-256("reconscope.lifeline.v1\x00" + uid)[0:16]
//	span ID  = SHA-256("reconscope.version.v1\x00" + uid + "\x00" + resourceVersion)[0:8]
//
// An all-zero result (invalid in OpenTelemetry; never seen, 2⁻⁶⁴) has its last byte set to 1.
package lifeline

import (
	"crypto/sha256"

	"go.opentelemetry.io/otel/trace"
)

const (
	tracePrefix   = "reconscope.lifeline.v1\x00"
	versionPrefix = "reconscope.version.v1\x00"
)

// TraceID is the trace ID of the lifeline of the object with this UID.
func TraceID(uid string) trace.TraceID {
	sum := sha256.Sum256([]byte(tracePrefix + uid))
	var id trace.TraceID
	copy(id[:], sum[:16])
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

// SpanID is the span ID of the version resourceVersion of the object with this UID: the
// span of the write that made that version.
func SpanID(uid, resourceVersion string) trace.SpanID {
	sum := sha256.Sum256([]byte(versionPrefix + uid + "\x00" + resourceVersion))
	var id trace.SpanID
	copy(id[:], sum[:8])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// Version is the span context of one version of an object, as a link target: sampled and
// remote (whoever made the version may have exported its span from elsewhere, or not at all).
func Version(uid, resourceVersion string) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    TraceID(uid),
		SpanID:     SpanID(uid, resourceVersion),
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
}
