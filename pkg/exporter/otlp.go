package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"k8s.io/utils/lru"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
)

// ErrExporterClosed is returned by Write after Shutdown.
var ErrExporterClosed = errors.New("OTLP exporter is shut down")

// OTLPStats counts spans (reconcile root spans and call spans alike) through the exporter.
// After Shutdown, Exported + Dropped is every span Write was given.
type OTLPStats struct {
	// Exported spans were accepted by the collector.
	Exported uint64
	// Dropped spans were lost: queue full, export failed after retries, rejected by the
	// collector (OTLP partial success), written after Shutdown, or still queued when Shutdown
	// gave up.
	Dropped uint64
	// Queued spans are waiting for or in export now.
	Queued int
}

// OTLPExporter sends each reconcile as an OTLP trace: a root span "reconcile <controller>" with
// a child span per call. It implements Writer. Write never blocks on the network: spans go to a
// bounded queue that a BatchSpanProcessor drains; when the queue is full the reconcile is
// dropped and counted.
//
// The OpenTelemetry SDK gives each TracerProvider one resource, and a resource here is a traced
// process (service.name, process.pid, k8s.pod.name...). The exporter therefore keeps one
// TracerProvider per traced process (bounded, least recently used first out), all sharing ONE
// BatchSpanProcessor and ONE OTLP exporter: one queue bounds memory for all processes, one
// connection serves them, and the OTLP encoder groups each batch's spans by resource.
type OTLPExporter struct {
	clock    ktime.Clock
	nodeName string
	version  string // the instrumentation scope's
	envRes   *resource.Resource
	bsp      sdktrace.SpanProcessor
	acct     *spanAccounting

	life   sync.RWMutex // held for reading by Write, for writing by Shutdown
	closed bool

	mu        sync.Mutex
	providers *lru.Cache // processKey → trace.Tracer
	links     *lru.Cache // objectKey → trace.SpanContext of the object's last reconcile
	// versions are the object versions whose lifeline span was exported, so a write that
	// returns a version already seen (a no-op update or patch) does not export its ID twice.
	versions *lru.Cache // objectVersion → struct{}
	// lifelines is the tracer of lifeline spans: their resource is the service LifelineService
	// on this node, not the writing process (named in span attributes), since a lifeline
	// belongs to an object, not to a process.
	lifelines trace.Tracer
}

// LifelineService is the service.name of lifeline spans (docs/lifelines.md).
const LifelineService = "reconscope-lifelines"

type objectVersion struct{ uid, resourceVersion string }

type processKey struct {
	pid                 uint32
	exe, pod, container string
	workload            *span.Workload
}

type objectKey struct {
	service, controller, namespace, name string
}

// NewOTLP returns an exporter configured by opts and the OTEL_* environment. It does not
// connect: the connection is made, and remade, in the background.
func NewOTLP(ctx context.Context, opts OTLPOptions) (*OTLPExporter, error) {
	proto, err := resolveProtocol(opts.Protocol, opts.Endpoint)
	if err != nil {
		return nil, err
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override what the agent finds. A malformed
	// OTEL_RESOURCE_ATTRIBUTES still yields the attributes that could be read.
	envRes, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithFromEnv())
	if envRes == nil {
		return nil, fmt.Errorf("read OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	exp, err := newSpanExporter(ctx, proto, opts)
	if err != nil {
		return nil, err
	}

	queue := opts.MaxQueueSize
	if queue <= 0 {
		queue = envInt("OTEL_BSP_MAX_QUEUE_SIZE", DefaultOTLPMaxQueueSize)
	}
	batch := opts.MaxExportBatchSize
	if batch <= 0 {
		batch = envInt("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.DefaultMaxExportBatchSize)
	}
	batch = min(batch, queue)
	bspOpts := []sdktrace.BatchSpanProcessorOption{
		sdktrace.WithMaxQueueSize(queue),
		sdktrace.WithMaxExportBatchSize(batch),
	}
	if opts.BatchTimeout > 0 {
		bspOpts = append(bspOpts, sdktrace.WithBatchTimeout(opts.BatchTimeout))
	}
	if opts.ExportTimeout > 0 {
		bspOpts = append(bspOpts, sdktrace.WithExportTimeout(opts.ExportTimeout))
	}

	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	acct := &spanAccounting{max: queue}
	counting := &countingExporter{next: exp, acct: acct, logger: logger.With("stage", "otlp", "protocol", string(proto))}

	clock := opts.Clock
	if clock == (ktime.Clock{}) {
		clock = ktime.NewClock()
	}
	bsp := sdktrace.NewBatchSpanProcessor(counting, bspOpts...)
	lifeAttrs := []attribute.KeyValue{semconv.ServiceNameKey.String(LifelineService)}
	if opts.NodeName != "" {
		lifeAttrs = append(lifeAttrs, semconv.K8SNodeNameKey.String(opts.NodeName))
	}
	lifelines := sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, lifeAttrs...)),
		sdktrace.WithSpanProcessor(bsp),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(idGenerator{}),
	).Tracer(instrumentationScope, trace.WithInstrumentationVersion(opts.Version))
	return &OTLPExporter{
		lifelines: lifelines,
		clock:     clock,
		nodeName:  opts.NodeName,
		version:   opts.Version,
		envRes:    envRes,
		bsp:       bsp,
		acct:      acct,
		providers: lru.New(positive(opts.MaxResources, DefaultOTLPMaxResources)),
		links:     lru.New(positive(opts.MaxLinks, DefaultOTLPMaxLinks)),
		versions:  lru.New(positive(opts.MaxLinks, DefaultOTLPMaxLinks)),
	}, nil
}

