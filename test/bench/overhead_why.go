package main

// The overhead bench's explanations: the record variants that take a record's cost apart, and
// the sentences of a verdict's Why, made from the figures measured.

import (
	"fmt"
	"os"
	"strings"
)

// recordVariants take apart what emitting a record costs (empty.bpf.c's rec_* programs).
var recordVariants = []struct {
	key, program, what string
	ringSize           int
	reader             int
}{
	{"rk", EmptyProgRecKtimeMulti, "the clock read alone (bpf_ktime_get_ns)", 0, readRing},
	{"r16", EmptyProgRec16Multi, "reserve, stamp, submit 16 bytes", 0, readRing},
	{"r64", EmptyProgRec64Multi, "reserve, stamp, submit 64 bytes", 0, readRing},
	{"e2", EmptyProgRecTwiceHeadMulti, "reserve, stamp, submit 136 bytes twice in one hit", 0, readRing},
	{"rd", EmptyProgRecDiscardMulti, "reserve 136 bytes and discard them", 0, readRing},
	{"rs", EmptyProgEventHeadOnlyMulti, "136 bytes, 256 KiB ring buffer", 256 << 10, readRing},
	{"rn", EmptyProgEventHeadOnlyMulti, "136 bytes, 64 MiB ring buffer that nothing reads (no reader on the other CPU)", 64 << 20, readNone},
	{"rw", EmptyProgRecWakeupMulti, "136 bytes with the wakeup logic reconscope had before (bpf_ringbuf_query per record, wake past 256 KiB waiting)", 0, readRing},
	{"rwc", EmptyProgRecWakeupCountMulti, "136 bytes with reconscope's wakeup logic (a byte count next to the counters, wake every 256 KiB submitted)", 0, readRing},
	{"ro", EmptyProgRecOutputMulti, "136 bytes built in a per-CPU scratch value, bpf_ringbuf_output", 0, readRing},
	{"rp", EmptyProgRecPerfMulti, "136 bytes built in a per-CPU scratch value, bpf_perf_event_output (2 MiB per CPU)", 2 << 20, readPerf},
	{"u1", EmptyProgRecRead1Multi, "no record: one bpf_probe_read_user of 16 bytes (a string header) from the goroutine's stack", 0, readRing},
	{"u5", EmptyProgRecRead5Multi, "no record: five bpf_probe_read_user of 16 bytes each, side by side", 0, readRing},
	{"u80", EmptyProgRecRead80Multi, "no record: one bpf_probe_read_user of the same 80 bytes", 0, readRing},
	{"rh", EmptyProgRecHashMissMulti, "no record: bpf_get_current_pid_tgid and a hash lookup that misses (the PID filter reconscope had before)", 0, readRing},
	{"rb", EmptyProgRecBitmapMissMulti, "no record: bpf_get_current_pid_tgid and a bit of a global bitmap that is not set (reconscope's PID filter: the early exit of a process not traced)", 0, readRing},
	{"rb2", EmptyProgRecTwiceBitmapMissMulti, "no record: the same twice in one hit", 0, readRing},
	{"rc", EmptyProgRecCounterMulti, "no record: a per-CPU array lookup and an increment (a counter as reconscope had them before)", 0, readRing},
	{"rcs", EmptyProgRecCounterSharedMulti, "no record: a counter in a small array shared by the CPUs, incremented atomically (reconscope's counters)", 0, readRing},
	{"x1", EmptyProgRecExitMulti, "no record: a call site's early exit as reconscope's program makes it (PID filter hit, hit counter, site table, goroutine-state miss, second counter)", 0, readRing},
	{"x2", EmptyProgRecTwiceExitMulti, "no record: the same early exit twice in one hit", 0, readRing},
}

// over is what a program of the stats rounds costs per hit over the empty program, for the
// explanations (the record variants; "—" when they did not run).
func over(perHit func(string) samples, key string) string {
	if len(perHit(key)) == 0 || len(perHit("dc")) == 0 {
		return "—"
	}
	return "+" + ns(perHit(key).median()-perHit("dc").median())
}

