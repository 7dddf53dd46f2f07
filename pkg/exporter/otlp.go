package exporter

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/lifeline"
	"github.com/reconscope/reconscope/pkg/span"
)

// Protocol is an OTLP transport, spelled as in OTEL_EXPORTER_OTLP_PROTOCOL.
type Protocol string

// The OTLP transports the exporter speaks.
const (
	ProtocolGRPC         Protocol = "grpc"
	ProtocolHTTPProtobuf Protocol = "http/protobuf"
	ProtocolHTTPJSON     Protocol = "http/json"
)

// Defaults of OTLPOptions.
const (
	DefaultOTLPMaxQueueSize      = 2048
	DefaultOTLPMaxLinks          = 10000
	DefaultOTLPMaxResources      = 256
	DefaultOTLPReconnectMaxDelay = 15 * time.Second
)

// ErrExporterClosed is returned by Write after Shutdown.
var ErrExporterClosed = errors.New("OTLP exporter is shut down")

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
	attrCallOutcome    = attribute.Key("reconscope.call.outcome")
	attrTriggerCtl     = attribute.Key("reconscope.trigger.controller")
	attrTriggerLagNS   = attribute.Key("reconscope.trigger.lag_ns")
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
	// linkWriter: from a lifeline span to the call span that made its version.
	linkWriter = "writer"
)

// attrLifelineWriterController names, on a lifeline span, the controller that wrote the version.
const (
	attrLifelineWriterController = attribute.Key("reconscope.lifeline.writer")
	attrLifelineWriterService    = attribute.Key("reconscope.lifeline.writer_service")
)

// RetryOptions tunes the OTLP exporter's retries of a failed batch (exponential backoff).
type RetryOptions struct {
	// Disabled turns retries off: a failed batch is dropped at once.
	Disabled bool
	// InitialInterval is the wait after the first failure (SDK default 5s).
	InitialInterval time.Duration
	// MaxInterval caps the wait between two tries (SDK default 30s).
	MaxInterval time.Duration
	// MaxElapsedTime is how long one batch is retried before it is dropped (SDK default 1m;
	// the export timeout bounds it too).
	MaxElapsedTime time.Duration
}

// OTLPOptions configures NewOTLP. The zero value exports as the standard OTEL_* environment
// variables say; each non-zero field overrides them.
type OTLPOptions struct {
	// Endpoint is the collector, as "host:port" or as a base URL ("http://collector:4318",
	// "https://collector:4317"), with the meaning of OTEL_EXPORTER_OTLP_ENDPOINT: over HTTP,
	// "/v1/traces" is appended to the URL's path. An "http" scheme means no TLS. Empty: from
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT, then the SDK's
	// default (localhost:4317 for gRPC, localhost:4318 for HTTP).
	Endpoint string
	// Protocol is grpc, http/protobuf or http/json. Empty: from
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then OTEL_EXPORTER_OTLP_PROTOCOL; when neither is
	// set, grpc if the endpoint's port is 4317 (OTLP/gRPC's registered port, as OBI/Beyla
	// decide), else http/protobuf (the OpenTelemetry specification's default).
	Protocol Protocol
	// Insecure turns TLS off (plaintext gRPC, http:// URLs). False leaves the decision to the
	// endpoint's scheme and OTEL_EXPORTER_OTLP_INSECURE.
	Insecure bool
	// Headers are sent with every export (authentication, tenant). When set they replace
	// OTEL_EXPORTER_OTLP_HEADERS.
	Headers map[string]string
	// NodeName is the Kubernetes node the agent runs on: resource attribute k8s.node.name.
	NodeName string
	// Clock turns the spans' kernel monotonic times into wall-clock times. The zero Clock is
	// replaced by ktime.NewClock().
	Clock ktime.Clock
	// MaxQueueSize bounds the spans (root and call spans) waiting for or in export; a reconcile
	// that does not fit is dropped whole and counted. Zero: OTEL_BSP_MAX_QUEUE_SIZE, else 2048.
	MaxQueueSize int
	// MaxExportBatchSize is the most spans sent in one request. Zero: OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
	// else 512 (never above MaxQueueSize).
	MaxExportBatchSize int
	// BatchTimeout is the longest a span waits for its batch to fill. Zero:
	// OTEL_BSP_SCHEDULE_DELAY, else 5s.
	BatchTimeout time.Duration
	// ExportTimeout bounds one export, retries included. Zero: OTEL_BSP_EXPORT_TIMEOUT and
	// OTEL_EXPORTER_OTLP_TIMEOUT, else the SDK's defaults (30s and 10s).
	ExportTimeout time.Duration
	// Retry tunes retries of failed exports. Nil: the SDK's defaults.
	Retry *RetryOptions
	// ReconnectMaxDelay caps the gRPC client's backoff between reconnection attempts while the
	// collector is unreachable (gRPC's own default is 120s). Zero: 15s.
	ReconnectMaxDelay time.Duration
	// MaxLinks bounds the map from object to its last reconcile span (for span links),
	// least recently used first out. Zero: 10000.
	MaxLinks int
	// MaxResources bounds the distinct traced processes (resources) kept at once. Zero: 256.
	MaxResources int
	// Logger reports export failures and recoveries (once per change, not per batch).
	// Nil: slog.Default().
	Logger *slog.Logger
	// Exporters are where spans go, as OTEL_TRACES_EXPORTER names them: ExporterOTLP,
	// ExporterConsole, or both. Nil: OTLP only. [TracesExportersFromEnv] reads the variable.
	Exporters []string
	// Console receives the spans of ExporterConsole, one JSON object each (the SDK's
	// stdouttrace format). Nil: os.Stdout.
	Console io.Writer
}

