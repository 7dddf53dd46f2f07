package exporter

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

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

// processAttributes are the resource attributes of the traced process.
func (e *OTLPExporter) processAttributes(s *span.Span, service string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.ServiceNameKey.String(service),
		semconv.ProcessPIDKey.Int(int(s.PID)),
	}
	if s.Exe != "" {
		attrs = append(attrs,
			semconv.ProcessExecutablePathKey.String(s.Exe),
			semconv.ProcessExecutableNameKey.String(filepath.Base(s.Exe)))
	}
	attrs = podAttributes(attrs, s.Pod)
	attrs = nonEmpty(attrs, semconv.K8SContainerNameKey, s.Container)
	if w := s.Workload; w != nil {
		attrs = nonEmpty(attrs, semconv.K8SPodUIDKey, w.PodUID)
		attrs = nonEmpty(attrs, semconv.ServiceNamespaceKey, w.ServiceNamespace)
		attrs = nonEmpty(attrs, semconv.ServiceInstanceIDKey, w.ServiceInstanceID)
		attrs = nonEmpty(attrs, semconv.ServiceVersionKey, w.ServiceVersion)
		attrs = nonEmpty(attrs, semconv.ContainerIDKey, w.ContainerID)
		switch w.Kind {
		case "Deployment":
			attrs = nonEmpty(attrs, semconv.K8SDeploymentNameKey, w.Name)
		case "StatefulSet":
			attrs = nonEmpty(attrs, semconv.K8SStatefulSetNameKey, w.Name)
		case "DaemonSet":
			attrs = nonEmpty(attrs, semconv.K8SDaemonSetNameKey, w.Name)
		case "Job":
			attrs = nonEmpty(attrs, semconv.K8SJobNameKey, w.Name)
		}
		attrs = nonEmpty(attrs, semconv.K8SReplicaSetNameKey, w.ReplicaSet)
		keys := make([]string, 0, len(w.Attributes))
		for k := range w.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			attrs = append(attrs, attribute.String(k, w.Attributes[k]))
		}
	}
	if node := nodeName(s, e.nodeName); node != "" {
		attrs = append(attrs, semconv.K8SNodeNameKey.String(node))
	}
	return attrs
}

// podAttributes appends the namespace and name of pod ("namespace/name", or a bare name) to
// attrs.
func podAttributes(attrs []attribute.KeyValue, pod string) []attribute.KeyValue {
	if pod == "" {
		return attrs
	}
	ns, name, ok := strings.Cut(pod, "/")
	if !ok {
		ns, name = "", pod
	}
	attrs = nonEmpty(attrs, semconv.K8SNamespaceNameKey, ns)
	return append(attrs, semconv.K8SPodNameKey.String(name))
}

// nodeName is the node s's process runs on: its pod's, else the agent's own (def).
func nodeName(s *span.Span, def string) string {
	if s.Workload != nil && s.Workload.Node != "" {
		return s.Workload.Node
	}
	return def
}

// serviceName is the pod's service name when known (OpenTelemetry's Kubernetes order:
// annotation, app.kubernetes.io/instance, app.kubernetes.io/name, owner workload, container),
// else the container's name, else the executable's base name.
func serviceName(s *span.Span) string {
	switch {
	case s.Workload != nil && s.Workload.ServiceName != "":
		return s.Workload.ServiceName
	case s.Container != "":
		return s.Container
	case s.Exe != "":
		return filepath.Base(s.Exe)
	}
	return "unknown_service"
}

func rootAttributes(s *span.Span) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 20)
	attrs = append(attrs,
		attrController.String(s.Controller),
		attrObjectName.String(s.Name),
		attrResult.String(string(s.Result)),
		attrNoop.Bool(s.Noop),
		attrIncomplete.Bool(s.Incomplete),
		attrGoid.Int64(s.Goid),
		attrPhaseFetchNS.Int64(int64(s.Phases.Fetch)),
		attrPhaseDiffNS.Int64(int64(s.Phases.Diff)),
		attrPhaseApplyNS.Int64(int64(s.Phases.Apply)),
		attrPhaseReadNS.Int64(int64(s.Phases.Fetch)),
		attrPhaseWriteNS.Int64(int64(s.Phases.Apply)),
		attrPhaseComputeNS.Int64(int64(s.Phases.Diff)),
		attrCallCount.Int(len(s.Calls)),
		attrHitsEmulated.Int(int(s.ProbeHits.Emulated)),
		attrHitsStepped.Int(int(s.ProbeHits.SingleStepped)),
	)
	attrs = nonEmpty(attrs, attrObjectNamespace, s.Namespace)
	attrs = nonEmpty(attrs, attrObjectUID, s.UID)
	attrs = nonEmpty(attrs, attrObjectRV, s.ResourceVersion)
	attrs = nonEmpty(attrs, attrReconcileID, s.ReconcileID)
	if s.RequeueAfter != 0 {
		attrs = append(attrs, attrRequeueAfterNS.Int64(int64(s.RequeueAfter)))
	}
	if s.QueueWait != 0 {
		attrs = append(attrs, attrQueueWaitNS.Int64(int64(s.QueueWait)))
	}
	if s.Backoff != 0 {
		attrs = append(attrs, attrBackoffNS.Int64(int64(s.Backoff)))
	}
	attrs = nonEmpty(attrs, attrTriggerCtl, s.TriggerController)
	if s.TriggerLagKnown {
		attrs = append(attrs, attrTriggerLagNS.Int64(int64(s.TriggerLag)))
	}
	attrs = nonEmpty(attrs, attrReadVerWriter, s.ReadVersionWriter)
	attrs = nonEmpty(attrs, attrTriggers, triggerSummary(s))
	return attrs
}