// warmPieces are the pieces measured once and twice in one hit (empty.bpf.c's *_twice_*).
var warmPieces = []struct{ what, once, twice string }{
	{"reserve, stamp, submit 136 bytes (struct event_head)", "eh", "e2"},
	{"the early exit of a process not traced (PID filter bitmap)", "rb", "rb2"},
	{"a call site's early exit (PID filter, hit counter, site table, goroutine state, counter)", "x1", "x2"},
}

// warm is the second pass of a piece, within each stats round: per hit, twice − once.
func warm(perHit func(string) samples, once, twice string) samples {
	a, b := perHit(once), perHit(twice)
	var s samples
	for i := range min(len(a), len(b)) {
		s = append(s, b[i]-a[i])
	}
	return s
}

// warmWhy is the measured warm second pass of a piece, for the explanations.
func warmWhy(perHit func(string) samples, what, once, twice string) string {
	w := warm(perHit, once, twice)
	if len(w) == 0 {
		return ""
	}
	return fmt.Sprintf("measured warm second pass of %s: %s per hit (section 1, where the TLB survives the trap); for that piece, a machine whose TLB survives the trap would pay about that, its cache lines warm", what, ns(w.median()))
}

// machineWhy is what the record variants show of this machine: the first touch of memory in a
// hit is what costs, whatever the instructions.
func machineWhy(perHit func(string) samples) string {
	return fmt.Sprintf("on this machine a hit pays for each piece of memory it touches first, not for its instructions: over the empty program (%s per hit, the kernel's stats' own clock reads in it), the clock read alone costs %s, one 16-byte read of the process's stack %s and five on the same page %s, a per-CPU counter %s where a shared one costs %s, a PID filter's hash lookup %s where a bitmap costs %s (section 1, what a record costs). %s",
		ns(perHit("dc").median()), over(perHit, "rk"), over(perHit, "u1"), over(perHit, "u5"), over(perHit, "rc"), over(perHit, "rcs"), over(perHit, "rh"), over(perHit, "rb"), tlbWhy())
}

// tlbWhy says whether this kernel flushes the TLB at every kernel entry: page-table isolation
// (the cpuinfo flag pti) without PCID switches to page tables that share no TLB entries.
func tlbWhy() string {
	flags := map[string]bool{}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
				for _, f := range strings.Fields(v) {
					flags[f] = true
				}
				break
			}
		}
	}
	if flags["pti"] && !flags["pcid"] {
		return "This kernel runs with page-table isolation and its CPU shows no PCID (cpuinfo flags: pti, no pcid), so every kernel entry of a uprobe's trap and single-step flushes the TLB and every page a hit touches is a TLB refill. A machine whose TLB survives the trap (PCID, or no page-table isolation: AMD CPUs need none on bare metal) does not pay that per hit; no such machine was measured here, but a second pass over the same pages in one hit runs with them in the TLB (section 1, where the TLB survives the trap)"
	}
	return fmt.Sprintf("This kernel's TLB is not flushed at every kernel entry (cpuinfo flags: pti %v, pcid %v): the first touches are cache misses", flags["pti"], flags["pcid"])
}

// programWhy explains a per-hit program time over 300 ns of the stats run key: in full for the
// first row (the reconcile probe's, b), by reference for the others.
func programWhy(perHit func(string) samples, key string) string {
	full := key == "b"
	record := fmt.Sprintf("a record alone costs about the budget or more here: reserve, stamp and submit cost %s per hit over the empty program for 16 bytes, %s for the 136-byte record of a site without strings and %s for the 920-byte one (%s with a 256 KiB ring buffer, %s through a perf event array), and the program also looks up the PID filter, the site table, the counters and the goroutine state and reads the process's strings and context",
		over(perHit, "r16"), over(perHit, "eh"), over(perHit, "ev"), over(perHit, "rs"), over(perHit, "rp"))
	if w := warmWhy(perHit, "the 136-byte record", "eh", "e2"); w != "" {
		record += "; " + w
	}
	if w := secondRunWhy(perHit, key); w != "" {
		record += "; " + w
	}
	if !full {
		return record + "; why memory costs so much here: see the reconcile probe's explanation"
	}
	return record + "; " + machineWhy(perHit)
}

