package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// spawnConfig is one way of running the harness's goroutine loop.
type spawnConfig struct {
	key, label, attached string
	n                    int
	inSpan               bool
	catalog              []*probes.Probe // traced runs
	offsets              []uint64        // empty-program runs
}

// goroutinePlan is the plan of the harness with the reconcile and call probes and the given
// goroutine probes, and the file offsets of its goroutine sites.
func goroutinePlan(harness string, goroutine []*probes.Probe) ([]*probes.Probe, *probes.Plan, []uint64, error) {
	recon, call, err := spanAndCallProbes()
	if err != nil {
		return nil, nil, nil, err
	}
	catalog := append([]*probes.Probe{recon, call}, goroutine...)
	bin, err := symbols.Open(harness)
	if err != nil {
		return nil, nil, nil, err
	}
	defer bin.Close()
	plan, err := probes.NewPlan(bin, catalog)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("plan for the harness: %w", err)
	}
	var offs []uint64
	for _, s := range plan.Sites {
		if s.Probe.Role == probes.RoleSpawn || s.Probe.Role == probes.RoleExit {
			offs = append(offs, s.FileOffset)
		}
	}
	if len(offs) != 3 {
		return nil, nil, nil, fmt.Errorf("plan for the harness: %d goroutine sites, want 3: %s", len(offs), plan)
	}
	return catalog, plan, offs, nil
}

