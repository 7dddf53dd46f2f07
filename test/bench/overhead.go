package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// overhead measures what a traced process pays per reconcile (DESIGN.md §6).
func overhead(args []string) error {
	fs := flag.NewFlagSet("overhead", flag.ExitOnError)
	o := &overheadBench{}
	o.register(fs)
	harness := fs.String("harness", "", "reconcileloop binary")
	otelHarness := fs.String("otel-harness", "", "reconcileloop built with -tags otel")
	rounds := fs.Int("rounds", 7, "rounds; each runs every configuration once")
	statsRounds := fs.Int("stats-rounds", 5, "rounds with the kernel's eBPF statistics on, for the programs' own run time")
	nTraced := fs.Int("n-traced", 10000, "reconciles per traced run")
	ring := fs.Int("ring-buffer", 4<<20, "ring-buffer size of the traced runs (the collector's default)")
	nUntraced := fs.Int("n-untraced", 2000000, "reconciles per untraced run")
	nOtel := fs.Int("n-otel", 100000, "reconciles per OpenTelemetry run")
	variants := fs.Bool("record-variants", true, "also measure what a record costs, taken apart (empty.bpf.c's rec_* programs, in the kernel-stats rounds)")
	warmRuns := fs.Bool("warm", true, "also measure reconscope's program where the TLB survives the trap: attached a second time at the same sites, in the kernel-stats rounds (uprobe_multi only)")
	fs.Parse(args)
	if *harness == "" || *otelHarness == "" {
		return fmt.Errorf("-harness and -otel-harness are required")
	}

	recon, call, err := spanAndCallProbes()
	if err != nil {
		return err
	}
	get, err := cacheGetProbe()
	if err != nil {
		return err
	}
	bin, err := symbols.Open(*harness)
	if err != nil {
		return err
	}
	plan, err := probes.NewPlan(bin, []*probes.Probe{recon, call, get})
	bin.Close()
	if err != nil {
		return fmt.Errorf("plan for the harness: %w", err)
	}
	var reconEntry, reconRets, callSites, getSites, allSites []uint64
	for _, s := range plan.Sites {
		if s.Probe != get {
			allSites = append(allSites, s.FileOffset)
		}
		switch {
		case s.Probe == recon && s.Kind == probes.SiteEntry:
			reconEntry = append(reconEntry, s.FileOffset)
		case s.Probe == recon:
			reconRets = append(reconRets, s.FileOffset)
		case s.Probe == call:
			callSites = append(callSites, s.FileOffset)
		default:
			getSites = append(getSites, s.FileOffset)
		}
	}
	if len(reconEntry) != 1 || len(reconRets) == 0 || len(callSites) < 2 || len(getSites) < 2 {
		return fmt.Errorf("unexpected plan for the harness: %s", plan)
	}
	reconSites := append(append([]uint64{}, reconEntry...), reconRets...)

	o.ring = *ring
	o.prog, o.multi, err = emptyProgram()
	if err != nil {
		return err
	}
	defer o.prog.Close()

	h := *harness
	configs := []ohConfig{
		{key: "a", label: "(a) untraced", attached: "nothing", kind: untraced, harness: h, n: *nUntraced},
		{key: "b", label: "(b) reconscope, reconcile probe", attached: "reconscope's program at the reconcile's entry and RETs", hits: 2, kind: traced, harness: h, n: *nTraced, catalog: []*probes.Probe{recon}},
		{key: "c", label: "(c) reconscope, reconcile + call probe", attached: "reconscope's program at the reconcile's and the call's entry and RETs", hits: 4, kind: traced, harness: h, n: *nTraced, catalog: []*probes.Probe{recon, call}},
		{key: "db", label: "(d) empty program at (b)'s sites", attached: "empty program at the reconcile's entry and RETs", hits: 2, kind: emptyAt, harness: h, n: *nTraced, offsets: reconSites},
		{key: "dc", label: "(d) empty program at (c)'s sites", attached: "empty program at the reconcile's and the call's entry and RETs", hits: 4, kind: emptyAt, harness: h, n: *nTraced, offsets: allSites},
		{key: "de", label: "(d) empty program, reconcile entry only", attached: "empty program at the reconcile's entry site", hits: 1, kind: emptyAt, harness: h, n: *nTraced, offsets: reconEntry},
		{key: "dr", label: "(d) empty program, reconcile RETs only", attached: "empty program at the reconcile's RET sites", hits: 1, kind: emptyAt, harness: h, n: *nTraced, offsets: reconRets},
		{key: "e", label: "(e) in-process OpenTelemetry span + histogram, untraced", attached: "nothing (twin build with -tags otel)", kind: untraced, harness: *otelHarness, n: *nOtel},
	}
	runs := map[string][]ohRun{}
	retries := 0
	start := time.Now()
	for r := range *rounds {
		for i := range configs {
			cfg := configs[(i+r)%len(configs)]
			res, err := o.runValid(cfg, &retries)
			if err != nil {
				return err
			}
			runs[cfg.key] = append(runs[cfg.key], res)
		}
	}
	mainTime := time.Since(start)

	// The programs' own run time, measured by the kernel, in runs of their own: the stats
	// add two clock reads to every program run, which the runs above must not pay.
	// The early exits: hits in a process that is not traced, and call sites with no span open.
	// (f): a call site that reads an object's UID and resourceVersion (issue 15's extra reads).
	statsCfgs := []ohConfig{configs[1], configs[2], configs[4],
		{key: "f", label: "(f) reconscope, reconcile + cache Get probe", hits: 4, kind: traced, harness: h, n: *nTraced, catalog: []*probes.Probe{recon, get}},
		{key: "xp", label: "(x) reconscope's program at (c)'s sites, the process not traced", kind: notTraced, harness: h, n: *nTraced, catalog: []*probes.Probe{recon, call}},
		{key: "xc", label: "(x) reconscope, call probe alone (no span ever open)", kind: callsOnly, harness: h, n: *nTraced, catalog: []*probes.Probe{recon, call}, only: call},
	}
	if o.multi {
		statsCfgs = append(statsCfgs,
			ohConfig{key: "ev", label: "event-only program at (c)'s sites", kind: eventOnlyAt, harness: h, n: *nTraced, offsets: allSites, program: EmptyProgEventOnlyMulti},
			ohConfig{key: "eh", label: "event-head-only program at (c)'s sites", kind: eventOnlyAt, harness: h, n: *nTraced, offsets: allSites, program: EmptyProgEventHeadOnlyMulti})
		for _, v := range recordVariants {
			if !*variants {
				break
			}
			statsCfgs = append(statsCfgs, ohConfig{key: v.key, label: v.what, kind: eventOnlyAt, harness: h, n: *nTraced, offsets: allSites,
				program: v.program, ringSize: v.ringSize, reader: v.reader})
		}
	}
	if o.multi && *warmRuns {
		statsCfgs = withTwice(statsCfgs)
	}
	statsRuns := map[string][]ohRun{}
	restore, err := enableBPFStats()
	if err != nil {
		return err
	}
	for range *statsRounds {
		for _, cfg := range statsCfgs {
			res, err := o.runValid(cfg, &retries)
			for attempt := 0; err == nil && (res.prog.runs == 0 || res.prog.runTime == 0); attempt++ {
				// no run time counted: the statistics were off, or the program never ran
				if attempt == 2 {
					err = fmt.Errorf("%s: the kernel counted %d runs, %s of run time: are eBPF statistics on?", cfg.label, res.prog.runs, res.prog.runTime)
					break
				}
				res, err = o.runValid(cfg, &retries)
			}
			if err != nil {
				restore()
				return err
			}
			statsRuns[cfg.key] = append(statsRuns[cfg.key], res)
		}
	}
	restore()

	cpu := func(key string) samples {
		var s samples
		for _, r := range runs[key] {
			s = append(s, r.rep.CPUPerRec)
		}
		return s
	}
	perRound := func(f func(i int) float64) samples {
		var s samples
		for i := range *rounds {
			s = append(s, f(i))
		}
		return s
	}
	at := func(key string, i int) float64 { return runs[key][i].rep.CPUPerRec }

	fmt.Printf("Command: `%s` (%d rounds in %s, then %d rounds with the kernel's eBPF run-time statistics on)\n\n", o.command(), *rounds, mainTime.Round(time.Second), *statsRounds)
	fmt.Printf(`The traced process is test/bench/testdata/reconcileloop: one goroutine calls a function with
controller-runtime's exact `+"`(*Controller[request]).Reconcile`"+` shape (deferred recover, context with a
reconcile ID, NamespacedName request, (Result, error) results) in a tight loop, and each reconcile
makes one call through a function shaped like client-go's `+"`(*Request).request`"+` and one through a
function shaped like controller-runtime's `+"`(*informerCache).Get`"+`, which fills a typed object (TypeMeta,
ObjectMeta with UID and resourceVersion). The probes are the catalog's controller-runtime reconcile
probe, client-go request probe and controller-runtime cache Get probe pointed at these functions
(the cache Get probe only in the kernel-stats runs (f)).
The harness times its own loop after %d warm-up reconciles: **CPU** is the process's CPU time
(CLOCK_PROCESS_CPUTIME_ID, user + system, so the kernel's uprobe handling is in it and time other
programs held the CPU is not) divided by the reconciles; **wall** is elapsed time divided by the
reconciles. Each round runs every configuration once, in an order rotated from round to round;
figures are median (min–max) over the rounds; ratios are taken within each round, then their median.
The empty program (test/bench/bpf/empty.bpf.c) is attached the way the collector attaches its own
(uprobe_multi: %v) at the file offsets probes.NewPlan gives. The traced runs use the collector's
default %s ring buffer, read by a tracer in the benchmark process. The tight loop makes events far
faster than any controller, and a lost event skips the program's work and would flatter it: a traced
run that lost more than %.1f%% of its events is run again (this time: %d runs); the table shows
the events lost in the runs kept.

`, harnessWarmup, o.multi, sizeName(o.ring), 100*maxLostShare, retries)

	fmt.Println("Probe sites in the harness:")
	fmt.Println()
	fmt.Println("| probe | site | function+offset | instruction |")
	fmt.Println("| --- | --- | --- | --- |")
	for _, s := range plan.Sites {
		fmt.Printf("| %s | %s | %s+%#x | `%s` |\n", s.Probe.ID, s.Kind, s.Function.Name, s.Addr-s.Function.Entry, s.Insn)
	}
	fmt.Println()

	fmt.Println("| configuration | attached | probe hits per reconcile | CPU per reconcile | wall per reconcile | added CPU over (a) | events lost |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, cfg := range configs {
		rs := runs[cfg.key]
		var wall samples
		var lost uint64
		hits := strconv.Itoa(cfg.hits)
		for _, r := range rs {
			wall = append(wall, r.rep.WallPerRec)
			lost += r.lost
		}
		if cfg.kind == traced {
			var h samples
			for _, r := range rs {
				h = append(h, float64(r.hits)/float64(cfg.n+harnessWarmup))
			}
			hits = fmt.Sprintf("%.2f (kernel count)", h.median())
		}
		added := "—"
		lostS := "—"
		if cfg.key != "a" {
			added = perRound(func(i int) float64 { return at(cfg.key, i) - at("a", i) }).spread(ns)
		}
		if cfg.kind == traced {
			lostS = strconv.FormatUint(lost, 10)
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", cfg.label, cfg.attached, hits, cpu(cfg.key).spread(ns), wall.spread(ns), added, lostS)
	}
	fmt.Println()

	// Ratios.
	ratioB := perRound(func(i int) float64 { return at("b", i) / at("db", i) })
	ratioC := perRound(func(i int) float64 { return at("c", i) / at("dc", i) })
	addB := perRound(func(i int) float64 { return (at("b", i) - at("a", i)) / (at("db", i) - at("a", i)) })
	addC := perRound(func(i int) float64 { return (at("c", i) - at("a", i)) / (at("dc", i) - at("a", i)) })
	fmt.Println("Our programs against the bare cost of the same probe hits (goal: at most 1.10×, DESIGN.md §6):")
	fmt.Println()
	fmt.Println("| ratio (CPU per reconcile) | median (min–max) | goal |")
	fmt.Println("| --- | ---: | ---: |")
	fmt.Printf("| (b) / (d at b's sites) | %s | ≤ 1.10× |\n", ratioB.spread(ratio))
	fmt.Printf("| (c) / (d at c's sites) | %s | ≤ 1.10× |\n", ratioC.spread(ratio))
	fmt.Printf("| added cost: ((b) − (a)) / ((d at b's sites) − (a)) | %s | ≤ 1.10× |\n", addB.spread(ratio))
	fmt.Printf("| added cost: ((c) − (a)) / ((d at c's sites) − (a)) | %s | ≤ 1.10× |\n", addC.spread(ratio))
	fmt.Println()

	// Per site.
	entry := perRound(func(i int) float64 { return at("de", i) - at("a", i) })
	ret := perRound(func(i int) float64 { return at("dr", i) - at("a", i) })
	callPair := perRound(func(i int) float64 { return at("dc", i) - at("db", i) })
	progB := perRound(func(i int) float64 { return at("b", i) - at("db", i) })
	progC := perRound(func(i int) float64 { return at("c", i) - at("dc", i) })
	otel := perRound(func(i int) float64 { return at("e", i) - at("a", i) })
	insn := map[string]string{}
	for _, s := range plan.Sites {
		if s.Probe == recon {
			k := s.Kind.String()
			if !strings.Contains(insn[k], s.Insn) {
				insn[k] = strings.TrimPrefix(insn[k]+", `"+s.Insn+"`", ", ")
			}
		}
	}
	fmt.Println("Cost per probe hit, by site (CPU per reconcile of the empty-program runs minus (a), within each round):")
	fmt.Println()
	fmt.Println("| what | instruction | CPU per reconcile |")
	fmt.Println("| --- | --- | ---: |")
	fmt.Printf("| one hit at the reconcile's entry site | %s | %s |\n", insn["entry"], entry.spread(ns))
	fmt.Printf("| one hit at a reconcile RET site | %s | %s |\n", insn["return"], ret.spread(ns))
	fmt.Printf("| the call's two hits (entry + RET): (d at c's sites) − (d at b's sites) | | %s |\n", callPair.spread(ns))
	fmt.Printf("| reconscope's program work, reconcile probe: (b) − (d at b's sites) | | %s |\n", progB.spread(ns))
	fmt.Printf("| reconscope's program work, reconcile + call probe: (c) − (d at c's sites) | | %s |\n", progC.spread(ns))
	fmt.Printf("| for comparison: in-process OpenTelemetry span + histogram: (e) − (a) | | %s |\n", otel.spread(ns))
	fmt.Println()

	// Kernel's own measure of program time.
	perHit := func(key string) samples {
		var s samples
		for _, r := range statsRuns[key] {
			s = append(s, r.prog.perRun())
		}
		return s
	}
	runsPerRec := func(key string, n int) float64 {
		var s samples
		for _, r := range statsRuns[key] {
			s = append(s, float64(r.prog.runs)/float64(n+harnessWarmup))
		}
		return s.median()
	}
	// The second attachment must run in every hit, or 2 × twice − once is no second run.
	for _, w := range append(warmPrograms[:len(warmPrograms):len(warmPrograms)], warmChecks...) {
		if len(statsRuns[w.twice]) == 0 {
			continue
		}
		if once, twice := runsPerRec(w.once, *nTraced), runsPerRec(w.twice, *nTraced); math.Abs(twice-2*once) > 0.02*once {
			return fmt.Errorf("%s attached twice ran %.2f times per reconcile, attached once %.2f: the second attachment does not run in every hit", w.once, twice, once)
		}
	}
	fmt.Println("Program run time measured by the kernel (BPF_ENABLE_STATS, run_time_ns / run_cnt of the program, from cilium/ebpf's `(*Program).Stats`), separate runs:")
	fmt.Println()
	fmt.Println("| program | configuration | runs per reconcile | ns per run (per hit) | goal |")
	fmt.Println("| --- | --- | ---: | ---: | ---: |")
	for _, k := range []struct{ key, prog, cfg, goal string }{
		{"b", "reconscope `probe_site_multi`", configs[1].label, "≤ 300 ns"},
		{"c", "reconscope `probe_site_multi`", configs[2].label, "≤ 300 ns"},
		{"f", "reconscope `probe_site_multi`", "(f) reconscope, reconcile + cache Get probe (its return reads the object's UID and resourceVersion)", "≤ 300 ns"},
		{"xp", "reconscope `probe_site_multi`, early exit: the process is not traced", "(x) at (c)'s sites, no process traced", "≤ 60 ns"},
		{"xc", "reconscope `probe_site_multi`, early exit: a call site with no span open", "(x) call probe alone", "≤ 60 ns"},
		{"dc", "empty program", configs[4].label, "—"},
		{"ev", "event-only program: reserve, stamp and submit one whole struct event (920 bytes), nothing else", "at (c)'s sites", "—"},
		{"eh", "event-head-only program: the same with the record of a site without strings (struct event_head, 136 bytes)", "at (c)'s sites", "—"},
	} {
		if len(statsRuns[k.key]) == 0 {
			continue
		}
		fmt.Printf("| %s | %s | %.2f | %s | %s |\n", k.prog, k.cfg, runsPerRec(k.key, *nTraced), perHit(k.key).spread(ns), k.goal)
	}
	fmt.Println()

	// Per hit of a call probe's own two sites: the reconcile's two hits taken out, within each
	// stats round.
	callHits := func(key string) samples {
		var s samples
		for i, r := range statsRuns[key] {
			b := statsRuns["b"][i].prog
			s = append(s, float64(r.prog.runTime.Nanoseconds()-b.runTime.Nanoseconds())/float64(r.prog.runs-b.runs))
		}
		return s
	}
	fmt.Println("Per hit of the call probes' own sites, the reconcile's hits taken out ((run time of (c) or (f) − run time of (b)) / (runs of (c) or (f) − runs of (b)), within each stats round):")
	fmt.Println()
	fmt.Println("| call probe | entry reads | return reads | ns per hit |")
	fmt.Println("| --- | --- | --- | ---: |")
	fmt.Printf("| request (client-go `(*Request).request` shape) | five strings through the receiver (a whole record) | the error only (the record's head) | %s |\n", callHits("c").spread(ns))
	fmt.Printf("| cache Get (controller-runtime `(*informerCache).Get` shape) | the key's two strings from registers, the object's pointer kept (a whole record) | the object's UID and resourceVersion through the kept pointer, and the error (a whole record) | %s |\n", callHits("f").spread(ns))
	fmt.Println()

	if len(statsRuns["eh"]) > 0 {
		fmt.Println("What a record costs: empty.bpf.c's programs, each alone at (c)'s sites (4 hits per reconcile), kernel stats as above, in the same rounds; a record is stamped with the clock and submitted without a wakeup unless said otherwise; ring buffers are read by a ringbuf.Reader in this process as the agent reads its own, the perf event array by a perf.Reader woken at a quarter full:")
		fmt.Println()
		fmt.Println("| program | ns per run (per hit) | over the empty program |")
		fmt.Println("| --- | ---: | ---: |")
		empty := perHit("dc").median()
		row := func(what, key string) {
			if len(statsRuns[key]) > 0 {
				fmt.Printf("| %s | %s | %s |\n", what, perHit(key).spread(ns), ns(perHit(key).median()-empty))
			}
		}
		row("empty program", "dc")
		row("event-head-only: reserve, stamp, submit 136 bytes (struct event_head), 4 MiB", "eh")
		row("event-only: the same with 920 bytes (struct event)", "ev")
		for _, v := range recordVariants {
			row(v.what, v.key)
		}
		fmt.Println()
		fmt.Println("Where the TLB survives the trap: the programs above that do one piece twice in one hit against those that do it once, in the same stats rounds. The second pass finds in the TLB the pages the first touched (and their lines in the cache), so twice − once is what the piece costs on a machine that does not flush the TLB at the trap (PCID, or no page-table isolation) while its hits come often enough to keep those lines cached; where they do not, cache misses come on top:")
		fmt.Println()
		fmt.Println("| piece | once, over the empty program | warm second pass: twice − once |")
		fmt.Println("| --- | ---: | ---: |")
		for _, w := range warmPieces {
			if len(statsRuns[w.twice]) > 0 {
				fmt.Printf("| %s | %s | %s |\n", w.what, ns(perHit(w.once).median()-empty), warm(perHit, w.once, w.twice).spread(ns))
			}
		}
		fmt.Println()
	}

	if len(statsRuns[warmPrograms[0].twice]) > 0 {
		fmt.Println("The whole program where the TLB survives the trap: reconscope's program as the tracer loads it, attached a second time at the same sites (a second uprobe_multi link of the same loaded program at the same file offsets with the same cookies), in the same stats rounds as the runs above. The kernel runs every consumer of a uprobe in one trap, one after the other, before the probed instruction is emulated or stepped, so each hit runs the program twice, the second time over the pages the first touched, with them in the TLB and their lines in the cache. The kernel's stats count both runs: 2 × (ns per run, twice) − (ns per run, once), within each stats round, is the second run: what a machine whose TLB survives the trap (PCID, or no page-table isolation) would pay per hit while its hits come often enough to keep those lines cached. It is an estimate measured here, not a run on such a machine.")
		fmt.Println()
		fmt.Printf("Each hit records twice: the reconcile's entry runs twice and nests (depth 2), its returns unwind it, so the goroutine's state stays right, but these runs' spans are not counted. The second run takes the first's path, with one difference: at the reconcile's entry it finds the span open and takes the goroutine ID from the goroutine's state instead of reading it from the g, one 8-byte read of the process's memory fewer (%s on a page already touched: (five reads − one read) / 4, what a record costs above).\n\n", readOnTouchedPage(perHit))
		fmt.Println("| program | configuration | runs per reconcile, once / twice | once: ns per hit | twice: ns per run | second run in the same trap: ns per hit | goal |")
		fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
		for _, w := range warmPrograms {
			if len(statsRuns[w.twice]) == 0 {
				continue
			}
			fmt.Printf("| reconscope `probe_site_multi`%s | %s | %.2f / %.2f | %s | %s | %s | %s |\n", w.what, statsCfgs[slices.IndexFunc(statsCfgs, func(c ohConfig) bool { return c.key == w.once })].label,
				runsPerRec(w.once, *nTraced), runsPerRec(w.twice, *nTraced), perHit(w.once).spread(ns), perHit(w.twice).spread(ns), secondRun(perHit, w.once, w.twice).spread(ns), w.goal)
		}
		for _, w := range warmChecks {
			if len(statsRuns[w.twice]) > 0 {
				fmt.Printf("| %s | at (c)'s sites | %.2f / %.2f | %s | %s | %s | %s |\n", w.what,
					runsPerRec(w.once, *nTraced), runsPerRec(w.twice, *nTraced), perHit(w.once).spread(ns), perHit(w.twice).spread(ns), secondRun(perHit, w.once, w.twice).spread(ns), w.goal)
			}
		}
		fmt.Println()
		if len(statsRuns["eh2"]) > 0 && len(statsRuns["e2"]) > 0 {
			fmt.Printf("The method checked on empty.bpf.c's programs (the last rows): the empty program's second run, %s per hit, is what any program's second run pays for its dispatch and the kernel's stats' own clock reads; the 136-byte record program's second run, %s, is to be set against the same record done twice in one program, whose second pass costs %s over the empty program (what a record costs, above) and so about %s with that dispatch.\n\n",
				ns(secondRun(perHit, "dc", "dc2").median()), ns(secondRun(perHit, "eh", "eh2").median()), ns(warm(perHit, "eh", "e2").median()), ns(warm(perHit, "eh", "e2").median()+secondRun(perHit, "dc", "dc2").median()))
		}
	}

	// Budget checks.
	for _, c := range []struct {
		name    string
		add     samples
		prog    samples
		kernel  samples
		hits    int
		bareKey string
		key     string
	}{
		{"reconcile probe", addB, progB, perHit("b"), 2, "db", "b"},
		{"reconcile + call probe", addC, progC, perHit("c"), 4, "dc", "c"},
		{"reconcile + cache Get probe (object UID and resourceVersion reads)", nil, nil, perHit("f"), 4, "", "f"},
	} {
		if c.add == nil { // kernel stats only
			kv := nsAtMost("BPF program time per hit (kernel stats), "+c.name, c.kernel.median(), 300)
			kv.Warm = secondRunOf(perHit, c.key)
			if !kv.Met {
				kv.Why = fmt.Sprintf("as for the probes above; per hit of the call probe's own sites (section 1), the cache Get, whose return reads the object's UID and resourceVersion, costs %s, the request, whose return reads no string, %s", ns(callHits("f").median()), ns(callHits("c").median()))
				if w := secondRunWhy(perHit, c.key); w != "" {
					kv.Why += "; " + w
				}
			}
			if err := o.verdict(kv); err != nil {
				return err
			}
			continue
		}
		bare := perRound(func(i int) float64 { return at(c.bareKey, i) - at("a", i) })
		v := Verdict{
			Figure:   "traced reconcile / bare probe hits, " + c.name + " (added CPU, same sites, empty program)",
			Goal:     "≤ 1.10×",
			Measured: ratio(c.add.median()),
			Value:    c.add.median(),
			Unit:     "×",
			Met:      c.add.median() <= 1.10,
		}
		if !v.Met {
			v.Why = fmt.Sprintf("reconscope's programs add %s per reconcile to the %s that its %d bare probe hits cost (empty program at the same sites); the kernel's own measure of the program is %s per hit, %s per reconcile: the excess is the programs' own work (next line), not the trap",
				ns(c.prog.median()), ns(bare.median()), c.hits, ns(c.kernel.median()), ns(c.kernel.median()*float64(c.hits)))
		}
		if err := o.verdict(v); err != nil {
			return err
		}
		kv := nsAtMost("BPF program time per hit (kernel stats), "+c.name, c.kernel.median(), 300)
		kv.Warm = secondRunOf(perHit, c.key)
		if !kv.Met {
			kv.Why = programWhy(perHit, c.key)
		}
		if err := o.verdict(kv); err != nil {
			return err
		}
	}
	for _, x := range []struct{ key, what string }{
		{"xp", "the process is not traced"},
		{"xc", "a call site with no span open"},
	} {
		v := nsAtMost("BPF program time per hit (kernel stats), early exit: "+x.what, perHit(x.key).median(), 60)
		v.Warm = secondRunOf(perHit, x.key)
		if !v.Met {
			v.Why = exitWhy(perHit, x.key)
		}
		if err := o.verdict(v); err != nil {
			return err
		}
	}
	return nil
}
