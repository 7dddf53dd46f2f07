package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Result is BENCHMARKS.json: the budget figures of one run of make bench, as numbers, for the
// next run to compare itself with.
type Result struct {
	Date    string    `json:"date"`
	Commit  string    `json:"commit"`
	Machine string    `json:"machine"`
	Load    string    `json:"load"`
	Figures []Verdict `json:"figures"`
}

// compare prints the figures of this run (the recorded checks) side by side with the previous
// run's, flags the ones that moved by the threshold or more, and writes this run's Result. It
// never fails on what it compares: a shared machine's noise is not a regression to stop on.
func compare(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	verdicts := fs.String("verdicts", "", "JSON-lines file of this run's checks")
	previous := fs.String("previous", "", "the previous run: its BENCHMARKS.json, or (before there was one) its BENCHMARKS.md")
	out := fs.String("out", "", "write this run's Result (BENCHMARKS.json) here")
	threshold := fs.Float64("threshold", 0.15, "flag figures whose ratio to the previous run is off 1 by this much or more")
	note := fs.String("note", "", "a sentence printed under the table (how this run was made)")
	var cur Result
	fs.StringVar(&cur.Date, "date", "", "this run's date")
	fs.StringVar(&cur.Commit, "commit", "", "this run's commit")
	fs.StringVar(&cur.Machine, "machine", "", "this run's machine (CPU, cores, kernel)")
	fs.StringVar(&cur.Load, "load", "", "this run's load average")
	fs.Parse(args)
	var err error
	if cur.Figures, err = readVerdicts(*verdicts); err != nil {
		return err
	}
	if *out != "" {
		b, err := json.MarshalIndent(cur, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	prev, from, err := readPrevious(*previous)
	if err != nil {
		fmt.Printf("No previous run to compare with (%v).\n\n", err)
		return nil
	}
	fmt.Printf("Previous run: %s, commit %s, load %s (read from %s). Ratio is this run's figure over the previous one's; changes of %.0f%% or more are flagged, as better or worse by the figure's goal. A flag is not a failure: both runs are medians on a shared machine, and only figures measured side by side within one run are exact comparisons.\n\n",
		orNA(prev.Date), orNA(prev.Commit), orNA(prev.Load), from, *threshold*100)
	before := map[string]Verdict{}
	for _, v := range prev.Figures {
		before[v.Figure] = withValue(v)
	}
	for i := range cur.Figures {
		cur.Figures[i] = withValue(cur.Figures[i])
	}
	fmt.Println("| figure | before | after | after / before | change |")
	fmt.Println("| --- | --- | --- | ---: | --- |")
	worse, better := 0, 0
	seen := map[string]bool{}
	for _, v := range cur.Figures {
		seen[v.Figure] = true
		p, ok := before[v.Figure]
		if !ok {
			fmt.Printf("| %s | — | %s | — | new figure |\n", v.Figure, v.Measured)
			continue
		}
		r, flag := judge(p, v, *threshold)
		switch flag {
		case "worse":
			worse++
			flag = "**worse**"
		case "better":
			better++
			flag = "**better**"
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", v.Figure, p.Measured, v.Measured, r, flag)
	}
	for _, p := range prev.Figures {
		if !seen[p.Figure] {
			fmt.Printf("| %s | %s | — | — | not measured in this run |\n", p.Figure, p.Measured)
		}
	}
	fmt.Println()
	fmt.Printf("%d figures %.0f%% or more worse, %d %.0f%% or more better than the previous run.", worse, *threshold*100, better, *threshold*100)
	if *note != "" {
		fmt.Printf(" %s", *note)
	}
	fmt.Print("\n\n")
	return nil
}

// withValue fills in a check's Value from its Measured text when it has none (recorded by a
// bench from before Value existed).
func withValue(v Verdict) Verdict {
	if v.Unit == "" {
		if x, unit, ok := parseMeasured(v.Measured); ok {
			v.Value, v.Unit = x, unit
		}
	}
	return v
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

// judge returns the ratio of v's value to p's as printed, and "worse", "better" or "" when
// it moved by less than threshold. Which way is better follows the goal: "≤ 300 ns" and
// "< 64 MiB" want less, "≥ 1.00 M/s" more, "0 lost …" none.
func judge(p, v Verdict, threshold float64) (string, string) {
	if p.Value == 0 && v.Value == 0 {
		return "1.000×", ""
	}
	if p.Value == 0 || math.IsNaN(p.Value) || math.IsNaN(v.Value) {
		return "—", changed(v.Value > p.Value, lowerIsBetter(v.Goal))
	}
	r := v.Value / p.Value
	s := ratio(r)
	if math.Abs(r-1) < threshold {
		return s, ""
	}
	return s, changed(r > 1, lowerIsBetter(v.Goal))
}

func changed(up, lowerBetter bool) string {
	if up == lowerBetter {
		return "worse"
	}
	return "better"
}

func lowerIsBetter(goal string) bool {
	return !strings.HasPrefix(goal, "≥") && !strings.HasPrefix(goal, ">")
}

// readPrevious reads the previous run from its BENCHMARKS.json, or from the Budgets table and
// machine table of a BENCHMARKS.md written before there was a BENCHMARKS.json.
func readPrevious(path string) (Result, string, error) {
	var r Result
	if path == "" {
		return r, "", fmt.Errorf("none given")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return r, "", err
	}
	if strings.HasSuffix(path, ".json") {
		if err := json.Unmarshal(b, &r); err != nil {
			return r, "", fmt.Errorf("read %s: %w", path, err)
		}
		return r, "the committed BENCHMARKS.json", nil
	}
	r, err = parseBenchmarksMD(string(b))
	return r, "the Budgets table of the committed BENCHMARKS.md", err
}

func parseBenchmarksMD(md string) (Result, error) {
	var r Result
	inBudgets := false
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		switch {
		case strings.HasPrefix(line, "| date |") && len(cells) == 2:
			r.Date = cells[1]
		case strings.HasPrefix(line, "| commit |") && len(cells) == 2:
			r.Commit = cells[1]
		case strings.HasPrefix(line, "| load average") && len(cells) == 2:
			r.Load = cells[1]
		case strings.HasPrefix(line, "| figure | goal | measured"):
			inBudgets = true
		case inBudgets && !strings.HasPrefix(line, "|"):
			inBudgets = false
		case inBudgets && len(cells) == 4 && cells[0] != "---":
			v, unit, ok := parseMeasured(cells[2])
			if !ok {
				continue
			}
			r.Figures = append(r.Figures, Verdict{Figure: cells[0], Goal: cells[1], Measured: cells[2], Value: v, Unit: unit, Met: cells[3] == "yes"})
		}
	}
	if len(r.Figures) == 0 {
		return r, fmt.Errorf("no Budgets table")
	}
	return r, sc.Err()
}

var measuredRE = regexp.MustCompile(`^(-?[0-9.]+)\s*(ns|µs|ms|s|×|M/s|k/s|MB|MiB|B|lost)?`)

// measuredUnits are the units parseMeasured converts: to the base unit, by its scale.
var measuredUnits = map[string]struct {
	scale float64
	base  string
}{
	"ns": {1, "ns"}, "µs": {1e3, "ns"}, "ms": {1e6, "ns"}, "s": {1e9, "ns"},
	"×":   {1, "×"},
	"M/s": {1e6, "/s"}, "k/s": {1e3, "/s"},
	"MB": {1e6, "B"}, "MiB": {1 << 20, "B"},
	"lost": {1, "events lost"},
}

// parseMeasured reads the number a Measured string starts with, in the unit bench records
// ("731 ns", "1.266×", "1.75 M/s (events/cpu-s)", "60.5 MB (B/op)", "62.9 MiB", "0 lost …",
// "264 ms wall, …").
func parseMeasured(s string) (float64, string, bool) {
	m := measuredRE.FindStringSubmatch(s)
	if m == nil {
		return 0, "", false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, "", false
	}
	if u, ok := measuredUnits[m[2]]; ok {
		return v * u.scale, u.base, true
	}
	return v, m[2], true
}