// spawn measures what the goroutine probes cost a process per goroutine it starts.
func spawn(args []string) error {
	o, f, err := parseRounds("spawn", args, "goroutines", 20000, 200000)
	if err != nil {
		return err
	}
	harness, rounds, nTraced, nUntraced := f.harness, f.rounds, f.nTraced, f.nUntraced
	// The catalog's goroutine probes: newproc's calls first, newproc1's entry and RETs as the
	// fallback; "before" is the fallback alone, as every goroutine was probed until then.
	newCat, newPlan, newOffs, err := goroutinePlan(*harness, probes.GoroutineProbes)
	if err != nil {
		return err
	}
	oldCat, oldPlan, oldOffs, err := goroutinePlan(*harness, probes.GoroutineProbes[1:])
	if err != nil {
		return err
	}
	single, err := singleSites(*harness, oldPlan, newPlan)
	if err != nil {
		return err
	}
	o.prog, o.multi, err = emptyProgram()
	if err != nil {
		return err
	}
	defer o.prog.Close()

	configs := []spawnConfig{
		{key: "a", label: "(a) untraced", attached: "nothing", n: *nUntraced},
		{key: "old", label: "(b) reconscope, newproc1's entry and RETs", attached: "reconscope's program; goroutine-start at `runtime.newproc1`'s entry and RETs", n: *nTraced, catalog: oldCat},
		{key: "new", label: "(c) reconscope, newproc's calls", attached: "reconscope's program; goroutine-start at the calls of newproc1 and runqput in `runtime.newproc.func1`", n: *nTraced, catalog: newCat},
		{key: "dold", label: "(d) empty program at (b)'s goroutine sites", attached: "empty program", n: *nTraced, offsets: oldOffs},
		{key: "dnew", label: "(d) empty program at (c)'s goroutine sites", attached: "empty program", n: *nTraced, offsets: newOffs},
		{key: "olds", label: "(b) inside a span", attached: "as (b); every goroutine started inside one reconcile (it inherits the span)", n: *nTraced, inSpan: true, catalog: oldCat},
		{key: "news", label: "(c) inside a span", attached: "as (c); every goroutine started inside one reconcile (it inherits the span)", n: *nTraced, inSpan: true, catalog: newCat},
	}
	for _, x := range single {
		configs = append(configs, spawnConfig{key: x.key, label: "(e) empty program at " + x.what + " alone", attached: "empty program", n: *nTraced, offsets: []uint64{x.offset}})
	}
	start := time.Now()
	rr, err := runRounds(*rounds, len(configs), func(i int) (string, harnessReport, error) {
		rep, err := o.runSpawn(*harness, configs[i])
		if err != nil {
			err = fmt.Errorf("%s: %w", configs[i].label, err)
		}
		return configs[i].key, rep, err
	})
	if err != nil {
		return err
	}
	runs, at, perRound := rr.runs, rr.at, rr.perRound

	fmt.Printf("Command: `%s` (%d rounds in %s)\n\n", o.command(), *rounds, time.Since(start).Round(time.Second))
	fmt.Print(`The same harness with -spawn starts goroutines back to back (each ends at once; the loop
waits for them every 256): **CPU per goroutine** is the process's CPU time over the goroutines
started, the goroutine's start, run and end included. Each goroutine hits the goroutine-start
probe's two sites and the goroutine-exit probe's one (` + "`runtime.goexit1`" + `'s entry). (b) is
how goroutines were probed before: newproc1's entry and its RETs (the catalog's fallback now);
(c) is the catalog's choice: the calls of newproc1 and runqput in newproc's closure, which the
kernel does not single-step. The reconcile and call probes are attached too (a plan keeps
goroutine probes only with them): the reconcile probe is hit once in the "inside a span" runs,
the call probe never. The empty program runs at the three goroutine sites alone. Rounds as
above: every configuration once per round, the order rotated.

`)
	fmt.Println("| configuration | goroutine sites | instructions |")
	fmt.Println("| --- | --- | --- |")
	for _, p := range []struct {
		label string
		plan  *probes.Plan
	}{{"(b)", oldPlan}, {"(c)", newPlan}} {
		var where, insns []string
		for _, s := range p.plan.Sites {
			if s.Probe.Role == probes.RoleSpawn || s.Probe.Role == probes.RoleExit {
				where = append(where, fmt.Sprintf("%s %s+%#x", s.Kind, s.Function.Name, s.Addr-s.Function.Entry))
				insns = append(insns, "`"+s.Insn+"`")
			}
		}
		fmt.Printf("| %s | %s | %s |\n", p.label, strings.Join(where, ", "), strings.Join(insns, ", "))
	}
	fmt.Println()
	fmt.Println("| configuration | attached | CPU per goroutine | wall per goroutine | added CPU over (a) |")
	fmt.Println("| --- | --- | ---: | ---: | ---: |")
	for _, cfg := range configs {
		var cpu, wall samples
		for _, r := range runs[cfg.key] {
			cpu = append(cpu, r.CPUPerRec)
			wall = append(wall, r.WallPerRec)
		}
		added := "—"
		if cfg.key != "a" {
			added = perRound(func(i int) float64 { return at(cfg.key, i) - at("a", i) }).spread(ns)
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", cfg.label, cfg.attached, cpu.spread(ns), wall.spread(ns), added)
	}
	fmt.Println()
	if len(single) > 0 {
		fmt.Println("Cost of one probe hit, by instruction (the (e) runs: the empty program at one site that each goroutine start executes once, CPU per goroutine minus (a), within each round):")
		fmt.Println()
		fmt.Println("| site | instruction | kernel | CPU per hit |")
		fmt.Println("| --- | --- | --- | ---: |")
		for _, x := range single {
			fmt.Printf("| %s | `%s` | %s | %s |\n", x.what, x.insn, x.handling, perRound(func(i int) float64 { return at(x.key, i) - at("a", i) }).spread(ns))
		}
		fmt.Println()
	}
	rr.printAddedRatios("goroutine", []addedRatio{
		{"(c) / (b): reconscope, newproc's calls against newproc1's entry and RETs", "new", "old"},
		{"(c) / (b), inside a span", "news", "olds"},
		{"(d at c's sites) / (d at b's sites): the bare probe hits", "dnew", "dold"},
	})
	return nil
}

// addedRatio is the CPU num adds over the untraced run "a", over what den adds.
type addedRatio struct{ label, num, den string }

// printAddedRatios prints the ratios as a table, each taken within each round.
func (rr roundRuns) printAddedRatios(per string, ratios []addedRatio) {
	fmt.Printf("| ratio (added CPU per %s, within each round) | median (min–max) |\n", per)
	fmt.Println("| --- | ---: |")
	for _, r := range ratios {
		fmt.Printf("| %s | %s |\n", r.label, rr.perRound(func(i int) float64 {
			return (rr.at(r.num, i) - rr.at("a", i)) / (rr.at(r.den, i) - rr.at("a", i))
		}).spread(ratio))
	}
	fmt.Println()
}

// roundRuns are the reports of configurations run once per round, by key, in round order.
type roundRuns struct {
	runs   map[string][]harnessReport
	rounds int
}

// runRounds runs each of n configurations once per round, in an order rotated from round to
// round; run returns the configuration's key and report.
func runRounds(rounds, n int, run func(i int) (string, harnessReport, error)) (roundRuns, error) {
	rr := roundRuns{runs: map[string][]harnessReport{}, rounds: rounds}
	for r := range rounds {
		for i := range n {
			key, rep, err := run((i + r) % n)
			if err != nil {
				return rr, err
			}
			rr.runs[key] = append(rr.runs[key], rep)
		}
	}
	return rr, nil
}

// at is the CPU per iteration of key's run in round i.
func (rr roundRuns) at(key string, i int) float64 { return rr.runs[key][i].CPUPerRec }

// perRound is f of every round.
func (rr roundRuns) perRound(f func(i int) float64) samples {
	var s samples
	for i := range rr.rounds {
		s = append(s, f(i))
	}
	return s
}

// runSpawn runs the harness's goroutine loop once as cfg says.
func (o *overheadBench) runSpawn(harness string, cfg spawnConfig) (harnessReport, error) {
	args := []string{"-spawn", "-n", strconv.Itoa(cfg.n)}
	if cfg.inSpan {
		args = append(args, "-in-span")
	}
	return o.runAttached(harness, args, cfg.catalog, cfg.offsets)
}

// runAttached runs the harness with args once: traced by reconscope with catalog, or with
// the empty program at offsets, or neither.
func (o *overheadBench) runAttached(harness string, args []string, catalog []*probes.Probe, offsets []uint64) (harnessReport, error) {
	var attach func(int) (func() error, error)
	switch {
	case catalog != nil:
		attach = func(pid int) (func() error, error) {
			t, err := traceHarness(catalog, collector.Options{}, pid)
			if err != nil {
				return nil, err
			}
			return func() error {
				_, _, err := t.stop()
				return err
			}, nil
		}
	case offsets != nil:
		attach = func(int) (func() error, error) { return attachEmpty(o.prog, o.multi, harness, offsets) }
	}
	return runHarness(harness, args, attach)
}

// singleSite is one instruction every goroutine start executes once, measured alone.
type singleSite struct {
	key, what, insn, handling string
	offset                    uint64
}

// nopl5 is the 5-byte NOP (NOPL 0(AX)(AX*1)) the Go compiler puts after some calls; it is the
// instruction that follows controller-runtime's call of Reconcile in reconcileHandler
// (docs/return-sites.md).
var nopl5 = []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}

