package probes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// spawnProg starts goroutines from a function the test catalog probes as a span.
const spawnProg = `package main

import "sync"

//go:noinline
func call(i int) int { return i * 2 }

//go:noinline
func work(n int) int {
	var wg sync.WaitGroup
	out := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = call(i) }()
	}
	wg.Wait()
	return out[n-1]
}

func main() { println(work(4)) }
`

// spawnCatalog is a span probe on main.work, a call probe on main.call and the goroutine
// probes (which a plan keeps only with a call probe).
func spawnCatalog(goroutine ...*Probe) []*Probe {
	span := &Probe{ID: "test/work", Role: RoleSpan, Symbol: regexp.MustCompile(`^main\.work$`),
		Entry: layout(), Return: layout(), DecodeEntry: decodeIgnore, DecodeReturn: decodeIgnore}
	call := &Probe{ID: "test/call", Role: RoleCall, Symbol: regexp.MustCompile(`^main\.call$`),
		Entry: layout(), Return: layout(), DecodeEntry: decodeIgnore, DecodeReturn: decodeIgnore}
	return append([]*Probe{span, call}, goroutine...)
}

// buildSpawnProg builds spawnProg with a toolchain ("local" or a release) for arch.
func buildSpawnProg(t *testing.T, toolchain, arch string, stripped bool) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a program: skipped with -short")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(spawnProg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module spawnprog\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ldflags := "-n -n"
	if stripped {
		ldflags = "-s -w"
	}
	cmd := exec.Command("go", "build", "-o", "prog", "-ldflags="+ldflags, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+toolchain, "GOFLAGS=", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with %s for %s: %v\n%s", toolchain, arch, err, out)
	}
	return filepath.Join(dir, "prog")
}

// objdumpCalls returns the addresses of the `CALL name(SB)` instructions of fn in bin, by
// go tool objdump.
func objdumpCalls(t *testing.T, bin, fn string) map[string][]uint64 {
	t.Helper()
	out, err := exec.Command("go", "tool", "objdump", "-s", "^"+regexp.QuoteMeta(fn)+"$", bin).Output()
	if err != nil {
		t.Fatalf("go tool objdump: %v", err)
	}
	calls := map[string][]uint64{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i := 2; i+1 < len(f); i++ {
			if f[i] == "CALL" && strings.HasSuffix(f[i+1], "(SB)") {
				addr, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
				if err != nil {
					t.Fatalf("objdump line %q: %v", line, err)
				}
				name := strings.TrimSuffix(f[i+1], "(SB)")
				calls[name] = append(calls[name], addr)
			}
		}
	}
	return calls
}

// TestGoroutineStartAtCalls: in real programs (amd64 and arm64, stripped or not, each Go release
// this project builds with), the goroutine-start probe's sites are newproc's closure's calls of
// runtime.newproc1 and runtime.runqput, where go tool objdump puts them, and the plan says so;
// each reads the g the site is about from the second argument register.
func TestGoroutineStartAtCalls(t *testing.T) {
	for _, tc := range toolchains {
		for _, arch := range []string{"amd64", "arm64"} {
			// objdump needs the symbol table: the stripped build is read from its unstripped
			// twin's listing (same addresses: "-n -n" is as long as "-s -w").
			var want map[string][]uint64
			for _, stripped := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s-%s-stripped=%v", tc, arch, stripped), func(t *testing.T) {
					path := buildSpawnProg(t, tc, arch, stripped)
					plan := planWith(t, path, spawnCatalog(GoroutineProbes...))
					if !stripped {
						want = objdumpCalls(t, path, "runtime.newproc.func1")
					}
					if len(want["runtime.newproc1"]) != 1 || len(want["runtime.runqput"]) != 1 {
						t.Fatalf("objdump of runtime.newproc.func1: calls %v, want one of newproc1 and one of runqput", want)
					}
					var got []Site
					for _, s := range plan.Sites {
						if s.Probe.ID == "runtime/goroutine-start" {
							got = append(got, s)
						}
					}
					if len(got) != 2 {
						t.Fatalf("%d goroutine-start sites, want 2: %+v (choices %+v, missing %+v)", len(got), got, plan.Choices, plan.Missing)
					}
					for _, s := range got {
						callee, wantAddr := "runtime.newproc1", want["runtime.newproc1"][0]
						if s.Kind == SiteReturn {
							callee, wantAddr = "runtime.runqput", want["runtime.runqput"][0]
						}
						if s.Function.Name != "runtime.newproc.func1" || s.Addr != wantAddr || s.Insn != "CALL "+callee+"(SB)" {
							t.Errorf("%s site %s+%#x %q, want objdump's CALL %s at %#x", s.Kind, s.Function.Name, s.Addr-s.Function.Entry, s.Insn, callee, wantAddr)
						}
						if s.Layout().Save != 1 {
							t.Errorf("%s site reads the g from slot %d, want 1 (the second argument)", s.Kind, s.Layout().Save)
						}
					}
					if len(plan.Choices) != 1 || plan.Choices[0].Why != "" || !strings.Contains(plan.Choices[0].Sites, "runtime.newproc.func1's calls of runtime.newproc1 and runtime.runqput") {
						t.Errorf("choices %+v, want the calls in runtime.newproc.func1", plan.Choices)
					}
				})
			}
		}
	}
}

