package exporter

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reconscope/reconscope/pkg/span"
)

// Defaults of MetricsOptions.
const (
	DefaultHotObjectsK          = 10
	DefaultHotObjectsWindow     = 5 * time.Minute
	DefaultHotObjectsMaxTracked = 10000
)

// hotObjectSlots is how many slices the hot-objects window is cut into: it slides by
// Window/hotObjectSlots.
const hotObjectSlots = 6

// DurationBuckets are the classic histogram buckets of reconcile and phase durations, in
// seconds: 100µs to 60s.
var DurationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// AgentStats are the agent's own counts, read at each scrape.
type AgentStats struct {
	// EventsLostRingBuffer counts probe events the kernel dropped because the ring buffer was
	// full (reconscope_events_lost_total{cause="ring_buffer_full"}).
	EventsLostRingBuffer uint64
	// EventsLostState counts span entries whose goroutine state the kernel could not store
	// because the state map was full (reconscope_events_lost_total{cause="state"}).
	EventsLostState uint64
	// ReconcilesInFlight is the number of reconciles started and not yet finished (the
	// assembler's open spans, span.Assembler.Open).
	ReconcilesInFlight int
	// ProbesAttached is the number of probes attached now.
	ProbesAttached int
	// ProcessesTraced is the number of processes traced now.
	ProcessesTraced int
	// SpansExported counts spans the OTLP collector accepted (OTLPStats.Exported).
	SpansExported uint64
	// SpansDropped counts spans lost on the way to the collector (OTLPStats.Dropped).
	SpansDropped uint64
	// SpansSampledOut counts reconciles the sampler chose not to export (Sampler.SampledOut);
	// they are not lost: metrics saw them.
	SpansSampledOut uint64
	// OutputSpansDropped counts spans not written to the agent's own output (--output json or
	// tree on standard output) because it did not keep up (Queue.Dropped).
	OutputSpansDropped uint64
	// ErrorMessagesRedacted counts reconcile error messages dropped or redacted before export
	// (Redactor.RedactedMessages): a choice, not a loss.
	ErrorMessagesRedacted uint64
	// KernelProbeHits counts every probe hit in traced processes, as the kernel program
	// counts them, with or without a record (reconscope_kernel_probe_hits_total).
	KernelProbeHits uint64
	// ExcludedKernel counts the work items and reconciles of unselected controllers the kernel
	// skipped at their entry, with no record (collector.Counters.Excluded;
	// reconscope_spans_excluded_total{where="kernel"}).
	ExcludedKernel uint64
	// ExcludedAgent counts those that reached the agent and were dropped there (those done
	// before the agent read the first of their controller instance, items of queues named workqueue (name and worker unknown):
	// tracer.Stats.Excluded;
	// reconscope_spans_excluded_total{where="agent"}).
	ExcludedAgent uint64
	// Handoffs and HandoffsLost count the work-queue items whose Done came on another
	// goroutine than their Get's: paired with their item, or abandoned because the item's
	// identity is unknown (span.Stats.Handoffs, HandoffsLost).
	Handoffs, HandoffsLost uint64
	// GatedHits counts the hits of call probes attached for controllers at detail calls that
	// came in spans of controllers at detail reconcile: no record (collector.Counters.Gated;
	// reconscope_detail_gated_hits_total).
	GatedHits uint64
	// HeldForWriter counts spans whose export waited for a traced write in flight, so that the
	// writer of a version one of their watch events delivered is named (span.Stats.HeldForWriter;
	// reconscope_spans_held_for_writer_total).
	HeldForWriter uint64
}

// MetricsOptions configures NewMetrics.
type MetricsOptions struct {
	// HotObjectsK is how many objects per controller reconscope_hot_objects shows. Zero: 10.
	HotObjectsK int
	// HotObjectsWindow is the sliding window over which reconciles are counted for
	// reconscope_hot_objects. Zero: 5m.
	HotObjectsWindow time.Duration
	// HotObjectsMaxTracked bounds the distinct objects counted per controller within a window;
	// objects first seen when the bound is reached are not counted until older ones age out.
	// Zero: 10000.
	HotObjectsMaxTracked int
	// AgentStats, when set, is called once per scrape for the agent's self-metrics.
	AgentStats func() AgentStats
	// BuildInfo, when set, is exposed as reconscope_build_info (value 1).
	BuildInfo *BuildInfo
}

