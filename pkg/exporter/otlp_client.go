package exporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/reconscope/reconscope/pkg/ktime"
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
	// Version is the agent's version: the version of the instrumentation scope that makes
	// the spans ("" leaves it unset).
	Version string
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
		o = append(o, commonOptions(opts, otlptracegrpc.WithInsecure, otlptracegrpc.WithHeaders, otlptracegrpc.WithTimeout, otlptracegrpc.WithRetry)...)
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
	o = append(o, commonOptions(opts, otlptracehttp.WithInsecure, otlptracehttp.WithHeaders, otlptracehttp.WithTimeout, otlptracehttp.WithRetry)...)
	return otlptracehttp.NewClient(o...), nil
}

// retryConfig is the SDK's retry configuration, which its gRPC and HTTP packages declare each
// in a type of their own.
type retryConfig interface {
	~struct {
		Enabled         bool
		InitialInterval time.Duration
		MaxInterval     time.Duration
		MaxElapsedTime  time.Duration
	}
}

// commonOptions are the client options the gRPC and HTTP clients take from opts alike, made by
// one client's own constructors (the SDK's two packages have the same options, each in types
// of its own).
func commonOptions[O any, R retryConfig](opts OTLPOptions, insecure func() O, headers func(map[string]string) O, timeout func(time.Duration) O, retry func(R) O) []O {
	var o []O
	if opts.Insecure {
		o = append(o, insecure())
	}
	if opts.Headers != nil {
		o = append(o, headers(opts.Headers))
	}
	if opts.ExportTimeout > 0 {
		o = append(o, timeout(opts.ExportTimeout))
	}
	if r := opts.Retry; r != nil {
		o = append(o, retry(R{
			Enabled: !r.Disabled, InitialInterval: r.InitialInterval,
			MaxInterval: r.MaxInterval, MaxElapsedTime: r.MaxElapsedTime,
		}))
	}
	return o
}

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