// Write implements Writer: it turns one reconcile into spans and queues them. It never waits
// for the network. A reconcile that does not fit in the queue is dropped whole, counted in
// Stats().Dropped, and Write returns nil (a full queue is not the caller's error).
func (e *OTLPExporter) Write(s *span.Span) error {
	writes := versionWrites(s)
	e.mu.Lock()
	var made []int // the writes whose lifeline span this exporter makes
	for _, i := range writes {
		v := objectVersion{s.Calls[i].UID, s.Calls[i].ResourceVersion}
		if _, seen := e.versions.Get(v); !seen {
			e.versions.Add(v, struct{}{})
			made = append(made, i)
		}
	}
	e.mu.Unlock()
	n := 1 + len(s.Calls) + len(made)
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		e.acct.drop(n)
		return ErrExporterClosed
	}
	if !e.acct.reserve(n) {
		return nil
	}

	start := e.clock.Wall(s.Start)
	end := start.Add(s.Duration)
	service := serviceName(s)
	key := objectKey{service: service, controller: s.Controller, namespace: s.Namespace, name: s.Name}

	e.mu.Lock()
	tracer := e.tracerLocked(s, service)
	prev, linked := e.links.Get(key)
	e.mu.Unlock()

	startOpts := []trace.SpanStartOption{
		trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(rootAttributes(s)...),
	}
	if linked {
		startOpts = append(startOpts, trace.WithLinks(trace.Link{
			SpanContext: prev.(trace.SpanContext),
			Attributes:  []attribute.KeyValue{attrLinkType.String(linkPreviousReconcile)},
		}))
	}
	if s.UID != "" && s.ResourceVersion != "" {
		startOpts = append(startOpts, trace.WithLinks(versionLink(s.UID, s.ResourceVersion, linkReadVersion)))
	}
	if links := triggerLinks(s); len(links) > 0 {
		startOpts = append(startOpts, trace.WithLinks(links...))
	}
	for _, i := range writes {
		startOpts = append(startOpts, trace.WithLinks(versionLink(s.Calls[i].UID, s.Calls[i].ResourceVersion, linkWroteVersion)))
	}
	ctx, root := tracer.Start(context.Background(), "reconcile "+s.Controller, startOpts...)

	if len(s.Calls) > 0 {
		calls := e.writeCalls(ctx, tracer, root, s.Calls, writes)
		for _, i := range made {
			e.writeVersion(s, &s.Calls[i], calls[i])
		}
	}

	switch s.Result {
	case span.ResultError, span.ResultAbandoned:
		errType := s.ErrorType
		if errType == "" {
			errType = "_OTHER"
			if s.Result == span.ResultAbandoned {
				errType = string(span.ResultAbandoned)
			}
		}
		desc := s.Error
		if desc == "" {
			desc = s.ErrorType
		}
		if desc == "" && s.Result == span.ResultAbandoned {
			desc = "reconcile abandoned: its return was never seen (panic, process exit or lost events)"
		}
		root.SetAttributes(semconv.ErrorTypeKey.String(errType))
		root.SetStatus(codes.Error, desc)
	}
	for i := range s.Fights {
		f := &s.Fights[i]
		attrs := []attribute.KeyValue{
			attrObjectNamespace.String(f.Namespace), attrObjectName.String(f.Name), attrObjectUID.String(f.UID),
			attrCallResource.String(f.Resource), attrFightWriters.StringSlice(f.Writers),
			attrFightOpponents.StringSlice(f.Opponents(s.Controller)), attrFightAlts.Int(f.Alternations), attrFightStart.Bool(f.Start),
		}
		if f.Subresource != "" {
			attrs = append(attrs, attrCallSubres.String(f.Subresource))
		}
		root.AddEvent(fightEvent, trace.WithTimestamp(e.clock.Wall(f.At)), trace.WithAttributes(attrs...))
	}
	for i := range s.HotLoops {
		h := &s.HotLoops[i]
		attrs := []attribute.KeyValue{attrHotLoopKind.String(string(h.Kind)),
			attrObjectNamespace.String(h.Namespace), attrObjectName.String(h.Name), attrObjectUID.String(h.UID),
			attrHotLoopCount.Int(h.Count), attrHotLoopStart.Bool(h.Start)}
		if h.Resource != "" {
			attrs = append(attrs, attrCallResource.String(h.Resource))
		}
		if h.Subresource != "" {
			attrs = append(attrs, attrCallSubres.String(h.Subresource))
		}
		root.AddEvent(hotLoopEvent, trace.WithTimestamp(e.clock.Wall(h.At)), trace.WithAttributes(attrs...))
	}
	for i := range s.StaleReads {
		r := &s.StaleReads[i]
		attrs := []attribute.KeyValue{attrObjectNamespace.String(r.Namespace), attrObjectName.String(r.Name),
			attrObjectUID.String(r.UID), attrObjectRV.String(r.ResourceVersion), attrStaleNewerRV.String(r.NewerVersion),
			attrStaleNewerBy.String(r.NewerWriter), attrStaleAgeNS.Int64(int64(r.Age))}
		if r.Resource != "" {
			attrs = append(attrs, attrCallResource.String(r.Resource))
		}
		root.AddEvent(staleReadEvent, trace.WithTimestamp(e.clock.Wall(r.At)), trace.WithAttributes(attrs...))
	}
	root.End(trace.WithTimestamp(end))
	s.TraceID = root.SpanContext().TraceID().String()

	e.mu.Lock()
	e.links.Add(key, root.SpanContext())
	e.mu.Unlock()
	return nil
}

