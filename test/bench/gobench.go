package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// benchResult is one benchmark's values per unit over its -count runs.
type benchResult struct {
	units  []string
	values map[string]samples
}

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parseBench reads `go test -bench` output: per benchmark (without "Benchmark" and the
// GOMAXPROCS suffix), the values of each unit. order is the order of first appearance.
func parseBench(out string) (map[string]*benchResult, []string) {
	res := map[string]*benchResult{}
	var order []string
	for _, line := range strings.Split(out, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		r := res[m[1]]
		if r == nil {
			r = &benchResult{values: map[string]samples{}}
			res[m[1]] = r
			order = append(order, m[1])
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			u := f[i+1]
			if _, ok := r.values[u]; !ok {
				r.units = append(r.units, u)
			}
			r.values[u] = append(r.values[u], v)
		}
	}
	return res, order
}

// check is a budget on one benchmark's unit: "label|bench:unit>=limit|why when missed".
type check struct {
	label, bench, unit, op, why string
	limit                       float64
}

var checkExpr = regexp.MustCompile(`^([^:]+):(\S+?)(>=|<=|<|>)([0-9.eE+]+)$`)

func parseCheck(s string) (check, error) {
	var c check
	parts := strings.SplitN(s, "|", 3)
	expr := parts[0]
	if len(parts) >= 2 {
		c.label, expr = parts[0], parts[1]
	}
	if len(parts) == 3 {
		c.why = parts[2]
	}
	m := checkExpr.FindStringSubmatch(expr)
	if m == nil {
		return c, fmt.Errorf("check %q: want [label|]bench:unit(>=|<=|<|>)limit[|why]", s)
	}
	c.bench, c.unit, c.op = m[1], m[2], m[3]
	var err error
	c.limit, err = strconv.ParseFloat(m[4], 64)
	if c.label == "" {
		c.label = c.bench + " " + c.unit
	}
	return c, err
}

func (c check) met(v float64) bool {
	switch c.op {
	case ">=":
		return v >= c.limit
	case ">":
		return v > c.limit
	case "<=":
		return v <= c.limit
	}
	return v < c.limit
}

// formatUnit prints a value of a `go test -bench` unit readably.
func formatUnit(unit string, v float64) string {
	switch {
	case unit == "ns/op" || strings.HasPrefix(unit, "cpu-ns/") || strings.HasSuffix(unit, "ns/op"):
		return ns(v)
	case strings.HasSuffix(unit, "/s") || strings.HasSuffix(unit, "/cpu-s"):
		return rate(v)
	case unit == "B/op":
		if v >= 1e6 {
			return fmt.Sprintf("%.1f MB", v/1e6) // the budgets say MB
		}
		return fmt.Sprintf("%.0f B", v)
	case unit == "allocs/op":
		return fmt.Sprintf("%.0f", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

type checks []string

func (c *checks) String() string     { return strings.Join(*c, ", ") }
func (c *checks) Set(s string) error { *c = append(*c, s); return nil }

// gobench prints a table of medians (with min–max) of every benchmark in a `go test -bench`
// output file, and records the checks.
func gobench(args []string) error {
	fs := flag.NewFlagSet("gobench", flag.ExitOnError)
	var c common
	c.register(fs)
	var cs checks
	fs.Var(&cs, "check", "budget: [label|]bench:unit(>=|<=|<|>)limit[|why when missed] (repeatable)")
	fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("want one `go test -bench` output file")
	}
	b, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	res, order := parseBench(string(b))
	if len(order) == 0 {
		return fmt.Errorf("%s: no benchmark results", fs.Arg(0))
	}
	var units []string
	seen := map[string]bool{}
	runs := 0
	for _, name := range order {
		for _, u := range res[name].units {
			if !seen[u] {
				seen[u] = true
				units = append(units, u)
			}
			runs = max(runs, len(res[name].values[u]))
		}
	}
	fmt.Printf("Median (min–max) over %d runs of each benchmark.\n\n", runs)
	fmt.Printf("| benchmark | %s |\n", strings.Join(units, " | "))
	fmt.Printf("| --- |%s\n", strings.Repeat(" ---: |", len(units)))
	for _, name := range order {
		row := []string{name}
		for _, u := range units {
			s := res[name].values[u]
			row = append(row, s.spread(func(v float64) string { return formatUnit(u, v) }))
		}
		fmt.Printf("| %s |\n", strings.Join(row, " | "))
	}
	fmt.Println()
	for _, spec := range cs {
		ck, err := parseCheck(spec)
		if err != nil {
			return err
		}
		r := res[ck.bench]
		if r == nil || len(r.values[ck.unit]) == 0 {
			return fmt.Errorf("check %q: no %s result for %s", spec, ck.unit, ck.bench)
		}
		med := r.values[ck.unit].median()
		v := Verdict{
			Figure:   ck.label,
			Goal:     strings.NewReplacer(">=", "≥", "<=", "≤").Replace(ck.op) + " " + formatUnit(ck.unit, ck.limit),
			Measured: formatUnit(ck.unit, med) + " (" + ck.unit + ")",
			Value:    med,
			Unit:     ck.unit,
			Met:      ck.met(med),
		}
		if !v.Met {
			v.Why = ck.why
		}
		if err := c.verdict(v); err != nil {
			return err
		}
	}
	return nil
}