// BuildInfo labels reconscope_build_info: what the agent was built from.
type BuildInfo struct {
	Version   string // module version, or "(devel)"
	Revision  string // VCS revision
	Dirty     bool   // built from a tree with uncommitted changes
	GoVersion string
	GoArch    string // the architecture it was built for (amd64, arm64)
}

// Metrics turns spans into Prometheus metrics on its own registry (with the Go and process
// collectors) and serves them. It implements Writer; put it beside the sampler, not behind it,
// so it sees every reconcile, and after the OTLP exporter, so that the trace ID of an exported
// reconcile (span.Span.TraceID) becomes an exemplar of its duration and queue-wait observations.
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler
	ready   atomic.Bool

	reconciles *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	phases     *prometheus.HistogramVec
	api        *prometheus.CounterVec
	noops      *prometheus.CounterVec
	queueWait  *prometheus.HistogramVec
	triggerLag *prometheus.HistogramVec
	fights     *prometheus.CounterVec
	conflicts  *prometheus.CounterVec
	hotLoops   *prometheus.CounterVec
	staleReads *prometheus.CounterVec
	hits       *prometheus.CounterVec
	switches   *prometheus.CounterVec
	hot        *hotObjects
	tracing    *prometheus.GaugeVec
	unnamed    prometheus.Counter

	// seenMu guards seen: the controllers (with their workload labels, the values of
	// workloadValues) whose reconscope_reconcile_total series of every result exist.
	seenMu sync.Mutex
	seen   map[[7]string]bool
}

// reconcileResults are the results whose reconscope_reconcile_total series start at 0 when a
// controller is first seen, as controller-runtime's controller_runtime_reconcile_total does,
// so that a ratio over them (the dashboard's error ratio) is 0 rather than no data.
var reconcileResults = []span.Result{span.ResultSuccess, span.ResultError, span.ResultRequeue, span.ResultRequeueAfter, span.ResultAbandoned}

// NotTracingBelowFloor is the reason of reconscope_tracing on a node whose kernel lacks a
// feature reconscope cannot work without (collector.ErrBelowFloor).
const NotTracingBelowFloor = "kernel_below_floor"

