// Command bench runs reconscope's benchmarks (DESIGN.md §6) and prints each one as a Markdown
// section of BENCHMARKS.md. test/bench/run.sh (`make bench`) builds it and the programs it
// measures, runs every subcommand and writes BENCHMARKS.md.
//
//	bench overhead   cost a traced process pays per reconcile: untraced, reconscope's programs,
//	                 an empty program at the same sites, in-process OpenTelemetry (needs root)
//	bench spawn      cost a traced process pays per goroutine it starts, by goroutine-probe
//	                 sites, with the empty program at the same sites (needs root)
//	bench returns    a reconcile's return probed at its RETs against at the return address in
//	                 its caller, the empty program at each (needs root)
//	bench loss       highest reconcile rate with no lost event, by ring-buffer size (needs root)
//	bench rss        agent memory while tracing 20 fakectl processes (needs root)
//	bench inspect    time and memory of `reconscope-agent inspect` on big binaries
//	bench gobench    table and checks from `go test -bench` output
//	bench summary    the table of budgets met and missed, from the checks the others recorded
//	bench compare    the figures against the previous run's (BENCHMARKS.json), and the new result
//	bench layout     BENCHMARKS.md's budgets laid out again from BENCHMARKS.json, running nothing:
//	                 the summary table, and why a figure misses under the section measuring it
//
// Every timed figure is a median over several runs with its spread (min–max); configurations
// compared with each other run side by side, interleaved, in one invocation, because the
// machine is shared and its load moves between runs.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/reconscope/reconscope/test/bench/verdict"
)

const usage = `usage: bench overhead|spawn|returns|loss|rss|inspect|gobench|summary|compare|layout [flags]   (bench CMD -h for flags)`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"overhead":  overhead,
		"spawn":     spawn,
		"returns":   returns,
		"loss":      loss,
		"rss":       rss,
		"rss-agent": rssAgent,
		"inspect":   inspect,
		"gobench":   gobench,
		"summary":   summary,
		"compare":   compare,
		"layout":    layout,
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// common are the flags every subcommand that reports takes.
type common struct {
	work         string // folder of the built programs, shown as $WORK
	controlplane string // control-plane binaries folder, shown as $CONTROLPLANE
	verdicts     string // JSON-lines file the budget checks are appended to
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.work, "work", "", "folder of the built programs (printed as $WORK)")
	fs.StringVar(&c.controlplane, "controlplane", "", "control-plane binaries folder (printed as $CONTROLPLANE)")
	fs.StringVar(&c.verdicts, "verdicts", "", "append the budget checks to this JSON-lines file")
}

// show hides this machine's folders in what is printed: BENCHMARKS.md is committed.
func (c *common) show(s string) string {
	if c.work != "" {
		s = strings.ReplaceAll(s, c.work, "$WORK")
	}
	if c.controlplane != "" {
		s = strings.ReplaceAll(s, c.controlplane, "$CONTROLPLANE")
	}
	return s
}

// command is this invocation as it can be re-run, with the folders hidden.
func (c *common) command() string {
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		args[i] = c.show(a)
		if i == 0 {
			args[i] = "$WORK/bench"
		}
	}
	return strings.Join(args, " ")
}

// Verdict is one budget check.
type Verdict = verdict.Verdict

func (c *common) verdict(v Verdict) error {
	if c.verdicts == "" {
		return nil
	}
	v.Measured, v.Why, v.Warm = c.show(v.Measured), c.show(v.Why), c.show(v.Warm)
	return verdict.Append(c.verdicts, v)
}

// summary prints the budget table from the recorded checks; with -explain, the explanation of
// every figure that misses its goal under it (BENCHMARKS.md has them in its sections: layout).
func summary(args []string) error {
	fs := flag.NewFlagSet("summary", flag.ExitOnError)
	file := fs.String("verdicts", "", "JSON-lines file of checks")
	explain := fs.Bool("explain", false, "also explain every figure that misses its goal, and what a machine whose TLB survives the trap would pay")
	fs.Parse(args)
	vs, err := readVerdicts(*file)
	if err != nil {
		return err
	}
	fmt.Print(budgetSummary(vs, false))
	fmt.Println()
	if !*explain {
		return nil
	}
	var warm []Verdict
	for _, v := range vs {
		if !v.Met && sectionOf(v.Figure) != 0 {
			fmt.Print(missProse(v) + "\n\n")
		}
		if v.Warm != "" {
			warm = append(warm, v)
		}
	}
	if len(warm) > 0 {
		fmt.Print(warmTable(warm))
	}
	return nil
}

// readVerdicts reads a JSON-lines file of checks.
func readVerdicts(file string) ([]Verdict, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var vs []Verdict
	dec := json.NewDecoder(f)
	for {
		var v Verdict
		if err := dec.Decode(&v); err == io.EOF {
			return vs, nil
		} else if err != nil {
			return nil, fmt.Errorf("read %s: %w", file, err)
		}
		vs = append(vs, v)
	}
}
