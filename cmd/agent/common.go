package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reconscope/reconscope/internal/cli"
	"github.com/reconscope/reconscope/pkg/agent"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/detail"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// tracerFlags are the flags shared by trace and run that shape the tracer.
type tracerFlags struct {
	ringSize *int
	abandon  *time.Duration
	single   *bool
	// fights: alternations of writers of one object within the window that make a fight
	fightAlts   *int
	fightWindow *time.Duration
	// hot loops: self-triggered reconciles or no-op writes of one object within the window
	hotLoopChain  *int
	hotLoopWindow *time.Duration
	extra         probeFlags
	goroutines    probes.Inheritance
	detail        probes.Detail
	detailFor     detailRules
	switchFor     *time.Duration
	switchMax     *int
	switchWhen    detail.SwitchWhen
	policy        *detail.Policy // detailPolicy's
	// file is the config file's detail section (run --config), whose fields win over the
	// flags'; reload says the file is reloaded while the agent runs (watchDetailConfig).
	file   *detail.Config
	reload bool
}

func addTracerFlags(fs *pflag.FlagSet) *tracerFlags {
	tf := &tracerFlags{
		ringSize: fs.Int("ring-buffer-size", 4<<20, "kernel ring buffer size in bytes (a power of two)"),
		abandon:  fs.Duration("abandon-after", 10*time.Minute, "close a reconcile whose return never came as abandoned after this long"),
		single:   fs.Bool("single-uprobes", false, "attach one uprobe per site even where the kernel has uprobe_multi links"),
		fightAlts: fs.Int("fight-alternations", span.DefaultFightAlternations,
			"report a controller fight when the writers of one object (one subresource) change this many times within --fight-window (0: off)"),
		fightWindow: fs.Duration("fight-window", span.DefaultFightWindow, "the window of --fight-alternations"),
		hotLoopChain: fs.Int("hot-loop-chain", span.DefaultHotLoopChain,
			"report a hot loop when one controller reconciles one object this many times in a row, each triggered by its own previous write, "+
				"or writes one object this many times without changing it, within --hot-loop-window (0: off)"),
		hotLoopWindow: fs.Duration("hot-loop-window", span.DefaultHotLoopWindow, "the window of --hot-loop-chain"),
	}
	addInheritanceFlag(fs, &tf.goroutines)
	addDetailFlag(fs, &tf.detail)
	fs.Var(&tf.detailFor, "detail-for", "the detail of the controllers a glob names, overriding --detail: 'GLOB=LEVEL' ('deployment=calls'; "+
		"repeatable, or comma-separated; the first match wins). Their calls probes are attached to each executable and record only in the "+
		"spans of controllers at calls (docs/probes.md, \"Per-controller detail\")")
	tf.switchMax = fs.Int("detail-switch-max", 0, "switch at most this many controllers at detail reconcile to calls at once, for "+
		"--detail-switch-for: automatically when one of their reconciles lasts --slow-threshold or more (and, in run with --metrics-secure, "+
		"on demand: POST /detail on the metrics port); 0 (the default): no switch")
	tf.switchFor = fs.Duration("detail-switch-for", detail.DefaultSwitchFor, "how long a switch to detail calls lasts (--detail-switch-max)")
	fs.Var(&tf.switchWhen, "detail-switch-when", "what --slow-threshold is held to for an automatic switch (--detail-switch-max): `reconcile` (the "+
		"default: one reconcile that lasts it) or p99 (the p99 of the controller's last 100 reconciles reaching it, taken once it has had 100: "+
		"one outlier does not switch it, a slow spell does)")
	fs.Var(&tf.extra, "probe", "trace a sync handler of your own: 'SYMBOL=controller:NAME[,key:SLOT][,err:SLOT]' (repeatable)")
	return tf
}

