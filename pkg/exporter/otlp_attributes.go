package exporter

// The attributes and links of the exported spans: the resource's (the traced process, its pod),
// the reconcile span's, and each call span's, named as OpenTelemetry's semantic conventions
// name them where they exist (DESIGN §5).

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/reconscope/reconscope/pkg/span"
)

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
