package exporter

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/reconscope/reconscope/pkg/lifeline"
	"github.com/reconscope/reconscope/pkg/span"
)

// instrumentationScope names the code that makes the spans: reconscope, not the traced process.
const instrumentationScope = "github.com/reconscope/reconscope/pkg/exporter"

// Attribute keys of the reconscope namespace (DESIGN §5). Semantic-convention keys come from
// the semconv package.
const (
	attrController      = attribute.Key("reconscope.controller")
	attrObjectNamespace = attribute.Key("k8s.object.namespace")
	attrObjectName      = attribute.Key("k8s.object.name")
	attrObjectUID       = attribute.Key("k8s.object.uid")
	attrObjectRV        = attribute.Key("k8s.object.resource_version")
	attrCallPath        = attribute.Key("reconscope.call.path_template")
	attrReconcileID     = attribute.Key("reconscope.reconcile_id")
	attrResult          = attribute.Key("reconscope.result")
	attrRequeueAfterNS  = attribute.Key("reconscope.requeue_after_ns")
	attrNoop            = attribute.Key("reconscope.noop")
	attrIncomplete      = attribute.Key("reconscope.incomplete")
	attrHitsEmulated    = attribute.Key("reconscope.probe_hits.emulated")
	attrHitsStepped     = attribute.Key("reconscope.probe_hits.single_stepped")
	attrGoid            = attribute.Key("reconscope.goid")
	attrPhaseFetchNS    = attribute.Key("reconscope.phase.fetch_ns")
	attrPhaseDiffNS     = attribute.Key("reconscope.phase.diff_ns")
	attrPhaseApplyNS    = attribute.Key("reconscope.phase.apply_ns")
	// Deprecated: the old names of fetch, apply and diff, kept for one release.
	attrPhaseReadNS    = attribute.Key("reconscope.phase.read_ns")
	attrPhaseWriteNS   = attribute.Key("reconscope.phase.write_ns")
	attrPhaseComputeNS = attribute.Key("reconscope.phase.compute_ns")
	attrCallCount      = attribute.Key("reconscope.call_count")
	attrQueueWaitNS    = attribute.Key("reconscope.queue_wait_ns")
	attrBackoffNS      = attribute.Key("reconscope.backoff_ns")
	attrFightWriters   = attribute.Key("reconscope.fight.writers")
	attrFightOpponents = attribute.Key("reconscope.fight.opponents")
	attrFightAlts      = attribute.Key("reconscope.fight.alternations")
	attrFightStart     = attribute.Key("reconscope.fight.start")
	attrHotLoopKind    = attribute.Key("reconscope.hot_loop.kind")
	attrHotLoopCount   = attribute.Key("reconscope.hot_loop.count")
	attrHotLoopStart   = attribute.Key("reconscope.hot_loop.start")
	attrStaleNewerRV   = attribute.Key("reconscope.stale_read.newer_resource_version")
	attrStaleNewerBy   = attribute.Key("reconscope.stale_read.newer_writer")
	attrStaleAgeNS     = attribute.Key("reconscope.stale_read.age_ns")
	attrCallOutcome    = attribute.Key("reconscope.call.outcome")
	attrTriggerCtl     = attribute.Key("reconscope.trigger.controller")
	attrTriggerLagNS   = attribute.Key("reconscope.trigger.lag_ns")
	attrTriggers       = attribute.Key("reconscope.triggers")
	attrTriggerKind    = attribute.Key("reconscope.trigger.kind")
	attrTriggerEvent   = attribute.Key("reconscope.trigger.event")
	attrTriggerWriter  = attribute.Key("reconscope.trigger.writer")
	attrObjectKind     = attribute.Key("k8s.object.kind")
	attrReadVerWriter  = attribute.Key("reconscope.read_version.writer")
	attrConflictWriter = attribute.Key("reconscope.conflict.writer")
	attrCallKind       = attribute.Key("reconscope.call.kind")
	attrCallVerb       = attribute.Key("reconscope.call.verb")
	attrCallResource   = attribute.Key("reconscope.call.resource")
	attrCallSubres     = attribute.Key("reconscope.call.subresource")
	attrCallDepth      = attribute.Key("reconscope.call.depth")
	attrLinkType       = attribute.Key("reconscope.link.type")
)