// NewMetrics registers the reconscope metric set on a new registry.
func NewMetrics(opts MetricsOptions) *Metrics {
	reg := prometheus.NewRegistry()
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:                            name,
			Help:                            help,
			Buckets:                         DurationBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, labels)
	}
	// Every per-controller metric also names the traced workload, as the OpenTelemetry
	// Prometheus mapping spells k8s.namespace.name, k8s.pod.name, k8s.container.name and
	// service.name, plus the pod's owner workload (empty, hence absent, when unknown). The
	// names do not collide with the namespace and pod target labels Prometheus adds for the
	// agent's own pod.
	wl := func(labels ...string) []string {
		return append(append([]string{"controller"}, workloadLabels...), labels...)
	}
	m := &Metrics{
		reg: reg,
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_reconcile_total",
			Help: "Reconciles finished, by controller and result (success, error, requeue, requeue_after, abandoned).",
		}, wl("result")),
		duration: histogram("reconscope_reconcile_duration_seconds",
			"Duration of reconciles that returned (abandoned ones are not observed).", wl()...),
		phases: histogram("reconscope_reconcile_phase_seconds",
			"Time a reconcile spent per phase: fetch (reads: cache, listers, API GETs and LISTs), apply (API writes) and diff (the rest); each instant counts once, as apply when any write runs, else fetch when any read runs, else diff.",
			wl("phase")...),
		api: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_api_requests_total",
			Help: "API server requests made by reconciles, by verb, resource[/subresource] and HTTP status code.",
		}, wl("verb", "resource", "code")),
		noops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_noop_reconciles_total",
			Help: "Reconciles that wrote nothing to the API server.",
		}, wl()),
		queueWait: histogram("reconscope_queue_wait_seconds",
			"Time an object waited in its controller's work queue before its reconcile started (reconciles whose queue add was seen).", wl()...),
		triggerLag: histogram("reconscope_trigger_lag_seconds",
			"Time from the write that made the version of the most recent watch event among a reconcile's triggers to the reconcile's start (watch delivery plus queue), by the controller that wrote it (trigger_controller); reconciles whose trigger write was seen on this node.",
			wl("trigger_controller")...),
		fights: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_controller_fights_total",
			Help: "Controller fight episodes seen on this node: writers alternately changing one object's resource[/subresource] (see --fight-alternations, --fight-window), once per episode for each writer and each opponent.",
		}, []string{"controller", "opponent", "resource"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_write_conflicts_total",
			Help: "API writes answered 409 Conflict, by the writing controller, the writer of the newer version it conflicted with (other_writer: a controller traced on this node, or untraced) and the resource[/subresource].",
		}, []string{"controller", "other_writer", "resource"}),
		hotLoops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_hot_loops_total",
			Help: "Hot-loop episodes seen on this node, once per episode (see --hot-loop-chain, --hot-loop-window): kind=self_triggered, reconciles of one object each triggered by the controller's own previous write; kind=noop_write, writes of one object that changed nothing.",
		}, []string{"controller", "kind"}),
		staleReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_stale_reads_total",
			Help: "Reads of an object's version older than one a write traced on this node had made before the read began (a lagging cache), by the reading controller and the read's resource (unknown at --detail reconcile).",
		}, []string{"controller", "resource"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_probe_hits_total",
			Help: "Probe hits the traced process paid for its reconciles (the hits whose records joined a span: entry, return, calls, queue marks), by what each cost its thread: kind=emulated (one trap) or single_stepped (a trap and a single-step). Divide by reconscope_reconcile_total for hits per reconcile.",
		}, wl("kind")),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconscope_detail_switches_total",
			Help: "Switches of a controller's detail at run time (--detail-switch-max): to=calls when a slow reconcile or a request switched it, to=reconcile when the switch's time was over.",
		}, []string{"controller", "to"}),
		hot: newHotObjects(opts),
		tracing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconscope_tracing",
			Help: "1 when the agent's eBPF programs are loaded and it traces this node; 0 when it does not, with the reason (kernel_below_floor: /readyz and the log name the missing kernel feature). No series before the agent has tried to load its programs.",
		}, []string{"reason"}),
		unnamed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reconscope_spans_unnamed_total",
			Help: "Reconciles of processes in a Kubernetes pod (their cgroup names a pod or container) whose pod the agent did not know when they finished: their spans and series carry no pod, container nor workload, only the pod UID and container ID (the API server unreachable when the pod started, or the pod not listed yet).",
		}),
	}
	if b := opts.BuildInfo; b != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "reconscope_build_info",
			Help: "What the agent was built from: module version, VCS revision, dirty tree, Go version, architecture. Always 1.",
			ConstLabels: prometheus.Labels{
				"version": b.Version, "revision": b.Revision, "dirty": strconv.FormatBool(b.Dirty), "goversion": b.GoVersion, "goarch": b.GoArch,
			},
		}, func() float64 { return 1 }))
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.reconciles, m.duration, m.phases, m.api, m.noops, m.queueWait, m.triggerLag, m.fights, m.conflicts, m.hotLoops, m.staleReads, m.hits, m.switches, m.hot, m.tracing, m.unnamed,
	)
	if opts.AgentStats != nil {
		reg.MustRegister(newAgentCollector(opts.AgentStats))
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		Registry:          reg,
		ErrorHandling:     promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !m.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	m.handler = mux
	return m
}

// initResults makes the reconscope_reconcile_total series of every result of a controller
// seen for the first time (value 0 until one is counted).
func (m *Metrics) initResults(controller string, wv [6]string) {
	var key [7]string
	key[0] = controller
	copy(key[1:], wv[:])
	m.seenMu.Lock()
	defer m.seenMu.Unlock()
	if m.seen[key] {
		return
	}
	if m.seen == nil {
		m.seen = map[[7]string]bool{}
	}
	m.seen[key] = true
	for _, r := range reconcileResults {
		m.reconciles.WithLabelValues(append(key[:], string(r))...)
	}
}

// DetailSwitched counts a switch of controller's detail to level to (reconscope_detail_switches_total).
func (m *Metrics) DetailSwitched(controller, to string) {
	m.switches.WithLabelValues(controller, to).Inc()
}

// Registry is the registry the metrics are on, for the agent to add its own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves /metrics (Prometheus text, OpenMetrics or protobuf by content negotiation;
// native histograms appear in protobuf only), /healthz (always 200) and /readyz (200 once
// SetReady(true), else 503).
func (m *Metrics) Handler() http.Handler { return m.handler }

// SetReady sets what /readyz answers.
func (m *Metrics) SetReady(ready bool) { m.ready.Store(ready) }

// SetTracing sets reconscope_tracing: reason "" says the agent traces (1), any other reason
// says it does not and why (0, labelled reason). The previous series goes.
func (m *Metrics) SetTracing(reason string) {
	m.tracing.Reset()
	v := 0.0
	if reason == "" {
		v = 1
	}
	m.tracing.WithLabelValues(reason).Set(v)
}