// singleSites are, on amd64, newproc1's entry and RETs (b's sites), the call of newproc1 in
// newproc's closure (c's entry site), and the 5-byte NOP before its call of runqput when the
// compiler put one there: a RET, a PUSHQ, a CALL and a NOPL side by side.
func singleSites(harness string, oldPlan, newPlan *probes.Plan) ([]singleSite, error) {
	if newPlan.Binary.Arch != "amd64" || oldPlan.Binary.Arch != "amd64" {
		return nil, nil
	}
	var out []singleSite
	for _, s := range oldPlan.Sites {
		if s.Probe.Role != probes.RoleSpawn {
			continue
		}
		if s.Kind == probes.SiteEntry {
			out = append(out, singleSite{key: "e-entry", what: "newproc1's entry", insn: s.Insn, handling: "emulated", offset: s.FileOffset})
		} else if !strings.Contains(out[len(out)-1].key, "ret") {
			// newproc1 has one RET here: more would each be hit by some goroutines only
			out = append(out, singleSite{key: "e-ret", what: "newproc1's RET", insn: s.Insn, handling: "single-stepped", offset: s.FileOffset})
		} else {
			return nil, fmt.Errorf("newproc1 has more than one RET in the harness")
		}
	}
	file, err := os.ReadFile(harness)
	if err != nil {
		return nil, err
	}
	for _, s := range newPlan.Sites {
		if s.Probe.Role != probes.RoleSpawn {
			continue
		}
		if s.Kind == probes.SiteEntry {
			out = append(out, singleSite{key: "e-call", what: "newproc's call of newproc1", insn: s.Insn, handling: "emulated", offset: s.FileOffset})
			continue
		}
		// the instruction before the call of runqput
		off := s.FileOffset - uint64(len(nopl5))
		if s.FileOffset <= uint64(len(file)) && bytes.Equal(file[off:s.FileOffset], nopl5) {
			out = append(out, singleSite{key: "e-nop", what: "the 5-byte NOP before newproc's call of runqput", insn: "NOPL 0(AX)(AX*1)", handling: "emulated if the kernel knows the NOP", offset: off})
		}
	}
	return out, nil
}
