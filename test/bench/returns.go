package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/symbols"
	"github.com/reconscope/reconscope/test/fakectl/controller"
)

// returns measures a reconcile's return probed at its RETs against at the return address of
// its call in a reconcileHandler-shaped caller, side by side (docs/return-sites.md).
func returns(args []string) error {
	o, f, err := parseRounds("returns", args, "reconciles", 30000, 1000000)
	if err != nil {
		return err
	}
	harness, rounds, nTraced, nUntraced := f.harness, f.rounds, f.nTraced, f.nUntraced
	atRet, err := reconcileProbe()
	if err != nil {
		return err
	}
	atRet.ReturnCallers = nil
	atAddr := *atRet
	// Every call of the reconcile: Handle's (-handler), and the loop's own in package main.
	atAddr.ReturnCallers = regexp.MustCompile(`^(main|` + regexp.QuoteMeta(controller.Path) + `)\.`)
	bin, err := symbols.Open(*harness)
	if err != nil {
		return err
	}
	plans := map[*probes.Probe]*probes.Plan{}
	offsets := map[*probes.Probe][]uint64{} // the return sites
	for _, p := range []*probes.Probe{atRet, &atAddr} {
		plan, err := probes.NewPlan(bin, []*probes.Probe{p})
		if err != nil {
			bin.Close()
			return fmt.Errorf("plan for the harness: %w", err)
		}
		plans[p] = plan
		for _, s := range plan.Sites {
			if s.Kind == probes.SiteReturn {
				offsets[p] = append(offsets[p], s.FileOffset)
			}
		}
	}
	bin.Close()
	if len(plans[&atAddr].Choices) != 1 || plans[&atAddr].Choices[0].Why != "" {
		return fmt.Errorf("the harness's reconcile return is not probed at its return addresses: %+v", plans[&atAddr].Choices)
	}
	o.prog, o.multi, err = emptyProgram()
	if err != nil {
		return err
	}
	defer o.prog.Close()

	type config struct {
		key, label string
		n          int
		catalog    []*probes.Probe
		offsets    []uint64
	}
	configs := []config{
		{key: "a", label: "(a) untraced", n: *nUntraced},
		{key: "ret", label: "(b) reconscope, reconcile probe, return at the RETs", n: *nTraced, catalog: []*probes.Probe{atRet}},
		{key: "addr", label: "(c) reconscope, reconcile probe, return at the return addresses", n: *nTraced, catalog: []*probes.Probe{&atAddr}},
		{key: "dret", label: "(d) empty program at the RETs alone", n: *nTraced, offsets: offsets[atRet]},
		{key: "daddr", label: "(d) empty program at the return addresses alone", n: *nTraced, offsets: offsets[&atAddr]},
	}
	start := time.Now()
	rr, err := runRounds(*rounds, len(configs), func(i int) (string, harnessReport, error) {
		cfg := configs[i]
		rep, err := o.runAttached(*harness, []string{"-handler", "-n", strconv.Itoa(cfg.n)}, cfg.catalog, cfg.offsets)
		if err != nil {
			err = fmt.Errorf("%s: %w", cfg.label, err)
		}
		return cfg.key, rep, err
	})
	if err != nil {
		return err
	}
	runs, at, perRound := rr.runs, rr.at, rr.perRound

	fmt.Printf("Command: `%s` (%d rounds in %s)\n\n", o.command(), *rounds, time.Since(start).Round(time.Second))
	fmt.Print(`The harness with -handler calls every reconcile through a method shaped like controller-runtime's
reconcileHandler, whose call of Reconcile the compiler follows with a JMP (reconcileHandler's is
followed by a 5-byte NOP in the controller-runtime build of docs/return-sites.md; the kernel
emulates both). The reconcile probe (the catalog's, pointed at the harness) has its return probed
at Reconcile's RETs (b), or, as the plan does where every caller is known (Probe.ReturnCallers),
at the instruction after each call of it (c). Each reconcile hits one entry and one return site.
The empty program runs at the return sites alone (d). Rounds as above.

`)
	fmt.Println("| configuration | return sites |")
	fmt.Println("| --- | --- |")
	for _, p := range []*probes.Probe{atRet, &atAddr} {
		var where []string
		for _, s := range plans[p].Sites {
			if s.Kind == probes.SiteReturn {
				where = append(where, fmt.Sprintf("%s `%s`", s.Where(), s.Insn))
			}
		}
		label := "(b)"
		if p == &atAddr {
			label = "(c)"
		}
		fmt.Printf("| %s | %s |\n", label, strings.Join(where, ", "))
	}
	fmt.Println()
	fmt.Println("| configuration | CPU per reconcile | added CPU over (a) |")
	fmt.Println("| --- | ---: | ---: |")
	for _, cfg := range configs {
		var cpu samples
		for _, r := range runs[cfg.key] {
			cpu = append(cpu, r.CPUPerRec)
		}
		added := "—"
		if cfg.key != "a" {
			added = perRound(func(i int) float64 { return at(cfg.key, i) - at("a", i) }).spread(ns)
		}
		fmt.Printf("| %s | %s | %s |\n", cfg.label, cpu.spread(ns), added)
	}
	fmt.Println()
	rr.printAddedRatios("reconcile", []addedRatio{
		{"(c) / (b): the traced reconcile, return at the return address against at the RETs", "addr", "ret"},
		{"(d at the return address) / (d at the RETs): one return hit", "daddr", "dret"},
	})
	return nil
}