// Write implements Writer: it observes one finished reconcile.
func (m *Metrics) Write(s *span.Span) error {
	result := string(s.Result)
	if result == "" {
		result = "unknown"
	}
	wv := workloadValues(s)
	lv := func(labels ...string) []string {
		return append(append([]string{s.Controller}, wv[:]...), labels...)
	}
	// An exported span's trace ID becomes an exemplar (OpenMetrics only) of its observations.
	observe := func(h prometheus.Observer, v float64) {
		if e, ok := h.(prometheus.ExemplarObserver); ok && s.TraceID != "" {
			e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": s.TraceID})
			return
		}
		h.Observe(v)
	}
	m.reconciles.WithLabelValues(lv(result)...).Inc()
	m.initResults(s.Controller, wv)
	if Unnamed(s) {
		m.unnamed.Inc()
	}
	if s.Noop {
		m.noops.WithLabelValues(lv()...).Inc()
	}
	m.hits.WithLabelValues(lv("emulated")...).Add(float64(s.ProbeHits.Emulated))
	m.hits.WithLabelValues(lv("single_stepped")...).Add(float64(s.ProbeHits.SingleStepped))
	if s.QueueWait > 0 {
		observe(m.queueWait.WithLabelValues(lv()...), s.QueueWait.Seconds())
	}
	for i := range s.Fights {
		if f := &s.Fights[i]; f.Start {
			res := f.Resource
			if f.Subresource != "" {
				res += "/" + f.Subresource
			}
			for _, w := range f.Writers {
				for _, o := range f.Opponents(w) {
					m.fights.WithLabelValues(w, o, res).Inc()
				}
			}
		}
	}
	for i := range s.HotLoops {
		if h := &s.HotLoops[i]; h.Start {
			m.hotLoops.WithLabelValues(s.Controller, string(h.Kind)).Inc()
		}
	}
	for i := range s.StaleReads {
		res := s.StaleReads[i].Resource
		if res == "" {
			res = "unknown"
		}
		m.staleReads.WithLabelValues(s.Controller, res).Inc()
	}
	if s.TriggerLagKnown {
		observe(m.triggerLag.WithLabelValues(lv(s.TriggerController)...), s.TriggerLag.Seconds())
	}
	if s.Result != span.ResultAbandoned {
		observe(m.duration.WithLabelValues(lv()...), s.Duration.Seconds())
		m.phases.WithLabelValues(lv("fetch")...).Observe(s.Phases.Fetch.Seconds())
		m.phases.WithLabelValues(lv("diff")...).Observe(s.Phases.Diff.Seconds())
		m.phases.WithLabelValues(lv("apply")...).Observe(s.Phases.Apply.Seconds())
	}
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Kind != span.CallAPI {
			continue
		}
		verb, resource, code := c.Verb, c.Resource, "unknown"
		if verb == "" {
			verb = "unknown"
		}
		if resource == "" {
			resource = "unknown"
		}
		if c.Subresource != "" {
			resource += "/" + c.Subresource
		}
		if c.Status != 0 {
			code = strconv.Itoa(c.Status)
		}
		m.api.WithLabelValues(lv(verb, resource, code)...).Inc()
		if c.Status == 409 && c.IsWrite() {
			other := c.ConflictWriter
			if other == "" {
				other = span.WriterUntraced
			}
			m.conflicts.WithLabelValues(s.Controller, other, resource).Inc()
		}
	}
	m.hot.observe(hotController{controller: s.Controller, namespace: wv[0], workload: wv[4]}, s.Namespace, s.Name)
	return nil
}

// Unnamed reports whether s is a reconcile of a process in a Kubernetes pod whose pod was not
// known: the process's cgroup gave a pod UID or container ID, the pod index had no pod for it.
func Unnamed(s *span.Span) bool {
	return s.Pod == "" && s.Workload != nil && (s.Workload.PodUID != "" || s.Workload.ContainerID != "")
}

// workloadLabels name the traced workload on every per-controller series.
var workloadLabels = []string{"k8s_namespace_name", "k8s_pod_name", "k8s_container_name", "service_name", "k8s_workload_name", "k8s_workload_kind"}

// workloadValues are the values of workloadLabels for s's process.
func workloadValues(s *span.Span) [6]string {
	podNS, pod, _ := strings.Cut(s.Pod, "/")
	v := [6]string{podNS, pod, s.Container}
	if w := s.Workload; w != nil {
		v[3], v[4], v[5] = w.ServiceName, w.Name, w.Kind
	}
	return v
}