// reconscope.link.type values.
const (
	// linkPreviousReconcile: from a reconcile to the previous reconcile of its object.
	linkPreviousReconcile = "previous_reconcile"
	// linkReadVersion: from a reconcile to the lifeline span of the version of its object it
	// read (its trigger).
	linkReadVersion = "read_version"
	// linkWroteVersion: from a reconcile and from a write call to the lifeline span of the
	// version the write made.
	linkWroteVersion = "wrote_version"
	// linkTrigger: from a reconcile to the lifeline span of the version a watch event among
	// its triggers delivered (span.Trigger).
	linkTrigger = "trigger"
	// linkWriter: from a lifeline span to the call span that made its version.
	linkWriter = "writer"
)

// attrLifelineWriterController names, on a lifeline span, the controller that wrote the version.
const (
	attrLifelineWriterController = attribute.Key("reconscope.lifeline.writer")
	attrLifelineWriterService    = attribute.Key("reconscope.lifeline.writer_service")
)

// fightEvent names the span event of a reconcile whose write took part in a controller fight;
// hotLoopEvent, of one that took part in a hot loop; staleReadEvent, of a stale read.
const (
	fightEvent     = "reconscope.controller_fight"
	hotLoopEvent   = "reconscope.hot_loop"
	staleReadEvent = "reconscope.stale_read"
)

// versionWrites returns the indexes of the calls that made a new version of an object: API
// writes whose response gave the object's UID and resourceVersion. A write of the reconciled
// object that returned the very version the reconcile read changed nothing (a no-op update or
// patch) and made no version.
func versionWrites(s *span.Span) []int {
	var w []int
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Kind != span.CallAPI || !c.IsWrite() || c.UID == "" || c.ResourceVersion == "" || c.Status >= 300 {
			continue
		}
		if c.UID == s.UID && c.ResourceVersion == s.ResourceVersion {
			continue
		}
		w = append(w, i)
	}
	return w
}

func versionLink(uid, resourceVersion, typ string) trace.Link {
	return trace.Link{
		SpanContext: lifeline.Version(uid, resourceVersion),
		Attributes: []attribute.KeyValue{attrLinkType.String(typ), attrObjectUID.String(uid),
			attrObjectRV.String(resourceVersion)},
	}
}

// writeVersion makes the lifeline span of the version call c made: in the object's lifeline
// trace, with the IDs derived from (UID, resourceVersion), linked to the call's span.
func (e *OTLPExporter) writeVersion(s *span.Span, c *span.Call, call trace.Span) {
	v := lifeline.Version(c.UID, c.ResourceVersion)
	ctx := context.WithValue(context.Background(), derivedIDsKey{}, v)
	attrs := []attribute.KeyValue{
		attrLifelineWriterController.String(s.Controller),
		attrLifelineWriterService.String(serviceName(s)),
		semconv.ProcessPIDKey.Int(int(s.PID)),
		attrController.String(s.Controller),
		attrCallVerb.String(c.Verb),
		attrCallResource.String(c.Resource),
		attrObjectName.String(c.Name),
		attrObjectUID.String(c.UID),
		attrObjectRV.String(c.ResourceVersion),
	}
	attrs = nonEmpty(attrs, attrCallSubres, c.Subresource)
	attrs = nonEmpty(attrs, attrObjectNamespace, c.Namespace)
	attrs = nonEmpty(attrs, attrReconcileID, s.ReconcileID)
	// The writer's pod and node, as span attributes (the resource is the lifelines service).
	attrs = podAttributes(attrs, s.Pod)
	if node := nodeName(s, e.nodeName); node != "" {
		attrs = append(attrs, semconv.K8SNodeNameKey.String(node))
	}
	start := e.clock.Wall(c.Start)
	_, sp := e.lifelines.Start(ctx, callSpanName(c),
		trace.WithNewRoot(),
		trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrs...),
		trace.WithLinks(trace.Link{SpanContext: call.SpanContext(), Attributes: []attribute.KeyValue{attrLinkType.String(linkWriter)}}))
	sp.End(trace.WithTimestamp(start.Add(c.Duration)))
}

