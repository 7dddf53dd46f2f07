package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"github.com/reconscope/reconscope/internal/cli"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/metricsauth"
	"github.com/reconscope/reconscope/pkg/probes"
)

// exportFlags are the flags shared by trace and run that say where spans and metrics go.
type exportFlags struct {
	metricsAddr  *string
	otlpEndpoint *string
	otlpProtocol *string
	otlpInsecure *bool
	otlpHeaders  *string
	noopRate     *float64
	slow         *time.Duration
	hotK         *int
	nodeName     *string
	errMessages  *string
	redact       *stringsFlag
	recentSpans  *int
}

// stringsFlag is a flag that may be given more than once; each value is kept, in order.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, " ") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }
func (s *stringsFlag) Type() string       { return "strings" }

func addExportFlags(fs *pflag.FlagSet, metricsDefault string) *exportFlags {
	f := &exportFlags{
		metricsAddr:  fs.String("metrics-addr", metricsDefault, `serve Prometheus /metrics, /healthz, /readyz and the span stream /spans on this address ("" disables)`),
		otlpEndpoint: fs.String("otlp-endpoint", "", "send spans over OTLP to this collector (URL or host:port); also OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
		otlpProtocol: fs.String("otlp-protocol", "", "OTLP protocol: grpc, http/protobuf or http/json (default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else grpc for an endpoint on port 4317 and http/protobuf otherwise)"),
		otlpInsecure: fs.Bool("otlp-insecure", false, "OTLP without TLS (also OTEL_EXPORTER_OTLP_INSECURE=true, or an http:// endpoint)"),
		otlpHeaders:  fs.String("otlp-headers", "", "OTLP request headers, k1=v1,k2=v2 (default: OTEL_EXPORTER_OTLP_HEADERS)"),
		noopRate:     fs.Float64("sample-noop-rate", 1, "fraction of no-op reconciles (no write) sent as traces; errors, slow and writing reconciles are always sent, metrics count all"),
		slow:         fs.Duration("slow-threshold", time.Second, "reconciles at least this long are always sent as traces (0: no slow rule)"),
		hotK:         fs.Int("hot-objects", 10, "objects per controller in the reconscope_hot_objects gauge"),
		nodeName:     fs.String("node-name", os.Getenv("NODE_NAME"), "k8s.node.name of the spans (default: $NODE_NAME)"),
		errMessages:  fs.String("error-messages", "keep", "reconcile error messages in every output: keep, or drop (the error's type and the result stay; SECURITY.md)"),
		redact:       &stringsFlag{},
		recentSpans:  fs.Int("recent-spans", exporter.DefaultRecentSpans, fmt.Sprintf("spans kept for GET /spans on the metrics address, the span stream of kubectl reconscope tail (at most %d; 0: no /spans)", exporter.MaxRecentSpans)),
	}
	fs.Var(f.redact, "redact-errors", "replace every match of this regular expression (RE2) in error messages with [redacted], in every output; repeatable")
	return f
}

// completeExportFlags lets a shell complete the values of --error-messages and
// --otlp-protocol (trace and run).
func completeExportFlags(cmd *cobra.Command) {
	cli.Complete(cmd, "error-messages", "keep", "drop")
	cli.Complete(cmd, "otlp-protocol", "grpc", "http/protobuf", "http/json")
}

// detailSwitched counts a switch of a controller's detail (detail.Options.OnSwitch).
func (e *exporters) detailSwitched(controller string, to probes.Detail, _ string) {
	if e.metrics != nil {
		e.metrics.DetailSwitched(controller, to.String())
	}
}

// exporters is what the agent writes spans to, and how to stop it.
type exporters struct {
	writer exporter.Writer
	// output is the agent's own output (--output on standard output) behind its queue; nil
	// when there is none.
	output  *exporter.Queue
	log     *slog.Logger
	metrics *exporter.Metrics
	otlp    *exporter.OTLPExporter
	sampler *exporter.Sampler
	// redactor drops or redacts error messages before any writer sees them; nil when
	// --error-messages keep and no --redact-errors.
	redactor *exporter.Redactor
	server   *http.Server
	// stream keeps the last spans and serves them on GET /spans (kubectl reconscope tail);
	// nil without a metrics address or with --recent-spans 0.
	stream *exporter.SpanStream
	// stopRequests ends the requests in flight (followers of /spans) when the server stops.
	stopRequests context.CancelFunc
	// handlers are served next to the metrics, by path (run's detailPath).
	handlers map[string]http.Handler
	// spanExporters names where spans go (otlp, console); none: no span export.
	spanExporters []string
	// selfStats fills in, at each scrape, the self-metrics the exporters do not count
	// themselves (the tracer's: agent.SelfStats), once they exist (addSelfStats).
	selfStats atomic.Pointer[func(*exporter.AgentStats)]
}

// addSelfStats gives the self-metrics the figures of the stages built after the exporters:
// fill is called at each scrape.
func (e *exporters) addSelfStats(fill func(*exporter.AgentStats)) { e.selfStats.Store(&fill) }

// spanExporters says where spans go: the exporters named by OTEL_TRACES_EXPORTER (none when
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none). Without OTEL_TRACES_EXPORTER, spans go
// over OTLP only when an endpoint is configured (flag or OTEL_EXPORTER_OTLP_*ENDPOINT).
func (f *exportFlags) spanExporters() ([]string, error) {
	names, explicit, err := exporter.TracesExportersFromEnv()
	if err != nil || explicit {
		return names, err
	}
	if *f.otlpEndpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		return names, nil
	}
	return nil, nil
}