// Names of span exporters in OTEL_TRACES_EXPORTER.
const (
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
	ExporterNone    = "none"
)

// TracesExportersFromEnv reads OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER as the OpenTelemetry
// specification defines them: it returns nil (no span export) when OTEL_SDK_DISABLED is true
// or OTEL_TRACES_EXPORTER is "none", else the exporters named in OTEL_TRACES_EXPORTER
// (comma-separated "otlp" and "console"). explicit is false when OTEL_TRACES_EXPORTER is unset:
// then the caller decides (reconscope exports OTLP only when an endpoint is configured).
func TracesExportersFromEnv() (names []string, explicit bool, err error) {
	if v := strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")); v != "" {
		disabled, err := strconv.ParseBool(v)
		if err != nil {
			return nil, false, fmt.Errorf("OTEL_SDK_DISABLED=%q: want true or false", v)
		}
		if disabled {
			return nil, true, nil
		}
	}
	v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if v == "" {
		return []string{ExporterOTLP}, false, nil
	}
	seen := map[string]bool{}
	for _, n := range strings.Split(v, ",") {
		switch n = strings.ToLower(strings.TrimSpace(n)); n {
		case ExporterNone:
			return nil, true, nil
		case ExporterOTLP, ExporterConsole:
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		case "":
		default:
			return nil, true, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: unknown exporter %q: use otlp, console or none", v, n)
		}
	}
	return names, true, nil
}

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
	envRes   *resource.Resource
	bsp      sdktrace.SpanProcessor
	acct     *spanAccounting

	life   sync.RWMutex // held for reading by Write, for writing by Shutdown
	closed bool

	mu        sync.Mutex
	providers *lru[processKey, trace.Tracer]
	links     *lru[objectKey, trace.SpanContext]
	// versions are the object versions whose lifeline span was exported, so a write that
	// returns a version already seen (a no-op update or patch) does not export its ID twice.
	versions *lru[objectVersion, struct{}]
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
	).Tracer(instrumentationScope)
	return &OTLPExporter{
		lifelines: lifelines,
		clock:     clock,
		nodeName:  opts.NodeName,
		envRes:    envRes,
		bsp:       bsp,
		acct:      acct,
		providers: newLRU[processKey, trace.Tracer](positive(opts.MaxResources, DefaultOTLPMaxResources)),
		links:     newLRU[objectKey, trace.SpanContext](positive(opts.MaxLinks, DefaultOTLPMaxLinks)),
		versions:  newLRU[objectVersion, struct{}](positive(opts.MaxLinks, DefaultOTLPMaxLinks)),
	}, nil
}