// derivedIDsKey marks a context whose next root span takes the IDs of the span context it
// holds (a lifeline version), instead of random ones.
type derivedIDsKey struct{}

// idGenerator gives random IDs, except to a root span started with derivedIDsKey.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if v, ok := ctx.Value(derivedIDsKey{}).(trace.SpanContext); ok {
		return v.TraceID(), v.SpanID()
	}
	var t trace.TraceID
	binary.NativeEndian.PutUint64(t[:8], rand.Uint64())
	binary.NativeEndian.PutUint64(t[8:], rand.Uint64())
	return t, randomSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		binary.NativeEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}

// writeCalls makes a span per call, nested as the calls were: a call of depth d is the child of
// the enclosing call of depth d-1 on the same goroutine, a call of depth 0 the child of the
// reconcile (also when a goroutine the reconcile started made it).
func (e *OTLPExporter) writeCalls(ctx context.Context, tracer trace.Tracer, root trace.Span, calls []span.Call, writes []int) []trace.Span {
	wrote := map[int]bool{}
	for _, i := range writes {
		wrote[i] = true
	}
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	// The assembler appends a call when it returns, so an inner call comes before the call
	// that made it: sort by start time, outer call first on a tie.
	sort.SliceStable(order, func(a, b int) bool {
		ca, cb := &calls[order[a]], &calls[order[b]]
		if ca.Start != cb.Start {
			return ca.Start < cb.Start
		}
		return ca.Depth < cb.Depth
	})
	spans := make([]trace.Span, len(calls))
	stacks := map[int64][]int{} // per goroutine: the calls that may enclose the next one
	for _, i := range order {
		c := &calls[i]
		stack := stacks[c.Goroutine]
		for len(stack) > 0 && calls[stack[len(stack)-1]].Depth >= c.Depth {
			stack = stack[:len(stack)-1]
		}
		parent := trace.ContextWithSpan(ctx, root)
		if len(stack) > 0 && calls[stack[len(stack)-1]].Depth == c.Depth-1 {
			parent = trace.ContextWithSpan(ctx, spans[stack[len(stack)-1]])
		}
		kind := trace.SpanKindClient
		if c.Kind != span.CallAPI && c.Kind != "" {
			kind = trace.SpanKindInternal // served from the informer cache, in process
		}
		opts := []trace.SpanStartOption{
			trace.WithTimestamp(e.clock.Wall(c.Start)),
			trace.WithSpanKind(kind),
			trace.WithAttributes(callAttributes(c)...),
		}
		if wrote[i] {
			opts = append(opts, trace.WithLinks(versionLink(c.UID, c.ResourceVersion, linkWroteVersion)))
		}
		_, spans[i] = tracer.Start(parent, callSpanName(c), opts...)
		stacks[c.Goroutine] = append(stack, i)
	}
	// End inner calls first, so each span ends before its parent.
	for j := len(order) - 1; j >= 0; j-- {
		i := order[j]
		c := &calls[i]
		if c.Kind == span.CallAPI && c.Status >= 400 {
			spans[i].SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(c.Status)))
			spans[i].SetStatus(codes.Error, fmt.Sprintf("HTTP %d", c.Status))
		}
		spans[i].End(trace.WithTimestamp(e.clock.Wall(c.Start).Add(c.Duration)))
	}
	return spans
}