// build makes the exporters. output, when not nil, writes the agent's own output (tree or
// JSON lines on standard output): it goes first, behind a queue, so that an output nobody
// reads drops spans (counted) instead of stalling the tracer; local writers (the exit summary)
// follow. The tracer, made with the exporters' writer, fills in its part of the self-metrics
// once it exists (addSelfStats); until then they say nothing of it.
func (f *exportFlags) build(ctx context.Context, log *slog.Logger, clock ktime.Clock, output exporter.Writer, local ...exporter.Writer) (*exporters, error) {
	// A bad pattern is a usage error found before anything is started (an OTLP exporter).
	ro, err := f.redactOptions()
	if err != nil {
		return nil, err
	}
	e := &exporters{log: log}
	var chain exporter.Multi
	if output != nil {
		e.output = exporter.NewQueue(output, exporter.DefaultQueueSize, log)
		chain = append(chain, e.output)
	}
	chain = append(chain, local...)
	if *f.recentSpans < 0 || *f.recentSpans > exporter.MaxRecentSpans {
		return nil, fmt.Errorf("--recent-spans %d: want 0 to %d", *f.recentSpans, exporter.MaxRecentSpans)
	}
	if *f.metricsAddr != "" {
		build := agentBuild()
		e.metrics = exporter.NewMetrics(exporter.MetricsOptions{HotObjectsK: *f.hotK, BuildInfo: &build, AgentStats: func() exporter.AgentStats {
			return e.agentStats()
		}})
		if *f.recentSpans > 0 {
			e.stream = exporter.NewSpanStream(*f.recentSpans, clock)
			e.stream.Register(e.metrics.Registry())
			chain = append(chain, e.stream)
		}
	}
	names, err := f.spanExporters()
	if err != nil {
		return nil, err
	}
	if len(names) > 0 {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Debug("otlp", "err", err) }))
		opts := exporter.OTLPOptions{
			Endpoint:  *f.otlpEndpoint,
			Protocol:  exporter.Protocol(*f.otlpProtocol),
			Insecure:  *f.otlpInsecure,
			NodeName:  *f.nodeName,
			Version:   agentBuild().Version,
			Clock:     clock,
			Logger:    log,
			Exporters: names,
		}
		if *f.otlpHeaders != "" {
			h, err := exporter.ParseHeaders(*f.otlpHeaders)
			if err != nil {
				return nil, fmt.Errorf("--otlp-headers: %w", err)
			}
			opts.Headers = h
		}
		otlp, err := exporter.NewOTLP(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("set up OTLP export: %w", err)
		}
		e.otlp = otlp
		e.sampler = exporter.NewSampler(exporter.SamplerOptions{NoopRate: *f.noopRate, SlowThreshold: *f.slow}, otlp)
		chain = append(chain, e.sampler)
	}
	// Metrics go last: they still see every reconcile (the sampler only thins what it passes
	// to OTLP), and by then the OTLP exporter has set the trace ID of the spans it exported,
	// which the duration and queue-wait histograms carry as exemplars.
	if e.metrics != nil {
		chain = append(chain, e.metrics)
	}
	e.writer = chain
	if ro.Enabled() {
		e.redactor = exporter.NewRedactor(ro, chain)
		e.writer = e.redactor
	}
	e.spanExporters = names
	return e, nil
}