// tracerLocked returns the tracer of s's process, making its TracerProvider on first use.
func (e *OTLPExporter) tracerLocked(s *span.Span, service string) trace.Tracer {
	k := processKey{pid: s.PID, exe: s.Exe, pod: s.Pod, container: s.Container, workload: s.Workload}
	if t, ok := e.providers.Get(k); ok {
		return t.(trace.Tracer)
	}
	res, err := resource.Merge(resource.NewWithAttributes(semconv.SchemaURL, e.processAttributes(s, service)...), e.envRes)
	if err != nil && res == nil {
		res = resource.NewSchemaless(e.processAttributes(s, service)...)
	}
	// An evicted provider needs no shutdown: it owns no goroutine, the shared processor does.
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(e.bsp),
		// reconscope samples by what a reconcile did (NewSampler), after the fact; the SDK's
		// head sampler (OTEL_TRACES_SAMPLER) would drop errors at random, so it is not used.
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(idGenerator{}),
	)
	t := tp.Tracer(instrumentationScope, trace.WithInstrumentationVersion(e.version))
	e.providers.Add(k, t)
	return t
}

// Stats returns the span counts so far.
func (e *OTLPExporter) Stats() OTLPStats { return e.acct.stats() }

// Flush exports every queued span now and waits for it (or for ctx).
func (e *OTLPExporter) Flush(ctx context.Context) error {
	if err := e.bsp.ForceFlush(ctx); err != nil {
		return fmt.Errorf("flush OTLP spans: %w", err)
	}
	return nil
}

// Shutdown exports what is queued, waiting at most until ctx is done, and closes the
// connection. Spans still queued when it returns are counted as dropped. Later Writes return
// ErrExporterClosed.
func (e *OTLPExporter) Shutdown(ctx context.Context) error {
	e.life.Lock()
	if e.closed {
		e.life.Unlock()
		return nil
	}
	e.closed = true
	e.life.Unlock()
	err := e.bsp.Shutdown(ctx)
	e.acct.abandon()
	if err != nil {
		return fmt.Errorf("shut down OTLP exporter: %w", err)
	}
	return nil
}
