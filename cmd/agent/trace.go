package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconscope/reconscope/internal/cli"
	"github.com/reconscope/reconscope/pkg/agent"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/tracer"
)

const traceSummary = `Usage: reconscope-agent trace (--pid PID[,PID...] | --exe PATH) [flags]

Traces running Go controllers (controller-runtime managers) and prints one entry per
reconcile: a live tree on a terminal, or with -o json one JSON object per line (schema in
docs/json.md). Ctrl-C detaches the probes, prints a summary (reconciles by controller and
result, events lost, goroutines that joined a reconcile's span) to stderr and exits 0. Needs root (or the capabilities listed by
'reconscope-agent --help').

With --exe, every process running that executable is traced, including ones started later,
from their first instruction (the executable is attached before they start).

Besides controller-runtime's Reconcile (every controller of a manager), the API calls made
inside it (client-go requests, controller-runtime cache reads, also from goroutines the
reconcile starts, unless --goroutine-inheritance=off), and kube-controller-manager's sync
handlers, any client-go style sync handler of your own can be traced with --probe
(docs/probes.md):

  --probe 'example.com/op/pkg/ctl.(*Controller).syncHandler=controller:widgets'
  --probe 'SYMBOL=controller:NAME,key:SLOT,err:SLOT'   (register slots; defaults key:3, err:0)

--controller NAME (repeatable, a glob) keeps the spans of those controllers only, by the name
a span carries (a work queue's name, a controller-runtime controller's name):
--controller deployment --controller 'replica*'. Another controller's items are dropped by
the agent until it has read the first; later ones cost no record (the kernel skips them); sync
handlers of other controllers are not attached (docs/local-tracing.md).`

func traceCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := newCommand("trace", traceSummary)
	fs := cmd.Flags()
	pids := fs.String("pid", "", "comma-separated process IDs to trace")
	exe := fs.String("exe", "", "trace every process running this executable, now and later")
	output := fs.StringP("output", "o", "tree", "output format: tree or json (JSON lines, docs/json.md)")
	duration := fs.Duration("duration", 0, "stop after this long (0: until Ctrl-C or SIGTERM)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	var controllers stringsFlag
	fs.Var(&controllers, "controller", "trace only this controller, by the name its spans carry; a glob such as 'replica*' (repeatable; default: every controller)")
	tf := addTracerFlags(fs)
	ef := addExportFlags(fs, "")
	pprofAddr := addPprofFlag(fs)
	cli.Complete(cmd, "output", "tree", "json")
	cli.Complete(cmd, "log-level", logLevels...)
	completeTracerFlags(cmd)
	completeExportFlags(cmd)
	cli.FromEnv(cmd, envPrefix, os.LookupEnv)
	cmd.RunE = cli.RunE(func([]string) int {
		if (*pids == "") == (*exe == "") {
			return usageError(stderr, "trace", "give exactly one of --pid or --exe (see --help)")
		}
		log, err := newLogger(stderr, *logLevel, "text")
		if err != nil {
			return usageError(stderr, "trace", "%v", err)
		}
		selected, err := discovery.NewControllers(controllers, nil)
		if err != nil {
			return usageError(stderr, "trace", "--controller: %v", err)
		}
		clock := ktime.NewClock()
		var w exporter.Writer
		switch *output {
		case "tree":
			w = exporter.NewTreeWriter(stdout, clock)
		case "json":
			w = exporter.NewJSONWriter(stdout, clock)
		default:
			return usageError(stderr, "trace", "--output %q: want tree or json", *output)
		}
		summary := exporter.NewSummary()

		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		exp, err := ef.build(ctx, log, clock, w, summary)
		if err != nil {
			return usageError(stderr, "trace", "%v", err)
		}
		defer exp.close()
		if err := tf.detailPolicy(*ef.slow, log, exp.detailSwitched); err != nil {
			return usageError(stderr, "trace", "%v", err)
		}
		// With --exe, a process that starts later is traced from its exec, in the kernel.
		t, err := tf.newTracer(exp.writer, log, clock, func(o *tracer.Options) {
			o.AdmitExecs = *exe != ""
			if !selected.All() {
				o.Controllers = selected
				o.Catalog = selectSyncHandlers(o.Catalog, selected, log)
			}
		})
		if err != nil {
			return failed(log, "load eBPF programs", err)
		}
		exp.addSelfStats(agent.SelfStats(t))
		defer t.Close()
		if err := exp.serve(*ef.metricsAddr, nil, log); err != nil {
			return failed(log, "serve metrics", err)
		}
		if srv, err := servePprof(*pprofAddr, log); err != nil {
			return failed(log, "serve pprof", err)
		} else if srv != nil {
			defer srv.Close()
		}
		if *duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *duration)
			defer cancel()
		}

		traced := 0
		if *pids != "" {
			for _, s := range strings.Split(*pids, ",") {
				pid, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || pid <= 0 {
					return usageError(stderr, "trace", "--pid %q: not a process ID", s)
				}
				if _, err := t.TracePID(pid); err != nil {
					log.Error("cannot trace", "pid", pid, "err", err)
					continue
				}
				traced++
			}
			if traced == 0 {
				return failed(log, "no process could be traced", errors.New("every --pid failed (above)"))
			}
		} else {
			path, err := filepath.Abs(*exe)
			if err != nil {
				return usageError(stderr, "trace", "--exe: %v", err)
			}
			want, err := proc.StatFile(path)
			if err != nil {
				return failed(log, "--exe", err)
			}
			// Attached now, before any process runs it: each process that execs it is traced
			// from its first instruction; those running it already are found by the loop below.
			if _, err := t.AttachExe(path); err != nil {
				return failed(log, "--exe", err)
			}
			execs, err := t.WatchExecs(ctx)
			if err != nil {
				log.Warn("no exec notifications: processes that start later are traced once found, within half a second", "err", err)
			}
			// The loop run uses, deciding by executable alone: every process running it, now and as
			// they start, found by the /proc scan every half second and at each exec.
			admission := &agent.Admission{Exe: &want}
			go agent.NewLoop(agent.Options{Tracer: t, Admission: admission, Interval: 500 * time.Millisecond, Execs: execs, Logger: log}).Run(ctx)
		}

		err = t.Run(ctx)
		dropped := exp.closeOutput()
		st := t.Stats()
		fmt.Fprintf(stderr, "\nreconscope: %d reconciles\n", st.Assembler.Spans)
		summary.Print(stderr)
		fmt.Fprintf(stderr, "events: %d read, %d lost (ring buffer full), %d malformed; spans abandoned: %d, orphan returns: %d\n",
			st.Reader.Events, st.Kernel.LostRingBuffer, st.Reader.Malformed, st.Assembler.Abandoned, st.Assembler.OrphanReturns)
		fmt.Fprintf(stderr, "probe hits: %d in traced processes\n", st.Kernel.Hits)
		if !selected.All() {
			fmt.Fprintf(stderr, "controllers not selected: %d items skipped by the kernel (no record), %d dropped by the agent\n",
				st.Kernel.Excluded, st.Excluded)
		}
		if st.Kernel.Handed > 0 || st.Assembler.Handoffs > 0 {
			fmt.Fprintf(stderr, "work-queue items handed to another goroutine: %d, %d of them paired with their Done, %d lost (item identity unknown)\n",
				st.Kernel.Handed, st.Assembler.Handoffs, st.Assembler.HandoffsLost)
		}
		if dropped > 0 {
			fmt.Fprintf(stderr, "output: %d spans not written (standard output did not keep up)\n", dropped)
		}
		if tf.goroutines != probes.InheritOff {
			fmt.Fprintf(stderr, "goroutines started inside a reconcile (their calls are in its span): %d\n", st.Kernel.Inherited)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			return failed(log, "read events", err)
		}
		return 0
	})
	return cmd
}