// redactOptions reads --error-messages and --redact-errors.
func (f *exportFlags) redactOptions() (exporter.RedactOptions, error) {
	var o exporter.RedactOptions
	switch *f.errMessages {
	case "keep":
	case "drop":
		o.DropErrorMessages = true
	default:
		return o, fmt.Errorf("--error-messages %q: want keep or drop", *f.errMessages)
	}
	res, err := exporter.ParseRedactPatterns(*f.redact)
	if err != nil {
		return o, fmt.Errorf("--redact-errors: %w", err)
	}
	o.Patterns = res
	return o, nil
}

// agentStats reads the self-metrics at a scrape.
func (e *exporters) agentStats() exporter.AgentStats {
	var a exporter.AgentStats
	if fill := e.selfStats.Load(); fill != nil {
		(*fill)(&a)
	}
	if e.otlp != nil {
		o := e.otlp.Stats()
		a.SpansExported, a.SpansDropped = o.Exported, o.Dropped
		a.SpansSampledOut = e.sampler.SampledOut()
	}
	if e.output != nil {
		a.OutputSpansDropped = e.output.Dropped()
	}
	if e.redactor != nil {
		a.ErrorMessagesRedacted = e.redactor.RedactedMessages()
	}
	return a
}

// metricsSecurity is --metrics-secure: TLS, and a bearer token reviewed by the API server for
// everything but the probes' /healthz and /readyz. Nil serves plain HTTP to anyone.
type metricsSecurity struct {
	tls    *tls.Config
	filter *metricsauth.Filter
}

// newMetricsSecurity builds --metrics-secure's TLS (certFile and keyFile, or self-signed) and
// token filter (reviews made with client, the agent's identity).
func newMetricsSecurity(client metricsauth.Reviewer, certFile, keyFile string, log *slog.Logger) (*metricsSecurity, error) {
	if client == nil {
		return nil, errors.New("--metrics-secure reviews scrapers' tokens with the API server: run in a pod (in-cluster config) or give --kubeconfig")
	}
	host, _ := os.Hostname()
	cfg, err := metricsauth.ServerTLS(certFile, keyFile, host)
	if err != nil {
		return nil, err
	}
	f := metricsauth.New(metricsauth.Options{Client: client, Open: []string{"/healthz", "/readyz"}, Logger: log})
	return &metricsSecurity{tls: cfg, filter: f}, nil
}

// listenMetrics listens on addr, with TLS when sec says so.
func listenMetrics(addr string, sec *metricsSecurity) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address %s: %w", addr, err)
	}
	if sec != nil {
		ln = tls.NewListener(ln, sec.tls)
	}
	return ln, nil
}

// handler puts h behind sec's token filter.
func (sec *metricsSecurity) handler(h http.Handler) http.Handler {
	if sec == nil {
		return h
	}
	return sec.filter.Wrap(h)
}

// serve starts the metrics endpoint.
func (e *exporters) serve(addr string, sec *metricsSecurity, log *slog.Logger) error {
	if e.metrics == nil {
		return nil
	}
	ln, err := listenMetrics(addr, sec)
	if err != nil {
		return err
	}
	h := exporter.AgentHandler(e.metrics, e.stream)
	if len(e.handlers) > 0 {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		for path, eh := range e.handlers {
			mux.Handle(path, eh)
		}
		h = mux
	}
	// Requests end when the server stops: a follower of /spans does not hold up Shutdown.
	base, cancel := context.WithCancel(context.Background())
	e.stopRequests = cancel
	e.server = &http.Server{Handler: sec.handler(h), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	go func() {
		if err := e.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	e.metrics.SetReady(true)
	log.Info("serving metrics", "addr", ln.Addr().String(), "secure", sec != nil)
	return nil
}

// closeOutput writes what the output's queue holds, for at most outputGrace (an output that
// nobody reads is given up on), and returns how many spans it dropped. It waits only the
// first time it is called.
func (e *exporters) closeOutput() uint64 {
	if e.output == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), outputGrace)
	defer cancel()
	if err := e.output.Close(ctx); err != nil {
		e.log.Warn("output", "err", err)
	}
	return e.output.Dropped()
}

// outputGrace is how long closeOutput waits for the output to take the spans still queued.
const outputGrace = 5 * time.Second

// close flushes spans and stops the metrics server.
func (e *exporters) close() {
	e.closeOutput()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e.otlp != nil {
		_ = e.otlp.Shutdown(ctx)
	}
	if e.server != nil {
		e.stopRequests()
		_ = e.server.Shutdown(ctx)
	}
}
