package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/symbols"
	"github.com/reconscope/reconscope/pkg/tracer"
)

const runSummary = `Usage: reconscope-agent run [flags]

The node agent (the DaemonSet's entrypoint): finds every Go controller process on this node
by scanning /proc (at once when a process execs, from the sched_process_exec raw tracepoint,
and every --scan-interval), traces those the probe catalog supports (one attach per executable, shared
by its processes; a new process of an attached executable is traced from its exec, in the kernel,
also one that restarts within --keep-attached of its executable's last process), names their pod and container from a pod informer limited to this node
(needs get/list/watch on pods; without API access it keeps tracing with host-only metadata
and says so once; a process in a pod the informer does not hold is another node's, where
nodes share one kernel as on kind, and left to that node's agent), serves Prometheus metrics, health and its last spans (GET /spans,
--recent-spans: what kubectl reconscope tail reads) on --metrics-addr (with
--metrics-secure: HTTPS, /metrics and /spans only for bearer tokens the API server allows to
get them), and sends spans
over OTLP when an endpoint is configured (--otlp-endpoint or the OTEL_EXPORTER_OTLP_*
variables; an endpoint on port 4317 means gRPC unless a protocol is set;
OTEL_TRACES_EXPORTER=otlp|console|none and OTEL_SDK_DISABLED=true are honoured). SIGTERM detaches every probe, flushes spans and exits 0. On a kernel below
reconscope's floor (Linux 5.15) it traces nothing, says which feature is missing once, and
stays up with /readyz answering 503 and the reason, and /metrics serving
reconscope_tracing{reason="kernel_below_floor"} 0 (1 when it traces).

Every flag can also be set in the environment as RECONSCOPE_<FLAG>, upper case with '_' for
'-' (RECONSCOPE_METRICS_ADDR=:9464); a flag on the command line wins. Which processes are
traced can be narrowed with --config, a YAML file of include/exclude rules on namespace, pod
labels, container name and executable, and which of their controllers' spans are kept by
controller name (docs/daemonset.md).`

func runRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", runSummary, stdout, stderr)
	procRoot := fs.String("proc-root", discovery.DefaultProcRoot, "where the host's /proc is mounted (hostPID: /proc)")
	interval := fs.Duration("scan-interval", discovery.DefaultScanInterval, "how often /proc is scanned for new and exited processes (an exec anywhere on the node also prompts a scan)")
	configPath := fs.String("config", "", "YAML file selecting the processes to trace (include/exclude rules; docs/daemonset.md)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for the pod informer (default: in-cluster config; none: host-only metadata)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logFormat := fs.String("log-format", "auto", "log format: text, json, or auto (json when stderr is not a terminal)")
	output := fs.String("output", "none", "also write each reconcile to stdout: none or json (JSON lines, docs/json.md)")
	metricsSecure := fs.Bool("metrics-secure", false, "serve the metrics endpoint over HTTPS, /metrics only to a bearer token the API server authenticates (TokenReview) and authorizes for get on /metrics (SubjectAccessReview); /healthz and /readyz stay open (docs/daemonset.md)")
	metricsCert := fs.String("metrics-cert-file", "", "with --metrics-secure: PEM certificate of the metrics endpoint, reloaded when it changes (default: self-signed, made at start)")
	metricsKey := fs.String("metrics-key-file", "", "with --metrics-secure: PEM key of --metrics-cert-file")
	keep := fs.Duration("keep-attached", tracer.DefaultGrace, "how long an executable stays attached after its last traced process exits, "+
		"so that a restarted or crash-looping process of it is traced from its exec, first reconciles included (0: detach with the last process)")
	tf := addTracerFlags(fs.FlagSet)
	ef := addExportFlags(fs.FlagSet, ":9464")
	pprofAddr := addPprofFlag(fs.FlagSet)
	if err := flagsFromEnv(fs.FlagSet, os.LookupEnv); err != nil {
		return usageError(stderr, "run", "%v", err)
	}
	if code, exit := fs.ParseArgs(args); exit {
		return code
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return usageError(stderr, "run", "%v", err)
	}
	var filter *discovery.Filter
	if *configPath != "" {
		cfg, err := discovery.LoadConfig(*configPath)
		if err == nil {
			filter, err = discovery.NewFilter(cfg)
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
	t, err := tf.newTracer(exp.writer, log, clock, func(o *tracer.Options) {
		o.ProcRoot = *procRoot
		// A new process of an executable already attached is traced from its exec, in the
		// kernel; here it gets its pod metadata, or is let go when the filter excludes it.
		o.AdmitExecs = true
		o.Grace = *keep
		if o.Grace <= 0 {
			o.Grace = -1 // detach with the last process
		}
		o.Admit = func(pid int) (tracer.ProcessMeta, bool) {
			p, err := discovery.ReadProcess(*procRoot, pid)
			if err != nil {
				return tracer.ProcessMeta{}, filter == nil // gone already: kept unless rules must decide
			}
			target, ours := ownTarget(ctx, p, index)
			if !ours {
				log.Debug("not traced: its pod is not on this node", "pid", pid, "exe", p.Exe, "pod_uid", p.Container.PodUID)
				return tracer.ProcessMeta{}, false
			}
			return metaOf(target, filter), filter.Match(target)
		}
	})
	if errors.Is(err, collector.ErrBelowFloor) {
		return waitBelowFloor(ctx, err, *ef.metricsAddr, sec, exp.metrics, log)
	}
	if err != nil {
		return failed(log, "load eBPF programs", err)
	}
	exp.setTracer(t)
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
	execs, err := t.WatchExecs(ctx)
	if err != nil {
		log.Warn("no exec notifications: new processes are found by the /proc scan only", "interval", *interval, "err", err)
	}
	watcher := discovery.NewWatcher(discovery.WatcherOptions{ProcRoot: *procRoot, Interval: *interval, Execs: execs, Logger: log})
	go func() {
		if err := watcher.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("process scan", "err", err)
		}
	}()
	go attachLoop(ctx, t, watcher, index, filter, log)

	log.Info("reconscope agent running", "version", agentBuild().Version, "revision", agentBuild().Revision, "node", *ef.nodeName, "metrics", *ef.metricsAddr, "span_exporters", exp.spanExporters)
	if err := t.Run(ctx); err != nil {
		return failed(log, "read events", err)
	}
	dropped := exp.closeOutput()
	st := t.Stats()
	log.Info("stopped", "reconciles", st.Assembler.Spans, "events", st.Reader.Events, "lost", st.Kernel.LostRingBuffer, "output_dropped", dropped)
	return 0
}

// targetOf is what the filter decides on for process p: the process and its pod, when known.
func targetOf(p discovery.Process, index *discovery.PodIndex) discovery.Target {
	target := discovery.Target{Process: p}
	if pod, ok := index.Lookup(p.Container.ID); ok {
		target.Pod = &pod
	} else if pod, ok := index.LookupPod(p.Container.PodUID); ok {
		target.Pod = &pod
	}
	return target
}

// ownPodWait bounds how long a process admitted at exec whose pod the pod index does not hold
// waits for the index to learn of it, before it is taken for another node's process.
const ownPodWait = 2 * time.Second

// ownTarget is targetOf for a process admitted at exec, and whether it is this node's: a
// process in a pod the index does not hold is given ownPodWait for the index to learn of the
// pod (the kubelet and the index hear of it from the same watch), then taken for another
// node's (several nodes on one kernel: discovery.PodIndex.OtherNode).
func ownTarget(ctx context.Context, p discovery.Process, index *discovery.PodIndex) (discovery.Target, bool) {
	deadline := time.Now().Add(ownPodWait)
	for {
		target := targetOf(p, index)
		if target.Pod != nil || !index.OtherNode(p.Container) {
			return target, true
		}
		if time.Now().After(deadline) {
			return target, false
		}
		select {
		case <-ctx.Done():
			return target, false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metaOf is what the spans of target carry, and the controllers of it the filter selects.
func metaOf(target discovery.Target, filter *discovery.Filter) tracer.ProcessMeta {
	m := processMeta(target.Pod, target.Process.Container)
	if c := filter.ControllersOf(target); !c.All() {
		m.Controllers = c
	}
	return m
}

// attached is the outcome of tracing one process the watcher found.
type attached struct {
	p    discovery.Process
	meta tracer.ProcessMeta
	plan *probes.Plan
	err  error
}

// podIndexSyncWait bounds how long attachLoop waits for the pod index's first list of this
// node's pods before it looks at processes, so that another node's pods (several nodes on one
// kernel) are known for what they are from the first scan. Without API access it goes on after
// this wait, and traces every process with host-only metadata.
const podIndexSyncWait = 10 * time.Second

// attachLoop traces the processes the watcher finds, when their binary has code the catalog
// knows, they run outside Kubernetes or in a pod of this node, and the filter selects them.
// Each process is traced on its own goroutine: one waits only for the inspection of its own
// executable (the tracer bounds how many run at once), never for another's.
func attachLoop(ctx context.Context, t *tracer.Tracer, w *discovery.Watcher, index *discovery.PodIndex, filter *discovery.Filter, log *slog.Logger) {
	self := os.Getpid()
	untraceable := map[proc.StatFileID]bool{} // executables with nothing to trace: skip quickly
	// Traced processes whose container the pod index did not know yet (the kubelet writes a
	// container's ID into the pod status after the container starts): looked up again.
	unnamed := map[int]discovery.Process{}
	// Processes in pods the index does not hold (another node's, on a shared kernel): looked
	// up again, traced if their pod turns out to be this node's.
	elsewhere := map[int]discovery.Process{}
	results := make(chan attached)
	trace := func(p discovery.Process, target discovery.Target) {
		go func() {
			plan, err := t.TracePID(p.PID)
			select {
			case results <- attached{p: p, meta: metaOf(target, filter), plan: plan, err: err}:
			case <-ctx.Done():
			}
		}()
	}
	synced, cancel := context.WithTimeout(ctx, podIndexSyncWait)
	index.WaitSynced(synced)
	cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		var ev discovery.Event
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			for pid, p := range unnamed {
				if pod, ok := index.Lookup(p.Container.ID); ok {
					// the pod decides the rules on it now, controllers' rules too
					t.SetProcessMeta(pid, metaOf(discovery.Target{Process: p, Pod: &pod}, filter))
					delete(unnamed, pid)
				} else if index.OtherNode(p.Container) {
					// traced before the index could tell (no API access at the start)
					t.UntracePID(pid)
					delete(unnamed, pid)
					elsewhere[pid] = p
					log.Info("stopped tracing: its pod is not on this node", "pid", pid, "exe", p.Exe, "pod_uid", p.Container.PodUID)
				}
			}
			for pid, p := range elsewhere {
				if index.OtherNode(p.Container) {
					continue
				}
				delete(elsewhere, pid)
				if target := targetOf(p, index); filter.Match(target) {
					trace(p, target)
				}
			}
			continue
		case r := <-results:
			p := r.p
			if r.err != nil {
				if errors.Is(r.err, symbols.ErrNotGo) || errors.Is(r.err, symbols.ErrNotELF) || errors.Is(r.err, probes.ErrNothingToTrace) || errors.Is(r.err, symbols.ErrUnsupportedGo) {
					untraceable[p.ExeID] = true
					log.Debug("not traced", "pid", p.PID, "exe", p.Exe, "reason", r.err)
					continue
				}
				log.Warn("cannot trace", "pid", p.PID, "exe", p.Exe, "err", r.err)
				continue
			}
			if p.Container.ID != "" && r.meta.Container == "" {
				unnamed[p.PID] = p
			}
			t.SetProcessMeta(p.PID, r.meta)
			log.Info("tracing", "pid", p.PID, "exe", p.Exe, "pod", r.meta.Pod, "container", r.meta.Container, "probes", r.plan.Probes())
			continue
		case ev = <-w.Events():
		}
		if exited, ok := ev.(discovery.Exited); ok {
			delete(unnamed, exited.PID) // the tracer notices exits itself and closes their spans
			delete(elsewhere, exited.PID)
			continue
		}
		started, ok := ev.(discovery.Started)
		if !ok {
			continue
		}
		p := started.Process
		if p.PID == self || untraceable[p.ExeID] {
			continue
		}
		target := targetOf(p, index)
		if target.Pod == nil && index.OtherNode(p.Container) {
			elsewhere[p.PID] = p
			log.Debug("not traced: its pod is not on this node", "pid", p.PID, "exe", p.Exe, "pod_uid", p.Container.PodUID)
			continue
		}
		if !filter.Match(target) {
			continue
		}
		trace(p, target)
	}
}

// kubeClient returns a client for the pod informer, or nil (host-only metadata) when there is
// no configuration; the PodIndex says so once.
func kubeClient(kubeconfig string, log *slog.Logger) kubernetes.Interface {
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
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Warn("Kubernetes client", "err", err)
		return nil
	}
	return c
}

// flagsFromEnv sets every flag named in the environment as RECONSCOPE_<FLAG>.
func flagsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "RECONSCOPE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(name); ok && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	return err
}
