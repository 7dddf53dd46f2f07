package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// budgetsHeading heads, in each numbered section of BENCHMARKS.md, the prose on its figures
// that miss their goal (and, in section 1, what a machine whose TLB survives the trap would pay).
const budgetsHeading = "### Against the budgets"

// figureSections says which numbered section of BENCHMARKS.md measures a budget figure, by the
// start of the figure's name. A figure none of them names stays with its explanation under the
// summary table.
var figureSections = []struct {
	prefix  string
	section int
}{
	{"traced reconcile / bare probe hits", 1},
	{"BPF program time per hit", 1},
	{"decode + assemble", 2},
	{"lost events at", 3},
	{"`inspect` time", 4},
	{"symbols.Open", 4},
	{"agent peak RSS", 4},
	{"idle CPU added by tracing", 5},
}

// questions are the titles of BENCHMARKS.md's numbered sections, by number: the question each
// answers. layout gives every numbered section its question (run.sh writes the same ones).
var questions = map[int]string{
	1: "What does a reconcile cost the traced process?",
	2: "How many events a second can the agent decode and assemble?",
	3: "How fast can reconciles come before an event is lost?",
	4: "How long does `inspect` take on big binaries, and how much memory does the agent use?",
	5: "What does tracing cost real controllers at scale?",
}

// subsectionQuestions are the questions of the subsections run.sh writes, by the titles a
// BENCHMARKS.md written before them has.
var subsectionQuestions = map[string]string{
	"### Goroutine creation": "### What does each goroutine started cost the traced process?",
	"### A reconcile's return: at the RETs and at the return address": "### What does a reconcile's return cost, at its RETs and at its return address?",
	"### Agent memory while tracing 20 processes":                     "### How much memory does the agent use tracing 20 processes?",
}

// previousRunHeading heads the comparison with the previous run, which follows the sections.
const previousRunHeading = "## Compared with the previous run"

// sectionOf is the numbered section of BENCHMARKS.md that measures figure, 0 when none does.
func sectionOf(figure string) int {
	for _, f := range figureSections {
		if strings.HasPrefix(figure, f.prefix) {
			return f.section
		}
	}
	return 0
}

// layout rewrites BENCHMARKS.md's budgets from a Result (BENCHMARKS.json): under "## Budgets"
// one summary table (figure, goal, measured, met); then one numbered section per question
// (questions), and in each, after its own tables and before its first subsection, the
// explanations of the figures it measured that miss their goal, as prose; the comparison with
// the previous run last. The rest of the file is kept as it is, hand-added subsections
// included, so a committed BENCHMARKS.md can be laid out again from its BENCHMARKS.json without
// running a benchmark; make bench runs it on the file it has just written. A second run
// changes nothing.
func layout(args []string) error {
	fs := flag.NewFlagSet("layout", flag.ExitOnError)
	resultPath := fs.String("result", "BENCHMARKS.json", "the run's Result (BENCHMARKS.json)")
	mdPath := fs.String("md", "BENCHMARKS.md", "the BENCHMARKS.md to rewrite in place")
	fs.Parse(args)
	b, err := os.ReadFile(*resultPath)
	if err != nil {
		return err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("read %s: %w", *resultPath, err)
	}
	md, err := os.ReadFile(*mdPath)
	if err != nil {
		return err
	}
	out, err := relayout(string(md), r.Figures)
	if err != nil {
		return fmt.Errorf("lay out %s: %w", *mdPath, err)
	}
	return os.WriteFile(*mdPath, []byte(out), 0o644)
}

var numberedSection = regexp.MustCompile(`^## (\d+)\. `)

// relayout is layout on text: md is a BENCHMARKS.md, vs its run's figures.
func relayout(md string, vs []Verdict) (string, error) {
	lines := previousRunLast(askQuestions(removeBudgetBlocks(strings.Split(md, "\n"))))
	var out []string
	budgets := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if line == "## Budgets" {
			budgets = true
			out = append(out, line, "")
			out = append(out, strings.Split(strings.TrimRight(budgetSummary(vs, true), "\n"), "\n")...)
			out = append(out, "")
			j := nextHeading(lines, i+1, false)
			i = j - 1
			continue
		}
		out = append(out, line)
		m := numberedSection.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		block := sectionBudgets(vs, n)
		j := nextHeading(lines, i+1, true)
		out = append(out, lines[i+1:j]...)
		if block != "" {
			for len(out) > 0 && out[len(out)-1] == "" {
				out = out[:len(out)-1]
			}
			out = append(out, "")
			out = append(out, strings.Split(strings.TrimRight(block, "\n"), "\n")...)
			out = append(out, "")
		}
		i = j - 1
	}
	if !budgets {
		return "", fmt.Errorf("no \"## Budgets\" section")
	}
	return strings.Join(out, "\n"), nil
}

// nextHeading is the index of the first line from i on that starts a section ("## "), or with
// sub a subsection ("### ") too, outside code fences; len(lines) when none does.
func nextHeading(lines []string, i int, sub bool) int {
	fenced := false
	for ; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(l, "## ") || sub && strings.HasPrefix(l, "### ") {
			return i
		}
	}
	return i
}

