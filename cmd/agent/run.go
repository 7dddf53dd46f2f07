package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/reconscope/reconscope/internal/cli"
	"github.com/reconscope/reconscope/pkg/agent"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/kubeapi"
	"github.com/reconscope/reconscope/pkg/tracer"
)

const runSummary = `Usage: reconscope-agent run [flags]

The node agent (the DaemonSet's entrypoint): finds every Go controller process on this node
by reading each process that execs as it does (from the sched_process_exec raw tracepoint)
and scanning /proc every --scan-interval, traces those the probe catalog supports (one attach per executable, shared
by its processes; a new process of an attached executable is traced from its exec, in the kernel,
also one that restarts within --keep-attached of its executable's last process), names their pod and container from a pod informer limited to this node
(needs get/list/watch on pods; without API access it keeps tracing with host-only metadata
and says so once; a process in a pod the informer does not hold is another node's, where
nodes share one kernel as on kind, and left to that node's agent, except while the API server
does not answer: then it is traced with host-only metadata and named once the pod is listed), serves Prometheus metrics, health and its last spans (GET /spans,
--recent-spans: what kubectl reconscope tail reads) on --metrics-addr (with
--metrics-secure: HTTPS, /metrics and /spans only for bearer tokens the API server allows to
get them), and sends spans
over OTLP when an endpoint is configured (--otlp-endpoint or the OTEL_EXPORTER_OTLP_*
variables; an endpoint on port 4317 means gRPC unless a protocol is set;
OTEL_TRACES_EXPORTER=otlp|console|none and OTEL_SDK_DISABLED=true are honoured). SIGTERM detaches every probe, flushes spans and exits 0. On a kernel below
reconscope's floor (Linux 5.15) it traces nothing, says which feature is missing once, and
stays up with /readyz answering 503 and the reason, and /metrics serving
reconscope_tracing{reason="kernel_below_floor"} 0 (1 when it traces).

Which processes are traced can be narrowed with --config, a YAML file of include/exclude rules
on namespace, pod labels, container name and executable, and which of their controllers' spans
are kept by controller name (docs/daemonset.md). The file sets no flag but one pair: its detail
section (detail: {default: LEVEL, controllers: [{controller: GLOB, detail: LEVEL}]}) sets
--detail and --detail-for, winning over them, and is reloaded while the agent runs (read every
2s): the reconciles in flight keep the level they began with (docs/probes.md, "Per-controller
detail"); include and exclude are read at start. The environment can set every flag
(Environment, below).`

func runCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := newCommand("run", runSummary)
	fs := cmd.Flags()
	procRoot := fs.String("proc-root", discovery.DefaultProcRoot, "where the host's /proc is mounted (hostPID: /proc)")
	interval := fs.Duration("scan-interval", 0, fmt.Sprintf("how often /proc is scanned in full, for exits and for processes exec notifications missed (0: %s with the sched_process_exec notifications, which read each exec'd process at once; %s without them)", discovery.DefaultExecScanInterval, discovery.DefaultScanInterval))
	configPath := fs.String("config", "", "YAML file selecting the processes to trace (include/exclude rules; docs/daemonset.md)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for the pod informer (default: in-cluster config; none: host-only metadata)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logFormat := fs.String("log-format", "auto", "log format: text, json, or auto (json when stderr is not a terminal)")
	output := fs.StringP("output", "o", "none", "also write each reconcile to stdout: none or json (JSON lines, docs/json.md)")
	metricsSecure := fs.Bool("metrics-secure", false, "serve the metrics endpoint over HTTPS, /metrics only to a bearer token the API server authenticates (TokenReview) and authorizes for get on /metrics (SubjectAccessReview); /healthz and /readyz stay open (docs/daemonset.md)")
	metricsCert := fs.String("metrics-cert-file", "", "with --metrics-secure: PEM certificate of the metrics endpoint, reloaded when it changes (default: self-signed, made at start)")
	metricsKey := fs.String("metrics-key-file", "", "with --metrics-secure: PEM key of --metrics-cert-file")
	keep := fs.Duration("keep-attached", tracer.DefaultGrace, "how long an executable stays attached after its last traced process exits, "+
		"so that a restarted or crash-looping process of it is traced from its exec, first reconciles included (0: detach with the last process)")
	tf := addTracerFlags(fs)
	ef := addExportFlags(fs, ":9464")
	pprofAddr := addPprofFlag(fs)
	cli.Complete(cmd, "output", "none", "json")
	cli.Complete(cmd, "log-level", logLevels...)
	cli.Complete(cmd, "log-format", logFormats...)
	completeTracerFlags(cmd)
	completeExportFlags(cmd)
	cli.FromEnv(cmd, envPrefix, os.LookupEnv)
	cmd.RunE = cli.RunE(func([]string) int {
		log, err := newLogger(stderr, *logLevel, *logFormat)
		if err != nil {
			return usageError(stderr, "run", "%v", err)
		}
		var filter *discovery.Filter
		var detailSeen []byte
		if *configPath != "" {
			cfg, err := discovery.LoadConfig(*configPath)
			if err == nil {
				filter, err = discovery.NewFilter(cfg)
			}
			if err == nil {
				// Its detail section wins over --detail and --detail-for, and is reloaded.
				tf.file, detailSeen, err = loadDetailConfig(*configPath)
				tf.reload = true
			}
			if err != nil {
				return usageError(stderr, "run", "--config: %v", err)
			}
		}

		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		clock := ktime.NewClock()
		var out exporter.Writer
		switch *output {
		case "none":
		case "json":
			out = exporter.NewJSONWriter(stdout, clock)
		default:
			return usageError(stderr, "run", "--output %q: want none or json", *output)
		}
		kube := kubeClient(*kubeconfig, log)
		var sec *metricsSecurity
		if *metricsSecure && *ef.metricsAddr != "" {
			if sec, err = newMetricsSecurity(kube, *metricsCert, *metricsKey, log); err != nil {
				return usageError(stderr, "run", "--metrics-secure: %v", err)
			}
		}
		index, err := discovery.NewPodIndex(discovery.PodIndexOptions{Client: kube, NodeName: *ef.nodeName, Logger: log})
		if err != nil {
			return usageError(stderr, "run", "pod metadata: %v", err)
		}
		exp, err := ef.build(ctx, log, clock, out)
		if err != nil {
			return usageError(stderr, "run", "%v", err)
		}
		defer exp.close()
		if err := tf.detailPolicy(*ef.slow, log, exp.detailSwitched); err != nil {
			return usageError(stderr, "run", "%v", err)
		}
		// One decision on every process, found by the /proc scan or admitted at its exec.
		admission := &agent.Admission{ProcRoot: *procRoot, Pods: index, Filter: filter}
		t, err := tf.newTracer(exp.writer, log, clock, func(o *tracer.Options) {
			o.ProcRoot = *procRoot
			// A new process of an executable already attached is traced from its exec, in the
			// kernel; here it gets its pod metadata, or is let go when the filter excludes it.
			o.AdmitExecs = true
			o.Grace = *keep
			if o.Grace <= 0 {
				o.Grace = -1 // detach with the last process
			}
			o.Admit = admission.AdmitExec
		})
		if errors.Is(err, collector.ErrBelowFloor) {
			return waitBelowFloor(ctx, err, *ef.metricsAddr, sec, exp.metrics, log)
		}
		if err != nil {
			return failed(log, "load eBPF programs", err)
		}
		exp.addSelfStats(agent.SelfStats(t))
		if exp.metrics != nil {
			exp.metrics.SetTracing("")
		}
		defer t.Close()
		if sec != nil && tf.policy != nil && *tf.switchMax > 0 {
			exp.handlers = map[string]http.Handler{detailPath: detailHandler(tf.policy, t.HasController, log)}
		}
		if err := exp.serve(*ef.metricsAddr, sec, log); err != nil {
			return failed(log, "serve metrics", err)
		}
		if srv, err := servePprof(*pprofAddr, log); err != nil {
			return failed(log, "serve pprof", err)
		} else if srv != nil {
			defer srv.Close()
		}

		go func() { _ = index.Run(ctx) }()
		if tf.reload {
			go watchDetailConfig(ctx, *configPath, detailSeen, tf.detail, tf.detailFor, tf.policy, log)
		}
		execs, err := t.WatchExecs(ctx)
		if *interval <= 0 {
			*interval = discovery.DefaultExecScanInterval
			if err != nil {
				*interval = discovery.DefaultScanInterval
			}
		}
		if err != nil {
			log.Warn("no exec notifications: new processes are found by the /proc scan only", "interval", *interval, "err", err)
		}
		go agent.NewLoop(agent.Options{Tracer: t, Admission: admission, Interval: *interval, Execs: execs, Logger: log}).Run(ctx)

		log.Info("reconscope agent running", "version", agentBuild().Version, "revision", agentBuild().Revision, "node", *ef.nodeName, "metrics", *ef.metricsAddr, "span_exporters", exp.spanExporters)
		if err := t.Run(ctx); err != nil {
			return failed(log, "read events", err)
		}
		dropped := exp.closeOutput()
		st := t.Stats()
		log.Info("stopped", "reconciles", st.Assembler.Spans, "events", st.Reader.Events, "lost", st.Kernel.LostRingBuffer, "output_dropped", dropped)
		return 0
	})
	return cmd
}

// kubeClient returns a client for the pod informer, or nil (host-only metadata) when there is
// no configuration; the PodIndex says so once. It returns an interface so that no client is a
// nil PodIndexOptions.Client and reviewer, not a nil *kubeapi.Client in a non-nil interface.
func kubeClient(kubeconfig string, log *slog.Logger) kubeapi.Interface {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		log.Debug("no Kubernetes client configuration", "reason", err) // the pod index says it once
		return nil
	}
	cfg.UserAgent = "reconscope-agent/" + agentBuild().Version
	c, err := kubeapi.NewForConfig(cfg)
	if err != nil {
		log.Warn("Kubernetes client", "err", err)
		return nil
	}
	return c
}