// TestGoroutineStartFallback: where newproc's closure does not have the shape the catalog
// expects (here: a pair of calls in the wrong order), the plan probes newproc1's entry and
// RETs, reads the new g from the result register there, and says why.
func TestGoroutineStartFallback(t *testing.T) {
	path := buildSpawnProg(t, "local", "amd64", true)
	wrong := *GoroutineProbes[0]
	wrong.Calls = &CallPair{Entry: "runtime.runqput", Return: "runtime.newproc1"}
	plan := planWith(t, path, spawnCatalog(&wrong, GoroutineProbes[1], GoroutineProbes[2]))
	var entry, rets int
	for _, s := range plan.Sites {
		if s.Probe.ID != "runtime/goroutine-start" {
			continue
		}
		if s.Function.Name != "runtime.newproc1" {
			t.Errorf("goroutine-start site in %s", s.Function.Name)
		}
		if s.Kind == SiteEntry {
			entry++
			if s.Layout().Save != 1 {
				t.Errorf("entry reads the creating g from slot %d, want 1", s.Layout().Save)
			}
		} else {
			rets++
			if s.Insn != "RET" || s.Layout().Save != 0 {
				t.Errorf("return site %q reads the new g from slot %d, want a RET and slot 0", s.Insn, s.Layout().Save)
			}
		}
	}
	if entry != 1 || rets == 0 {
		t.Errorf("%d entry and %d return sites in runtime.newproc1", entry, rets)
	}
	if len(plan.Choices) != 1 || !strings.Contains(plan.Choices[0].Sites, "the entry and RETs of runtime.newproc1 (a RET is single-stepped)") ||
		!strings.Contains(plan.Choices[0].Why, "its call of runtime.newproc1 comes before its call of runtime.runqput") {
		t.Errorf("choices %+v, want the fallback and why", plan.Choices)
	}
	for _, m := range plan.Missing {
		if m.ProbeID == "runtime/goroutine-start" {
			t.Errorf("goroutine-start reported missing although its fallback applies: %s", m.Reason)
		}
	}
}

// TestInheritanceSites: the agent's --goroutine-inheritance decides which goroutine sites the
// plan of a program with a span and a call probe has: off, none (and the span and call sites
// stay); auto, newproc's calls and goexit1; newproc1, newproc1's entry and RETs and goexit1.
func TestInheritanceSites(t *testing.T) {
	path := buildSpawnProg(t, "local", "amd64", true)
	const exit = "goroutine-exit runtime.goexit1 entry"
	for _, tc := range []struct {
		flag string
		want []string // goroutine sites: role, function, kind (sorted)
	}{
		{"auto", []string{exit, "goroutine-start runtime.newproc.func1 entry", "goroutine-start runtime.newproc.func1 return"}},
		{"off", nil},
		{"newproc1", []string{exit, "goroutine-start runtime.newproc1 entry", "goroutine-start runtime.newproc1 return"}},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			var i Inheritance
			if err := i.Set(tc.flag); err != nil || i.String() != tc.flag {
				t.Fatalf("Set(%q): %v, String() %q", tc.flag, err, i.String())
			}
			plan := planWith(t, path, i.Catalog(spawnCatalog(GoroutineProbes...)))
			var got []string
			roles := map[Role]bool{}
			for _, s := range plan.Sites {
				roles[s.Probe.Role] = true
				if s.Probe.Role == RoleSpawn || s.Probe.Role == RoleExit {
					got = append(got, fmt.Sprintf("%s %s %s", s.Probe.Role, s.Function.Name, s.Kind))
				}
			}
			slices.Sort(got)
			if got = slices.Compact(got); !slices.Equal(got, tc.want) || !roles[RoleSpan] || !roles[RoleCall] {
				t.Errorf("goroutine sites %q, want %q; roles %v, want span and call", got, tc.want, roles)
			}
			if tc.flag == "off" && len(plan.Choices) != 0 {
				t.Errorf("choices %+v, want none (no goroutine probe)", plan.Choices)
			}
		})
	}
	var i Inheritance
	if err := i.Set("on"); err == nil {
		t.Error(`Set("on") = nil, want an error naming auto and off`)
	}
}