// askQuestions titles each numbered section and each subsection run.sh writes with its
// question.
func askQuestions(lines []string) []string {
	out := make([]string, 0, len(lines))
	fenced := false
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced {
			if m := numberedSection.FindStringSubmatch(l); m != nil {
				if n, _ := strconv.Atoi(m[1]); questions[n] != "" {
					l = fmt.Sprintf("## %d. %s", n, questions[n])
				}
			}
			if q, ok := subsectionQuestions[l]; ok {
				l = q
			}
		}
		out = append(out, l)
	}
	return out
}

// previousRunLast moves the comparison with the previous run after the last section.
func previousRunLast(lines []string) []string {
	i := nextHeading(lines, 0, false)
	for i < len(lines) && lines[i] != previousRunHeading {
		i = nextHeading(lines, i+1, false)
	}
	if i == len(lines) {
		return lines
	}
	j := nextHeading(lines, i+1, false)
	block := trimBlank(slices.Clone(lines[i:j]))
	rest := trimBlank(append(slices.Clone(lines[:i]), lines[j:]...))
	return append(append(append(rest, ""), block...), "")
}

// trimBlank drops the empty lines at the end of lines.
func trimBlank(lines []string) []string {
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// removeBudgetBlocks takes out the blocks an earlier layout put in the sections.
func removeBudgetBlocks(lines []string) []string {
	var out []string
	for i := 0; i < len(lines); i++ {
		if lines[i] != budgetsHeading {
			out = append(out, lines[i])
			continue
		}
		i = nextHeading(lines, i+1, true) - 1
	}
	return out
}

// budgetSummary is the Budgets section's body: one table of every figure, then how many miss
// their goal (inSections: and that the sections measuring them say why); the explanations of
// misses no section measures follow it.
func budgetSummary(vs []Verdict, inSections bool) string {
	var b strings.Builder
	b.WriteString("| figure | goal | measured (median) | met |\n| --- | --- | --- | --- |\n")
	missed := 0
	for _, v := range vs {
		met := "yes"
		if !v.Met {
			met, missed = "**no**", missed+1
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", v.Figure, v.Goal, v.Measured, met)
	}
	b.WriteString("\n")
	if missed == 0 {
		b.WriteString("Every budget is met.\n")
		return b.String()
	}
	fmt.Fprintf(&b, "%d of %d figures miss their goal", missed, len(vs))
	if inSections {
		b.WriteString("; why is told in the section that measures each, under its tables (\"Against the budgets\")")
	}
	b.WriteString(".\n")
	for _, v := range vs {
		if !v.Met && sectionOf(v.Figure) == 0 {
			b.WriteString("\n" + missProse(v) + "\n")
		}
	}
	return b.String()
}

// sectionBudgets is the block of section n on its figures: a paragraph per figure that misses
// its goal, then the figures measured where the TLB survives the trap too; "" when there is
// nothing to say.
func sectionBudgets(vs []Verdict, n int) string {
	var misses, warm []Verdict
	for _, v := range vs {
		if sectionOf(v.Figure) != n {
			continue
		}
		if !v.Met {
			misses = append(misses, v)
		}
		if v.Warm != "" {
			warm = append(warm, v)
		}
	}
	if len(misses) == 0 && len(warm) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(budgetsHeading + "\n\n")
	for _, v := range misses {
		b.WriteString(missProse(v) + "\n\n")
	}
	if len(warm) > 0 {
		b.WriteString(warmTable(warm))
	}
	return b.String()
}

// missProse is the paragraph on a figure that misses its goal.
func missProse(v Verdict) string {
	p := fmt.Sprintf("**%s**: %s against a goal of %s.", v.Figure, v.Measured, v.Goal)
	if v.Why != "" {
		p += " " + prose(v.Why)
	}
	return p
}

// warmTable is what a machine whose TLB survives the trap would pay, for the figures that say
// (Verdict.Warm), with the sentence that introduces it.
func warmTable(warm []Verdict) string {
	var b strings.Builder
	b.WriteString("What a machine whose TLB survives the trap would pay (PCID, or no page-table isolation), measured here as the program's second run in the same trap: an estimate, not a run on such a machine (above, the whole program where the TLB survives the trap). The verdicts are this machine's.\n\n")
	b.WriteString("| figure | goal | on this machine | where the TLB survives the trap (measured: the second run in the same trap) |\n")
	b.WriteString("| --- | --- | --- | --- |\n")
	for _, v := range warm {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", v.Figure, v.Goal, v.Measured, v.Warm)
	}
	b.WriteString("\n")
	return b.String()
}

// prose turns a recorded explanation, clauses joined by "; ", into sentences: each clause
// outside parentheses starts one, capitalised, and ends with a full stop.
func prose(why string) string {
	var clauses []string
	depth, start := 0, 0
	for i := 0; i < len(why); i++ {
		switch why[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ';':
			if depth == 0 && i+1 < len(why) && why[i+1] == ' ' {
				clauses = append(clauses, why[start:i])
				start = i + 2
			}
		}
	}
	clauses = append(clauses, why[start:])
	var out []string
	for _, c := range clauses {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		r, size := utf8.DecodeRuneInString(c)
		c = string(unicode.ToUpper(r)) + c[size:]
		if !strings.HasSuffix(c, ".") {
			c += "."
		}
		out = append(out, c)
	}
	return strings.Join(out, " ")
}