// triggerLinks links a reconcile to the lifeline span of each watch event's version among its
// triggers (one link per version), with the trigger's attributes: a backend that shows link
// attributes names the event even where no agent exported that lifeline span (an untraced
// writer).
func triggerLinks(s *span.Span) []trace.Link {
	var links []trace.Link
	seen := map[string]bool{}
	for i := range s.Triggers {
		t := &s.Triggers[i]
		if t.Object.UID == "" || t.Object.ResourceVersion == "" || seen[t.Object.UID+"/"+t.Object.ResourceVersion] {
			continue
		}
		seen[t.Object.UID+"/"+t.Object.ResourceVersion] = true
		l := versionLink(t.Object.UID, t.Object.ResourceVersion, linkTrigger)
		l.Attributes = append(l.Attributes, attrTriggerKind.String(string(t.Kind)), attrTriggerEvent.String(t.Event),
			attrTriggerWriter.String(t.Writer), attrObjectKind.String(t.Object.Kind),
			attrObjectNamespace.String(t.Object.Namespace), attrObjectName.String(t.Object.Name))
		links = append(links, l)
	}
	return links
}

// triggerSummary is the triggers in one line, for backends that do not show links: each as
// its kind, and for a watch event what happened to which object version and its writer
// ("mapped add Pod ns/web-1@812 by replicaset, retry"), then how many more were dropped.
func triggerSummary(s *span.Span) string {
	var b strings.Builder
	for i := range s.Triggers {
		t := &s.Triggers[i]
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(t.Kind))
		if t.Function != "" {
			b.WriteString(" from " + t.Function)
		}
		if t.Event == "" {
			continue
		}
		if t.Event != string(t.Kind) {
			b.WriteString(" " + t.Event)
		}
		b.WriteString(" " + t.Object.Kind + " ")
		if t.Object.Namespace != "" {
			b.WriteString(t.Object.Namespace + "/")
		}
		b.WriteString(t.Object.Name)
		if t.Object.ResourceVersion != "" {
			b.WriteString("@" + t.Object.ResourceVersion)
		}
		b.WriteString(" by " + t.Writer)
	}
	if s.TriggersDropped > 0 {
		fmt.Fprintf(&b, " (+%d more)", s.TriggersDropped)
	}
	return b.String()
}

// callSpanName is "<verb> <resource>[/<subresource>]", e.g. "GET configmaps".
func callSpanName(c *span.Call) string {
	verb := c.Verb
	if verb == "" {
		switch c.Kind {
		case span.CallCacheGet:
			verb = "GET"
		case span.CallCacheList:
			verb = "LIST"
		default:
			verb = "CALL"
		}
	}
	res := c.Resource
	if res == "" {
		return verb
	}
	if c.Subresource != "" {
		res += "/" + c.Subresource
	}
	return verb + " " + res
}

// httpMethods are the methods semantic conventions allow in http.request.method.
var httpMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true,
	"OPTIONS": true, "CONNECT": true, "TRACE": true,
}

func callAttributes(c *span.Call) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, attrCallKind.String(string(c.Kind)), attrCallDepth.Int(c.Depth))
	if c.Goroutine != 0 {
		attrs = append(attrs, attrGoid.Int64(c.Goroutine))
	}
	attrs = nonEmpty(attrs, attrCallVerb, c.Verb)
	if c.Kind == span.CallAPI {
		if httpMethods[c.Verb] {
			attrs = append(attrs, semconv.HTTPRequestMethodKey.String(c.Verb))
		} else {
			attrs = append(attrs, semconv.HTTPRequestMethodKey.String("_OTHER"),
				attribute.String("http.request.method_original", c.Verb))
		}
		if c.Status != 0 {
			attrs = append(attrs, semconv.HTTPResponseStatusCodeKey.Int(c.Status))
		}
	}
	attrs = nonEmpty(attrs, attrCallOutcome, c.Outcome)
	attrs = nonEmpty(attrs, attrCallResource, c.Resource)
	attrs = nonEmpty(attrs, attrCallSubres, c.Subresource)
	attrs = nonEmpty(attrs, attrObjectNamespace, c.Namespace)
	if c.Kind == span.CallAPI && c.Resource != "" {
		attrs = append(attrs, attrCallPath.String(pathTemplate(c)))
	}
	attrs = nonEmpty(attrs, attrObjectName, c.Name)
	attrs = nonEmpty(attrs, attrObjectUID, c.UID)
	attrs = nonEmpty(attrs, attrObjectRV, c.ResourceVersion)
	attrs = nonEmpty(attrs, attrConflictWriter, c.ConflictWriter)
	return attrs
}

// pathTemplate is the API path of a call relative to its group and version, with namespace and
// name as placeholders ("namespaces/{namespace}/configmaps/{name}/status"): the probes do not
// read the group/version prefix, so this is not a full url.template.
func pathTemplate(c *span.Call) string {
	var b strings.Builder
	if c.Namespace != "" {
		b.WriteString("namespaces/{namespace}/")
	}
	b.WriteString(c.Resource)
	if c.Name != "" {
		b.WriteString("/{name}")
	}
	if c.Subresource != "" {
		b.WriteString("/" + c.Subresource)
	}
	return b.String()
}

// nonEmpty appends k=v to attrs when v is set.
func nonEmpty(attrs []attribute.KeyValue, k attribute.Key, v string) []attribute.KeyValue {
	if v == "" {
		return attrs
	}
	return append(attrs, k.String(v))
}