// exitWhy explains an early exit over 60 ns.
func exitWhy(perHit func(string) samples, key string) string {
	what := "the exit itself is bpf_get_current_pid_tgid and a bit of the PID filter's bitmap (" + over(perHit, "rb") + " alone)"
	if w := warmWhy(perHit, "it", "rb", "rb2"); w != "" {
		what += "; " + w
	}
	if key == "xc" {
		what = "the exit is the PID filter, the counters, the site table and the goroutine state's lookup (a copy of it costs " + over(perHit, "x1") + ")"
		if w := warmWhy(perHit, "that copy", "x1", "x2"); w != "" {
			what += "; " + w
		}
	}
	if w := secondRunWhy(perHit, key); w != "" {
		what += "; " + w
	}
	return fmt.Sprintf("the empty program itself measures %s per hit, the kernel's stats' two clock reads in it, and %s; why memory costs so much here: see the reconcile probe's explanation", ns(perHit("dc").median()), what)
}

// warmPrograms are the stats runs of reconscope's program (the budget figures' rows) that run
// again with the program attached a second time at the same sites (withTwice), for what they
// cost where the TLB survives the trap.
var warmPrograms = []struct{ once, twice, what, goal string }{
	{"b", "b2", "", "≤ 300 ns"},
	{"c", "c2", "", "≤ 300 ns"},
	{"f", "f2", "", "≤ 300 ns"},
	{"xp", "xp2", ", early exit: the process is not traced", "≤ 60 ns"},
	{"xc", "xc2", ", early exit: a call site with no span open", "≤ 60 ns"},
}

// warmChecks check the second-run method on empty.bpf.c's programs: the empty program's
// second run, and the 136-byte record's against the record done twice in one program (e2).
var warmChecks = []struct{ once, twice, what, goal string }{
	{"dc", "dc2", "empty program", "—"},
	{"eh", "eh2", "event-head-only program: reserve, stamp, submit 136 bytes", "—"},
}

// withTwice puts after each configuration of warmPrograms and warmChecks its twin with the
// program attached twice, so that both run in every stats round, one after the other.
func withTwice(cfgs []ohConfig) []ohConfig {
	var out []ohConfig
	for _, c := range cfgs {
		out = append(out, c)
		for _, w := range append(warmPrograms[:len(warmPrograms):len(warmPrograms)], warmChecks...) {
			if c.key == w.once {
				t := c
				t.key, t.twice = w.twice, true
				t.label += ", the program attached twice"
				out = append(out, t)
			}
		}
	}
	return out
}

// secondRun is the program's second run in the same trap, per hit, within each stats round:
// the twice-attached run's time per run counts one first and one second run per hit, so the
// second is 2 × twice − once.
func secondRun(perHit func(string) samples, once, twice string) samples {
	a, b := perHit(once), perHit(twice)
	var s samples
	for i := range min(len(a), len(b)) {
		s = append(s, 2*b[i]-a[i])
	}
	return s
}

// readOnTouchedPage is what one more read of the process's memory costs on a page a hit has
// already touched: (five reads − one read) / 4 of the record variants, "—" when they did not run.
func readOnTouchedPage(perHit func(string) samples) string {
	if len(perHit("u5")) == 0 || len(perHit("u1")) == 0 {
		return "—"
	}
	return ns((perHit("u5").median() - perHit("u1").median()) / 4)
}

// secondRunOf is the measured second run of reconscope's whole program of the stats run once,
// for the Budgets section ("" when it did not run).
func secondRunOf(perHit func(string) samples, once string) string {
	for _, w := range warmPrograms {
		if w.once == once {
			if s := secondRun(perHit, w.once, w.twice); len(s) > 0 {
				return ns(s.median())
			}
		}
	}
	return ""
}

// secondRunWhy is secondRunOf for an explanation.
func secondRunWhy(perHit func(string) samples, once string) string {
	w := secondRunOf(perHit, once)
	if w == "" {
		return ""
	}
	return fmt.Sprintf("what a machine whose TLB survives the trap would pay (measured: the whole program's second run in the same trap, section 1): %s per hit, an estimate measured here, not on such a machine", w)
}