// newTracer loads the eBPF programs and returns a tracer writing to w. configure, when not
// nil, sets what the command decides besides the flags (proc root, admission at exec).
func (tf *tracerFlags) newTracer(w exporter.Writer, log *slog.Logger, clock ktime.Clock, configure func(*tracer.Options)) (*tracer.Tracer, error) {
	catalog := tf.goroutines.Catalog(append(probes.Catalog(), tf.extra...))
	opts := tracer.Options{
		Collector: collector.Options{RingBufferSize: *tf.ringSize, ForceSingleUprobes: *tf.single},
		Assembler: span.Options{AbandonAfter: *tf.abandon, FightAlternations: offWhenZero(*tf.fightAlts), FightWindow: *tf.fightWindow,
			HotLoopChain: offWhenZero(*tf.hotLoopChain), HotLoopWindow: *tf.hotLoopWindow},
		Writer:  w,
		Logger:  log,
		Clock:   clock,
		Catalog: tf.detail.Catalog(catalog),
	}
	if tf.policy != nil && tf.policy.Mixed() {
		opts.Detail = tf.policy
		opts.Catalog = probes.DetailReconcile.Catalog(catalog)
		opts.CallsCatalog = catalog
	}
	// And each inspection's: inspecting an executable runs code and reads tables of the
	// agent's own (ELF, DWARF, disassembly) that tracing it does not.
	opts.Inspected = func() { releaseExecutablePages(log) }
	if configure != nil {
		configure(&opts)
	}
	t, err := tracer.New(opts)
	if err != nil {
		return nil, err
	}
	// Start-up is done: the executable's pages it touched need not stay resident (issue 28, item 4).
	releaseExecutablePages(log)
	return t, nil
}

// releaseExecutablePages takes the agent's own executable's pages out of its address space
// (agent.ReleaseExecutablePages): those it runs again come back from the page cache.
func releaseExecutablePages(log *slog.Logger) {
	if n, err := agent.ReleaseExecutablePages(); err != nil {
		log.Debug("keep the executable's pages resident", "err", err)
	} else {
		log.Debug("released the executable's pages", "bytes", n)
	}
}

// detailPolicy makes the per-controller detail of the flags (--detail, --detail-for,
// --detail-switch-*) and of the config file's detail section (tf.file, whose fields win), slow
// the --slow-threshold that switches a controller, onSwitch what counts a switch. Call it
// before newTracer.
func (tf *tracerFlags) detailPolicy(slow time.Duration, log *slog.Logger, onSwitch func(controller string, to probes.Detail, why string)) error {
	if *tf.switchMax < 0 {
		return fmt.Errorf("--detail-switch-max %d: want 0 (no switch) or more", *tf.switchMax)
	}
	def, rules := tf.detail, []detail.Rule(tf.detailFor)
	if tf.file != nil {
		var err error
		if def, rules, err = tf.file.Levels(def, rules); err != nil {
			return err
		}
	}
	p, err := detail.New(detail.Options{
		Default:       def,
		Rules:         rules,
		Reload:        tf.reload,
		Switches:      *tf.switchMax > 0,
		SwitchWhen:    tf.switchWhen,
		SlowThreshold: slow,
		SwitchFor:     *tf.switchFor,
		MaxSwitched:   *tf.switchMax,
		Logger:        log.With("stage", "detail"),
		OnSwitch:      onSwitch,
	})
	if err != nil {
		return err
	}
	tf.policy = p
	return nil
}

// detailRules collects --detail-for values.
type detailRules []detail.Rule

func (d *detailRules) String() string {
	out := make([]string, len(*d))
	for i, r := range *d {
		out[i] = r.Pattern + "=" + r.Detail.String()
	}
	return strings.Join(out, ",")
}

// Type is what --help shows of the value.
func (d *detailRules) Type() string { return "GLOB=LEVEL" }

func (d *detailRules) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		r, err := detail.ParseRule(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		*d = append(*d, r)
	}
	return nil
}

// addInheritanceFlag adds --goroutine-inheritance (trace, run and inspect).
func addInheritanceFlag(fs *pflag.FlagSet, i *probes.Inheritance) {
	fs.Var(i, "goroutine-inheritance", "whether goroutines a reconcile starts join its span, `auto` or off: auto (the default) puts "+
		"their API calls and cache reads in it, and every goroutine created and ended in a traced process hits a probe; off attaches "+
		"no probe at goroutine creation and exit, and calls made on goroutines a reconcile starts are then in no span (calls on its "+
		"own goroutine are unchanged)")
}

