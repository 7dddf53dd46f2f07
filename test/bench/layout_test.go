package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestLayoutCommitted lays out the committed BENCHMARKS.md again from the committed
// BENCHMARKS.json: one table under Budgets, every figure in it; each figure that misses its
// goal explained once, in prose, in the section that measures it; the headings (hand-added
// subsections among them) and every other line kept; a second layout changes nothing; and the
// committed file is laid out already.
func TestLayoutCommitted(t *testing.T) {
	b, err := os.ReadFile("../../BENCHMARKS.json")
	if err != nil {
		t.Skipf("no committed BENCHMARKS.json: %v", err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	got, err := relayout(string(md), r.Figures)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := relayout(got, r.Figures); again != got {
		t.Error("a second layout changed the file")
	}
	if got != string(md) {
		t.Error("the committed BENCHMARKS.md is not laid out: run go run ./test/bench layout")
	}

	sections := splitSections(got)
	budgets := sections["## Budgets"]
	if n := strings.Count(budgets, "\n| --- "); n != 1 {
		t.Errorf("Budgets holds %d tables, want 1:\n%s", n, budgets)
	}
	for _, v := range r.Figures {
		if sectionOf(v.Figure) == 0 {
			t.Errorf("figure %q is measured by no section (figureSections)", v.Figure)
		}
		if !strings.Contains(budgets, "| "+v.Figure+" | "+v.Goal+" | "+v.Measured+" |") {
			t.Errorf("the summary table lacks %q", v.Figure)
		}
		para := "**" + v.Figure + "**: "
		if n := strings.Count(got, para); v.Met && n != 0 || !v.Met && n != 1 {
			t.Errorf("%q (met %v) is explained %d times", v.Figure, v.Met, n)
		}
		if !v.Met {
			for heading, text := range sections {
				if strings.Contains(text, para) && !strings.HasPrefix(heading, "## "+strconv.Itoa(sectionOf(v.Figure))+". ") {
					t.Errorf("%q is explained under %q", v.Figure, heading)
				}
			}
		}
	}
	if _, err := parseBenchmarksMD(got); err != nil {
		t.Errorf("bench compare cannot read the laid-out Budgets table: %v", err)
	}
	for n, q := range questions {
		if !strings.Contains(got, "\n## "+strconv.Itoa(n)+". "+q+"\n") {
			t.Errorf("section %d is not titled with its question %q", n, q)
		}
	}
	if i := strings.Index(got, "\n"+previousRunHeading+"\n"); i < 0 || strings.Contains(got[i+1:], "\n## ") {
		t.Error("the comparison with the previous run is not the last section")
	}
	if !strings.Contains(got, "### Detail levels") {
		t.Error("section 5's hand-added subsection on detail levels is gone")
	}
}

// TestLayoutKeepsText: layout adds and moves only budget prose, titles the sections with their
// questions and moves the comparison with the previous run last; every other line of the input
// stays, in order.
func TestLayoutKeepsText(t *testing.T) {
	md := strings.Join([]string{
		"# Benchmarks", "", "## Budgets", "", "old table", "", "- **x** (1 ns, goal ≤ 0 ns): old why", "",
		previousRunHeading, "", "| before | after |", "",
		"## 1. Cost", "", "| t |", "| --- |", "", "### Goroutine creation", "", "| g |", "", "### Hand-added", "", "kept", "",
		"## 2. Decode", "", "```", "## not a heading", "```", "",
		"## 3. Loss", "", "text", "",
	}, "\n")
	vs := []Verdict{
		{Figure: "BPF program time per hit, a", Goal: "≤ 300 ns", Measured: "875 ns", Why: "a; b (c; d); e", Warm: "274 ns"},
		{Figure: "decode + assemble, b", Goal: "≥ 1 M/s", Measured: "2 M/s", Met: true},
		{Figure: "something new", Goal: "< 1", Measured: "2", Why: "new"},
	}
	got, err := relayout(md, vs)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"# Benchmarks", "", "## Budgets", "",
		"| figure | goal | measured (median) | met |", "| --- | --- | --- | --- |",
		"| BPF program time per hit, a | ≤ 300 ns | 875 ns | **no** |",
		"| decode + assemble, b | ≥ 1 M/s | 2 M/s | yes |",
		"| something new | < 1 | 2 | **no** |", "",
		`2 of 3 figures miss their goal; why is told in the section that measures each, under its tables ("Against the budgets").`, "",
		"**something new**: 2 against a goal of < 1. New.", "",
		"## 1. " + questions[1], "", "| t |", "| --- |", "",
		budgetsHeading, "",
		"**BPF program time per hit, a**: 875 ns against a goal of ≤ 300 ns. A. B (c; d). E.", "",
		strings.TrimRight(warmTable(vs[:1]), "\n"), "",
		subsectionQuestions["### Goroutine creation"], "", "| g |", "", "### Hand-added", "", "kept", "",
		"## 2. " + questions[2], "", "```", "## not a heading", "```", "",
		"## 3. " + questions[3], "", "text", "",
		previousRunHeading, "", "| before | after |", "",
	}, "\n")
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if again, _ := relayout(got, vs); again != got {
		t.Errorf("a second layout changed it:\n%s", again)
	}
}

// splitSections maps each heading line to the text under it, up to the next heading.
func splitSections(md string) map[string]string {
	out := map[string]string{}
	heading := ""
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(l, "## ") {
			heading = l
			continue
		}
		out[heading] += l + "\n"
	}
	return out
}