// resolveProtocol picks the transport: the option, else the environment, else by the
// endpoint's port: 4317 (OTLP/gRPC's port) means grpc, anything else http/protobuf.
func resolveProtocol(p Protocol, endpoint string) (Protocol, error) {
	if p == "" {
		p = Protocol(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	}
	if p == "" {
		p = Protocol(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch p = Protocol(strings.TrimSpace(string(p))); p {
	case "":
		return DefaultProtocol(endpoint), nil
	case ProtocolGRPC, ProtocolHTTPProtobuf, ProtocolHTTPJSON:
		return p, nil
	}
	return "", fmt.Errorf("unknown OTLP protocol %q: use grpc, http/protobuf or http/json", p)
}

// DefaultProtocol is the protocol used when none is configured: grpc when the endpoint (the
// option, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT) names port
// 4317, else http/protobuf.
func DefaultProtocol(endpoint string) Protocol {
	if endpoint == "" {
		endpoint = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	}
	if endpoint == "" {
		endpoint = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	if endpointPort(endpoint) == "4317" {
		return ProtocolGRPC
	}
	return ProtocolHTTPProtobuf
}

// endpointPort is the port of an endpoint written as a URL or as host:port; "" when none.
func endpointPort(endpoint string) string {
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return ""
		}
		return u.Port()
	}
	if _, port, err := net.SplitHostPort(endpoint); err == nil {
		return port
	}
	return ""
}

// newSpanExporter builds the SDK exporter for opts.Exporters: OTLP, the console, or both.
func newSpanExporter(ctx context.Context, proto Protocol, opts OTLPOptions) (sdktrace.SpanExporter, error) {
	names := opts.Exporters
	if names == nil {
		names = []string{ExporterOTLP}
	}
	var all fanout
	for _, n := range names {
		switch n {
		case ExporterOTLP:
			client, err := newOTLPClient(proto, opts)
			if err != nil {
				return nil, err
			}
			exp, err := otlptrace.New(ctx, client)
			if err != nil {
				return nil, fmt.Errorf("start OTLP %s exporter: %w", proto, err)
			}
			all = append(all, exp)
		case ExporterConsole:
			w := opts.Console
			if w == nil {
				w = os.Stdout
			}
			exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
			if err != nil {
				return nil, fmt.Errorf("start console span exporter: %w", err)
			}
			all = append(all, exp)
		default:
			return nil, fmt.Errorf("unknown span exporter %q: use otlp or console", n)
		}
	}
	switch len(all) {
	case 0:
		return nil, errors.New("no span exporter: name otlp or console")
	case 1:
		return all[0], nil
	}
	return all, nil
}

// fanout sends each batch to every exporter; the batch failed if any of them failed.
type fanout []sdktrace.SpanExporter

func (f fanout) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	var errs []error
	for _, e := range f {
		if err := e.ExportSpans(ctx, spans); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f fanout) Shutdown(ctx context.Context) error {
	var errs []error
	for _, e := range f {
		errs = append(errs, e.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// newOTLPClient builds the transport. The SDK reads the OTEL_EXPORTER_OTLP_* variables
// (endpoint, headers, insecure, certificates, compression, timeout) itself; options given here
// come after and win.
func newOTLPClient(proto Protocol, opts OTLPOptions) (otlptrace.Client, error) {
	var u *url.URL
	if opts.Endpoint != "" && strings.Contains(opts.Endpoint, "://") {
		var err error
		if u, err = url.Parse(opts.Endpoint); err != nil || u.Host == "" {
			return nil, fmt.Errorf("parse OTLP endpoint %q: want host:port or a URL like http://collector:4318", opts.Endpoint)
		}
	}
	if proto == ProtocolGRPC {
		reconnect := positive(opts.ReconnectMaxDelay, DefaultOTLPReconnectMaxDelay)
		o := []otlptracegrpc.Option{
			otlptracegrpc.WithDialOption(grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay:  min(time.Second, reconnect),
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   reconnect,
				},
				MinConnectTimeout: 20 * time.Second,
			})),
			// No service config from DNS TXT records: the collector's address is all the agent
			// needs, and where the node's resolver is unreachable from the pod that lookup takes
			// the resolver's whole timeout (10 s with the defaults) before the first connection,
			// so the first export timed out and its spans were dropped (seen on the test bed's
			// node).
			otlptracegrpc.WithDialOption(grpc.WithDisableServiceConfig()),
		}
		switch {
		case u != nil:
			o = append(o, otlptracegrpc.WithEndpointURL(u.String()))
		case opts.Endpoint != "":
			o = append(o, otlptracegrpc.WithEndpoint(opts.Endpoint))
		}
		if opts.Insecure {
			o = append(o, otlptracegrpc.WithInsecure())
		}
		if opts.Headers != nil {
			o = append(o, otlptracegrpc.WithHeaders(opts.Headers))
		}
		if opts.ExportTimeout > 0 {
			o = append(o, otlptracegrpc.WithTimeout(opts.ExportTimeout))
		}
		if r := opts.Retry; r != nil {
			o = append(o, otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{
				Enabled: !r.Disabled, InitialInterval: r.InitialInterval,
				MaxInterval: r.MaxInterval, MaxElapsedTime: r.MaxElapsedTime,
			}))
		}
		return otlptracegrpc.NewClient(o...), nil
	}

	var o []otlptracehttp.Option
	switch {
	case u != nil:
		o = append(o, otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(path.Join("/", u.Path, "v1/traces")))
		if u.Scheme == "http" {
			o = append(o, otlptracehttp.WithInsecure())
		}
	case opts.Endpoint != "":
		o = append(o, otlptracehttp.WithEndpoint(opts.Endpoint), otlptracehttp.WithURLPath("/v1/traces"))
	}
	// Always set: the SDK would otherwise take the encoding from OTEL_EXPORTER_OTLP_PROTOCOL.
	if proto == ProtocolHTTPJSON {
		o = append(o, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
	} else {
		o = append(o, otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf))
	}
	if opts.Insecure {
		o = append(o, otlptracehttp.WithInsecure())
	}
	if opts.Headers != nil {
		o = append(o, otlptracehttp.WithHeaders(opts.Headers))
	}
	if opts.ExportTimeout > 0 {
		o = append(o, otlptracehttp.WithTimeout(opts.ExportTimeout))
	}
	if r := opts.Retry; r != nil {
		o = append(o, otlptracehttp.WithRetry(otlptracehttp.RetryConfig{
			Enabled: !r.Disabled, InitialInterval: r.InitialInterval,
			MaxInterval: r.MaxInterval, MaxElapsedTime: r.MaxElapsedTime,
		}))
	}
	return otlptracehttp.NewClient(o...), nil
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
		if _, seen := e.versions.get(v); !seen {
			e.versions.put(v, struct{}{})
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
	prev, linked := e.links.get(key)
	e.mu.Unlock()

	startOpts := []trace.SpanStartOption{
		trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(rootAttributes(s)...),
	}
	if linked {
		startOpts = append(startOpts, trace.WithLinks(trace.Link{
			SpanContext: prev,
			Attributes:  []attribute.KeyValue{attrLinkType.String(linkPreviousReconcile)},
		}))
	}
	if s.UID != "" && s.ResourceVersion != "" {
		startOpts = append(startOpts, trace.WithLinks(versionLink(s.UID, s.ResourceVersion, linkReadVersion)))
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
	root.End(trace.WithTimestamp(end))
	s.TraceID = root.SpanContext().TraceID().String()

	e.mu.Lock()
	e.links.put(key, root.SpanContext())
	e.mu.Unlock()
	return nil
}

// fightEvent names the span event of a reconcile whose write took part in a controller fight.
const fightEvent = "reconscope.controller_fight"

// writeCalls makes a span per call, nested as the calls were: a call of depth d is the child of
// the enclosing call of depth d-1 on the same goroutine, a call of depth 0 the child of the
// reconcile (also when a goroutine the reconcile started made it).
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
	if c.Subresource != "" {
		attrs = append(attrs, attrCallSubres.String(c.Subresource))
	}
	if c.Namespace != "" {
		attrs = append(attrs, attrObjectNamespace.String(c.Namespace))
	}
	if s.ReconcileID != "" {
		attrs = append(attrs, attrReconcileID.String(s.ReconcileID))
	}
	// The writer's pod and node, as span attributes (the resource is the lifelines service).
	if s.Pod != "" {
		ns, name, ok := strings.Cut(s.Pod, "/")
		if !ok {
			ns, name = "", s.Pod
		}
		if ns != "" {
			attrs = append(attrs, semconv.K8SNamespaceNameKey.String(ns))
		}
		attrs = append(attrs, semconv.K8SPodNameKey.String(name))
	}
	node := e.nodeName
	if s.Workload != nil && s.Workload.Node != "" {
		node = s.Workload.Node
	}
	if node != "" {
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

// tracerLocked returns the tracer of s's process, making its TracerProvider on first use.
func (e *OTLPExporter) tracerLocked(s *span.Span, service string) trace.Tracer {
	k := processKey{pid: s.PID, exe: s.Exe, pod: s.Pod, container: s.Container, workload: s.Workload}
	if t, ok := e.providers.get(k); ok {
		return t
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
	t := tp.Tracer(instrumentationScope)
	e.providers.put(k, t)
	return t
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
	if s.Pod != "" {
		ns, name, ok := strings.Cut(s.Pod, "/")
		if !ok {
			ns, name = "", s.Pod
		}
		if ns != "" {
			attrs = append(attrs, semconv.K8SNamespaceNameKey.String(ns))
		}
		attrs = append(attrs, semconv.K8SPodNameKey.String(name))
	}
	if s.Container != "" {
		attrs = append(attrs, semconv.K8SContainerNameKey.String(s.Container))
	}
	node := e.nodeName
	if w := s.Workload; w != nil {
		if w.Node != "" {
			node = w.Node
		}
		str := func(k attribute.Key, v string) {
			if v != "" {
				attrs = append(attrs, k.String(v))
			}
		}
		str(semconv.K8SPodUIDKey, w.PodUID)
		str(semconv.ServiceNamespaceKey, w.ServiceNamespace)
		str(semconv.ServiceInstanceIDKey, w.ServiceInstanceID)
		switch w.Kind {
		case "Deployment":
			str(semconv.K8SDeploymentNameKey, w.Name)
		case "StatefulSet":
			str(semconv.K8SStatefulSetNameKey, w.Name)
		case "DaemonSet":
			str(semconv.K8SDaemonSetNameKey, w.Name)
		case "Job":
			str(semconv.K8SJobNameKey, w.Name)
		}
		str(semconv.K8SReplicaSetNameKey, w.ReplicaSet)
		keys := make([]string, 0, len(w.Attributes))
		for k := range w.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			attrs = append(attrs, attribute.String(k, w.Attributes[k]))
		}
	}
	if node != "" {
		attrs = append(attrs, semconv.K8SNodeNameKey.String(node))
	}
	return attrs
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
	)
	if s.Namespace != "" {
		attrs = append(attrs, attrObjectNamespace.String(s.Namespace))
	}
	if s.UID != "" {
		attrs = append(attrs, attrObjectUID.String(s.UID))
	}
	if s.ResourceVersion != "" {
		attrs = append(attrs, attrObjectRV.String(s.ResourceVersion))
	}
	if s.ReconcileID != "" {
		attrs = append(attrs, attrReconcileID.String(s.ReconcileID))
	}
	if s.RequeueAfter != 0 {
		attrs = append(attrs, attrRequeueAfterNS.Int64(int64(s.RequeueAfter)))
	}
	if s.QueueWait != 0 {
		attrs = append(attrs, attrQueueWaitNS.Int64(int64(s.QueueWait)))
	}
	if s.Backoff != 0 {
		attrs = append(attrs, attrBackoffNS.Int64(int64(s.Backoff)))
	}
	if s.TriggerController != "" {
		attrs = append(attrs, attrTriggerCtl.String(s.TriggerController))
	}
	if s.TriggerLagKnown {
		attrs = append(attrs, attrTriggerLagNS.Int64(int64(s.TriggerLag)))
	}
	return attrs
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
	if c.Verb != "" {
		attrs = append(attrs, attrCallVerb.String(c.Verb))
	}
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
	if c.Outcome != "" {
		attrs = append(attrs, attrCallOutcome.String(c.Outcome))
	}
	if c.Resource != "" {
		attrs = append(attrs, attrCallResource.String(c.Resource))
	}
	if c.Subresource != "" {
		attrs = append(attrs, attrCallSubres.String(c.Subresource))
	}
	if c.Namespace != "" {
		attrs = append(attrs, attrObjectNamespace.String(c.Namespace))
	}
	if c.Kind == span.CallAPI && c.Resource != "" {
		attrs = append(attrs, attrCallPath.String(pathTemplate(c)))
	}
	if c.Name != "" {
		attrs = append(attrs, attrObjectName.String(c.Name))
	}
	if c.UID != "" {
		attrs = append(attrs, attrObjectUID.String(c.UID))
	}
	if c.ResourceVersion != "" {
		attrs = append(attrs, attrObjectRV.String(c.ResourceVersion))
	}
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

// spanAccounting gates the BatchSpanProcessor so that it never drops a span on its own
// (it would, silently, when its queue is full) and counts every span's fate. A span is reserved
// before it is made and settled when its export returns: so the number in flight bounds the
// processor's queue plus the batch being exported.
type spanAccounting struct {
	mu                sync.Mutex
	max               int
	inflight, peak    int
	exported, dropped uint64
}

func (a *spanAccounting) reserve(n int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight+n > a.max {
		a.dropped += uint64(n)
		return false
	}
	a.inflight += n
	a.peak = max(a.peak, a.inflight)
	return true
}

// settle records the outcome of an export of ok+failed spans.
func (a *spanAccounting) settle(ok, failed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// After abandon, a late export may still return: count only what is still in flight.
	ok = min(ok, a.inflight)
	failed = min(failed, a.inflight-ok)
	a.inflight -= ok + failed
	a.exported += uint64(ok)
	a.dropped += uint64(failed)
}

func (a *spanAccounting) drop(n int) {
	a.mu.Lock()
	a.dropped += uint64(n)
	a.mu.Unlock()
}

// abandon counts what is still in flight as dropped (after Shutdown).
func (a *spanAccounting) abandon() {
	a.mu.Lock()
	a.dropped += uint64(a.inflight)
	a.inflight = 0
	a.mu.Unlock()
}

func (a *spanAccounting) stats() OTLPStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return OTLPStats{Exported: a.exported, Dropped: a.dropped, Queued: a.inflight}
}

// countingExporter settles the accounting with the outcome of each export and logs when
// exporting starts failing and when it recovers.
type countingExporter struct {
	next    sdktrace.SpanExporter
	acct    *spanAccounting
	logger  *slog.Logger
	mu      sync.Mutex
	failing bool
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.next.ExportSpans(ctx, spans)
	n := len(spans)
	failed := 0
	if err != nil {
		if rejected, ok := partialSuccessRejected(err); ok {
			failed = int(min(int64(n), max(rejected, 0)))
		} else {
			failed = n
		}
	}
	c.acct.settle(n-failed, failed)

	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil && failed == n && !c.failing:
		c.failing = true
		c.logger.Warn("OTLP export failing; spans are dropped until the collector is reachable", "spans", n, "err", err)
	case err != nil && failed < n:
		c.logger.Warn("OTLP collector rejected some spans", "rejected", failed, "spans", n, "err", err)
	case err == nil && c.failing:
		c.failing = false
		c.logger.Info("OTLP export recovered")
	}
	return err
}

func (c *countingExporter) Shutdown(ctx context.Context) error { return c.next.Shutdown(ctx) }

// partialSuccessRejected finds an OTLP partial-success error (the collector accepted the request
// but rejected some spans) in err and returns how many spans were rejected. The SDK's error type
// lives in an internal package, so it is recognised by its name and field.
func partialSuccessRejected(err error) (int64, bool) {
	if err == nil {
		return 0, false
	}
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Struct && v.Type().Name() == "PartialSuccess" {
		if f := v.FieldByName("RejectedItems"); f.IsValid() && f.CanInt() {
			return f.Int(), true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return partialSuccessRejected(u.Unwrap())
	case interface{ Unwrap() []error }:
		var total int64
		found := false
		for _, e := range u.Unwrap() {
			n, ok := partialSuccessRejected(e)
			if !ok {
				return 0, false // another error: the whole export failed
			}
			total += n
			found = true
		}
		return total, found
	}
	return 0, false
}

// lru is a small least-recently-used map; not safe for concurrent use.
type lru[K comparable, V any] struct {
	max   int
	order *list.List // front: most recent
	items map[K]*list.Element
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, order: list.New(), items: make(map[K]*list.Element)}
}

func (l *lru[K, V]) get(k K) (V, bool) {
	if el, ok := l.items[k]; ok {
		l.order.MoveToFront(el)
		return el.Value.(*lruEntry[K, V]).val, true
	}
	var zero V
	return zero, false
}

func (l *lru[K, V]) put(k K, v V) {
	if el, ok := l.items[k]; ok {
		el.Value.(*lruEntry[K, V]).val = v
		l.order.MoveToFront(el)
		return
	}
	l.items[k] = l.order.PushFront(&lruEntry[K, V]{key: k, val: v})
	for l.order.Len() > l.max {
		old := l.order.Back()
		l.order.Remove(old)
		delete(l.items, old.Value.(*lruEntry[K, V]).key)
	}
}

func (l *lru[K, V]) len() int { return l.order.Len() }

// ParseHeaders reads headers written as in OTEL_EXPORTER_OTLP_HEADERS ("k1=v1,k2=v2", values
// URL-encoded), for a command-line flag that sets OTLPOptions.Headers.
func ParseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("parse OTLP header %q: want key=value", pair)
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("parse OTLP header %q: %w", k, err)
		}
		h[k] = val
	}
	return h, nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && v > 0 {
		return v
	}
	return def
}

func positive[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