// addDetailFlag adds --detail (trace, run and inspect), reconcile by default.
func addDetailFlag(fs *pflag.FlagSet, d *probes.Detail) {
	*d = probes.DetailReconcile
	fs.Var(d, "detail", "how much of each reconcile to probe, `reconcile` or calls: reconcile (the default) probes its start and end, "+
		"its result, its queue adds and the read of its object (controller, object, UID and resourceVersion, result, error, queue wait, "+
		"trigger: three emulated probe hits per reconcile that reads its object once; a work-queue item, kube-controller-manager's, "+
		"two, its result what its worker did, no error type); calls also probes its API calls and cache and "+
		"lister reads (children, phases, fights; kube-controller-manager's lister reads give the object's UID), kube-controller-manager's "+
		"sync handlers (their error) and the goroutines it starts, at more probe hits per call, some single-stepped (docs/probes.md, "+
		"\"Detail levels\"). In run, the config file's detail section wins over it and --detail-for, and is reloaded")
}

// completeTracerFlags lets a shell complete the values of --detail, --detail-switch-when and
// --goroutine-inheritance (trace, run and inspect).
func completeTracerFlags(cmd *cobra.Command) {
	cli.Complete(cmd, "detail", probes.DetailReconcile.String(), probes.DetailCalls.String())
	cli.Complete(cmd, "goroutine-inheritance", probes.InheritAuto.String(), probes.InheritOff.String())
	if cmd.Flags().Lookup("detail-switch-when") != nil { // trace and run; inspect has no switch
		cli.Complete(cmd, "detail-switch-when", detail.SwitchWhenReconcile.String(), detail.SwitchWhenP99.String())
	}
}

// offWhenZero turns --fight-alternations and --hot-loop-chain into span.Options'
// FightAlternations and HotLoopChain (where 0 means the default and a negative value turns
// detection off).
func offWhenZero(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// probeFlags collects repeated --probe flags.
type probeFlags []*probes.Probe

func (p *probeFlags) String() string {
	names := make([]string, len(*p))
	for i, pr := range *p {
		names[i] = pr.ID
	}
	return strings.Join(names, ",")
}

// Type is what --help shows of the value.
func (p *probeFlags) Type() string { return "SYMBOL=controller:NAME" }

func (p *probeFlags) Set(v string) error {
	pr, err := probes.ParseSyncProbe(v)
	if err != nil {
		return err
	}
	*p = append(*p, pr)
	return nil
}

// selectSyncHandlers leaves out of catalog the sync-handler probes whose controller
// controllers does not select (probes.SelectSyncHandlers), and says which in one log line.
func selectSyncHandlers(catalog []*probes.Probe, controllers discovery.Controllers, log *slog.Logger) []*probes.Probe {
	kept, left := probes.SelectSyncHandlers(catalog, controllers.Selects)
	if len(left) > 0 {
		log.Info("sync handlers not attached: their controller is not selected (--controller)", "probes", strings.Join(left, ","))
	}
	return kept
}

// oneProcessor runs the agent's goroutines on one processor (GOMAXPROCS=1) unless the
// environment sets GOMAXPROCS. The agent's work comes in short bursts (a ring buffer drain, a
// span written, a scrape): with a second processor the runtime wakes another thread for each
// goroutine made ready and lets it spin looking for work, which cost more than the work itself
// (kube-controller-manager at 500 Deployments, side by side: BENCHMARKS.md section 5).
// Inspections follow it, one at a time (tracer.Options.Inspections). Only for run and trace, the
// commands that stay (args: the command line after the program's name), and from main, not
// from run: tests call run in their own process.
func oneProcessor(args []string) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			if a == "run" || a == "trace" {
				runtime.GOMAXPROCS(1)
			}
			return
		}
	}
}
