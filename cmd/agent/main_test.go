package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"k8s.io/klog/v2"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersionAndHelp(t *testing.T) {
	if code, out, _ := runCLI(t, "version"); code != 0 || !strings.HasPrefix(out, "reconscope-agent ") {
		t.Errorf("version: %d %q", code, out)
	}
	code, out, _ := runCLI(t, "--help")
	if code != 0 {
		t.Errorf("--help exit %d", code)
	}
	for _, cmd := range []string{"trace", "inspect", "version"} {
		if !strings.Contains(out, cmd) {
			t.Errorf("--help does not mention %s", cmd)
		}
	}
	for _, cmd := range []string{"trace", "inspect"} {
		code, out, _ := runCLI(t, cmd, "--help")
		if code != 0 || !strings.Contains(out, "Flags:") || !strings.Contains(out, "Usage: reconscope-agent "+cmd) {
			t.Errorf("%s --help: %d %q", cmd, code, out)
		}
	}
	if code, _, errOut := runCLI(t, "frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Errorf("unknown command: %d %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "trace"); code != 2 || !strings.Contains(errOut, "--pid or --exe") {
		t.Errorf("trace without target: %d %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "trace", "--pid", "1", "--probe", "nonsense"); code != 2 || !strings.Contains(errOut, "SYMBOL=controller:NAME") {
		t.Errorf("bad --probe: %d %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "trace", "--pid", "1", "--controller", "deployment", "--controller", "replica[set"); code != 2 ||
		!strings.Contains(errOut, `--controller: pattern "replica[set": syntax error in pattern`) {
		t.Errorf("bad --controller glob: %d %q", code, errOut)
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("include:\n  - executables: [kube-controller-manager]\n    controllers: [\"deploy[\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "run", "--config", cfg); code != 2 || !strings.Contains(errOut, `include[0]: controllers: pattern "deploy["`) {
		t.Errorf("run --config with a bad controllers glob: %d %q", code, errOut)
	}
}

// TestInspectBadInput: a clear message and the right exit code, never a panic.
func TestInspectBadInput(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	empty := filepath.Join(dir, "empty")
	os.WriteFile(text, []byte("hello\n"), 0o644)
	os.WriteFile(empty, nil, 0o644)
	// A Go program with no controller in it: the test bed's pause container.
	plainGo := testkit.Build(t, "./test/tools/pause")
	whole, err := os.ReadFile(plainGo)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated")
	os.WriteFile(truncated, whole[:len(whole)/2], 0o755)

	tests := []struct {
		name, path string
		code       int
		says       string
	}{
		{"missing", filepath.Join(dir, "nope"), 1, "no such file"},
		{"directory", dir, 1, "directory"},
		{"text file", text, 3, "not an ELF"},
		{"empty file", empty, 3, "not an ELF"},
		{"non-Go ELF", "/bin/ls", 3, "not a Go executable"},
		{"truncated Go binary", truncated, 1, "truncated"},
		{"Go binary without controllers", plainGo, 3, "no probe applies"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := runCLI(t, "inspect", tc.path)
			if code != tc.code || !strings.Contains(strings.ToLower(out), strings.ToLower(tc.says)) {
				t.Errorf("inspect %s: exit %d, want %d; output:\n%s\nwant it to say %q", tc.path, code, tc.code, out, tc.says)
			}
			code, out, errOut := runCLI(t, "inspect", tc.path, "-o", "json")
			var rep InspectReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("-o json output is not JSON: %v\n%s", err, out)
			}
			if code != tc.code || rep.Traceable || rep.Reason == "" || !strings.Contains(errOut, rep.Reason) || rep.Schema != InspectSchema {
				t.Errorf("-o json: exit %d, report %+v, stderr %q; want schema %q", code, rep, errOut, InspectSchema)
			}
			wantSnakeCase(t, out)
		})
	}
	// Usage errors have their own status.
	for _, args := range [][]string{{"inspect"}, {"inspect", "a", "b"}, {"inspect", "--pid", "1", plainGo}, {"inspect", "--no-such-flag", plainGo}} {
		if code, _, _ := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (usage error)", args, code, exitUsage)
		}
	}
}

// TestInspectJSONSnakeCase: a report with every field set, slices and nested objects
// included, has only snake_case keys; real outputs are walked by the other inspect tests.
func TestInspectJSONSnakeCase(t *testing.T) {
	site := InspectSite{Address: 1, Offset: 2, FileOffset: 3, Insn: "RET", Trap: "single-stepped"}
	rep := InspectReport{
		Binary: "b", Traceable: true, Reason: "r", GoVersion: "go1.26.8", Arch: "amd64", Stripped: true, PIE: true, DWARF: true,
		MainModule: "m", Modules: map[string]string{"sigs.k8s.io/controller-runtime": "v0.25.2"},
		Probes:               []InspectProbe{{Probe: "p", Role: "span", Symbol: "s", Address: 1, Size: 2, Entry: site, Returns: []InspectSite{site}}},
		Offsets:              []InspectOffset{{Type: "t", Field: "f", Value: 1, Source: "dwarf", Error: "e"}},
		Missing:              []InspectMissing{{Probe: "p", Reason: "r"}},
		GoroutineInheritance: InspectInheritance{Mode: "off", Attached: true, Why: "w"},
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if n := wantSnakeCase(t, string(b)); n != 1 {
		t.Errorf("walked %d missing entries, want 1", n)
	}
	// Every field of every type is in the output (no omitempty hides one from the walk).
	for _, key := range []string{`"binary"`, `"reason"`, `"go_version"`, `"main_module"`, `"file_offset"`, `"returns"`, `"source"`, `"error"`, `"missing"`, `"probe"`, `"goroutine_inheritance"`, `"attached"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("%s not in %s", key, b)
		}
	}
}

// snakeKey is a JSON key in snake_case.
var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// wantSnakeCase walks every object of a JSON document and checks that every key is snake_case
// (the keys of "modules", module paths, are values, not field names). It returns how many
// "missing" entries it walked.
func wantSnakeCase(t *testing.T, doc string) int {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	missing := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, child := range x {
				if path == ".modules" {
					continue
				}
				if !snakeKey.MatchString(k) {
					t.Errorf("key %s.%s is not snake_case", path, k)
				}
				walk(path+"."+k, child)
			}
		case []any:
			if path == ".missing" {
				missing += len(x)
			}
			for _, child := range x {
				walk(path, child)
			}
		}
	}
	walk("", v)
	return missing
}

// TestInspectFixture: the fixture controller is traceable, with its reconcile probe, entry
// and return sites and the offsets it needs, plain and stripped, at --detail calls; at the
// default detail (reconcile) the manager's path of a reconcile (its entry, the return address
// in reconcileHandler, the cache reader's copy of the object) is at instructions the kernel
// emulates.
func TestInspectFixture(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fixture controller")
	}
	for _, ldflags := range []string{"", "-s -w"} {
		bin := testkit.Build(t, "./test/fixtures/scripted-controller", "-ldflags="+ldflags)
		code, out, _ := runCLI(t, "inspect", "--output", "json", "--detail", "calls", bin)
		wantSnakeCase(t, out)
		var rep InspectReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if code != 0 || !rep.Traceable {
			t.Fatalf("ldflags %q: exit %d, %+v", ldflags, code, rep)
		}
		if rep.Stripped != (ldflags != "") || rep.Modules["sigs.k8s.io/controller-runtime"] != "v0.25.2" {
			t.Errorf("ldflags %q: stripped %v modules %v", ldflags, rep.Stripped, rep.Modules)
		}
		found := map[string]bool{}
		for _, p := range rep.Probes {
			found[p.Probe] = true
			for _, site := range append([]InspectSite{p.Entry}, p.Returns...) {
				if want := wantTrap(rep.Arch, site.Insn); site.Trap != want {
					t.Errorf("%s: site %#x %q is %q, want %q", p.Symbol, site.Address, site.Insn, site.Trap, want)
				}
			}
			if p.Entry.Address <= p.Address || p.Entry.Insn == "" {
				t.Errorf("%s: entry site %+v is not after the stack check of %#x", p.Symbol, p.Entry, p.Address)
			}
			// a work queue's requeues are entry sites alone (what the worker did, before Done)
			if (p.Role == "span" || p.Role == "call" || p.Role == "goroutine-start") && len(p.Returns) == 0 && p.Probe != "client-go/workqueue-requeue" {
				t.Errorf("%s: no return site", p.Symbol)
			}
			for _, r := range p.Returns {
				// goroutine-start's return is newproc's call of runqput, with the new g; the
				// reconcile's are the return addresses in its callers (r.In)
				// a work-queue item ends at its queue's Done's entry
				if !strings.HasPrefix(r.Insn, "RET") && (p.Role != "goroutine-start" || r.Insn != "CALL runtime.runqput(SB)") &&
					(p.Probe != "controller-runtime/reconcile" || !strings.HasPrefix(r.In, "sigs.k8s.io/controller-runtime/pkg/internal/controller.")) &&
					(p.Probe != "client-go/workqueue" || !strings.HasSuffix(r.In, "]).Done") || r.Insn != "PUSHQ BP") {
					t.Errorf("%s: return site %+v is not a RET", p.Symbol, r)
				}
			}
		}
		choices := map[string]string{}
		for _, c := range rep.Choices {
			if !strings.HasPrefix(c.Probe, "client-go/workqueue") { // one per queue shape
				choices[c.Probe] = c.Sites
			}
		}
		if !strings.Contains(choices["runtime/goroutine-start"], "runtime.newproc.func1's calls") || !strings.Contains(choices["controller-runtime/reconcile"], "the return addresses of its calls") || len(choices) != 2 {
			t.Errorf("ldflags %q: choices %+v, want goroutine-start at runtime.newproc.func1's calls and the reconcile's return at its return addresses", ldflags, rep.Choices)
		}
		inspectDefaultDetail(t, bin)
		for _, want := range []string{"controller-runtime/reconcile", "controller-runtime/cache-get", "client-go/request"} {
			if !found[want] {
				t.Errorf("ldflags %q: no %s probe", ldflags, want)
			}
		}
		for _, o := range rep.Offsets {
			if o.Type == "runtime.g" && (o.Value == 0 || o.Error != "") {
				t.Errorf("goid offset %+v", o)
			}
		}
		if g := rep.GoroutineInheritance; g.Mode != "auto" || !g.Attached || !found["runtime/goroutine-start"] || !found["runtime/goroutine-exit"] {
			t.Errorf("ldflags %q: goroutine inheritance %+v, probes %v: want auto, attached", ldflags, g, found)
		}
		// Off: no goroutine probe, the others unchanged; the text report says so.
		code, out, _ = runCLI(t, "inspect", "-o=json", "--detail", "calls", bin, "--goroutine-inheritance", "off")
		var off InspectReport
		if err := json.Unmarshal([]byte(out), &off); err != nil || code != 0 {
			t.Fatalf("--goroutine-inheritance off: exit %d, %v", code, err)
		}
		var offProbes []string
		for _, p := range off.Probes {
			offProbes = append(offProbes, p.Probe)
			if p.Role == "goroutine-start" || p.Role == "goroutine-exit" {
				t.Errorf("--goroutine-inheritance off: probe %s (%s) attached", p.Probe, p.Role)
			}
		}
		if g := off.GoroutineInheritance; g.Mode != "off" || g.Attached || len(off.Probes) != len(rep.Probes)-2 {
			t.Errorf("--goroutine-inheritance off: %+v, probes %v (auto: %d probes)", g, offProbes, len(rep.Probes))
		}
		if _, text, _ := runCLI(t, "inspect", "--detail=calls", "--goroutine-inheritance=off", bin); !strings.Contains(text, "goroutines: inheritance off, probes not attached: no goroutine probe: calls made on goroutines a reconcile starts are in no span") {
			t.Errorf("--goroutine-inheritance=off: the text report does not say so:\n%s", text)
		}
	}
}

// inspectDefaultDetail checks inspect's plan of the fixture bin at the default detail: reconcile,
// no call probe but the cache read, and the sites a manager's reconcile hits emulated.
func inspectDefaultDetail(t *testing.T, bin string) {
	t.Helper()
	code, out, _ := runCLI(t, "inspect", bin, "-o", "json")
	var rep InspectReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("inspect at the default detail: exit %d, %v", code, err)
	}
	if rep.Detail != "reconcile" {
		t.Errorf("default detail %q, want reconcile", rep.Detail)
	}
	reconcileEnd, cacheRead := false, false
	for _, p := range rep.Probes {
		switch p.Probe {
		case "controller-runtime/reconcile":
			if p.Entry.Trap != "emulated" {
				t.Errorf("%s: entry %+v single-stepped", p.Symbol, p.Entry)
			}
			for _, r := range p.Returns {
				reconcileEnd = reconcileEnd || (strings.Contains(r.In, ").reconcileHandler") && r.Trap == "emulated")
			}
		case "controller-runtime/cache-get":
			cacheRead = p.Entry.Trap == "emulated" && len(p.Returns) == 0 && strings.HasPrefix(p.Entry.Insn, "CALL reflect.Value.Set")
		case "client-go/request", "client-go/response", "client-go/result-object", "runtime/goroutine-start", "runtime/goroutine-exit":
			t.Errorf("probe %s attached at the default detail", p.Probe)
		}
	}
	if !reconcileEnd || !cacheRead {
		t.Errorf("default detail: the reconcile's return in reconcileHandler emulated %v, the cache read at an emulated CALL reflect.Value.Set with no return site %v", reconcileEnd, cacheRead)
	}
}

// TestVersionFromBuildInfo: version prints the module version, VCS revision, dirty flag, Go
// release and architecture from Go's build information, with no ldflags.
func TestVersionFromBuildInfo(t *testing.T) {
	saved := readBuildInfo
	t.Cleanup(func() { readBuildInfo = saved })
	readBuildInfo = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/reconscope/reconscope", Version: "v0.4.1"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}, {Key: "GOARCH", Value: "arm64"}}}, true
	}
	for _, arg := range []string{"version", "--version"} {
		code, out, _ := runCLI(t, arg)
		if want := "reconscope-agent v0.4.1 revision 0123abcd (dirty) go1.26.8 arm64\n"; code != 0 || out != want {
			t.Errorf("%s: exit %d, %q; want %q", arg, code, out, want)
		}
	}
}

// TestVersionOfRealBuild: a binary built by 'go build' in this repository names its revision.
func TestVersionOfRealBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	if _, err := exec.LookPath("git"); err != nil {
		bpftest.SkipOrFail(t, "no git: go build records no VCS revision")
	}
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		bpftest.SkipOrFail(t, "not a git checkout: %v", err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		bpftest.SkipOrFail(t, "no git work tree: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a linked git worktree (.git is a file): go build records VCS information only in a clone")
	}
	// -buildvcs=true: GOFLAGS may say false (then go build records no revision).
	bin := testkit.Build(t, "./cmd/agent", "-buildvcs=true")
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), " revision "+strings.TrimSpace(string(rev))) {
		t.Errorf("--version = %q, want revision %s", out, rev)
	}
}

// TestErrorStyle: run and trace end with an error the same way: a usage error (exit 2) is one
// plain line naming the command; a failure (exit 1) is a record of the command's logger
// (text for trace, JSON for run when stderr is not a terminal).
func TestErrorStyle(t *testing.T) {
	for _, args := range [][]string{{"run", "--output", "nonsense"}, {"trace", "--pid", "1", "--output", "nonsense"}} {
		code, _, errOut := runCLI(t, args...)
		want := "reconscope-agent " + args[0] + `: --output "nonsense": want `
		if code != 2 || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s with a bad --output: exit %d, stderr %q; want 2 and one line %q…", args[0], code, errOut, want)
		}
	}
	code, _, errOut := runCLI(t, "trace", "--exe", filepath.Join(t.TempDir(), "missing"))
	if code != 1 || !strings.Contains(errOut, "level=ERROR msg=--exe err=") {
		t.Errorf("trace --exe of a missing file: exit %d, stderr %q; want 1 and a logged error", code, errOut)
	}

	bpftest.Require(t) // run fails after loading its programs: at the metrics listener
	code, _, errOut = runCLI(t, "run", "--metrics-addr", "256.256.256.256:1", "--proc-root", t.TempDir())
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	var rec struct{ Level, Msg, Err string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); code != 1 || err != nil || rec.Level != "ERROR" || rec.Msg != "serve metrics" || rec.Err == "" {
		t.Errorf("run with a metrics address it cannot listen on: exit %d, last line %q; want 1 and a JSON error record", code, lines[len(lines)-1])
	}
}

// wantTrap is what a probe hit at an instruction costs on arch, by the kernel's rules for the
// instructions the plan puts sites at (arch/x86/kernel/uprobes.c: branches, calls and register
// pushes are emulated, RET single-stepped; arm64: branches, BL and RET emulated): an
// independent reading of the instruction's text, not of the disassembler's decode.
func wantTrap(arch, insn string) string {
	op, _, _ := strings.Cut(insn, " ")
	switch arch {
	case "amd64":
		if op == "CALL" && !strings.Contains(insn, "(R") || op == "JMP" && !strings.Contains(insn, "(R") || op == "PUSHQ" && !strings.Contains(insn, "$") || op == "NOPL" || op == "NOPW" || op == "NOP" {
			return "emulated"
		}
	case "arm64":
		if op == "B" || op == "BL" || op == "RET" || op == "CBZ" || op == "CBNZ" || op == "TBZ" || op == "TBNZ" || strings.HasPrefix(op, "B") && len(op) == 3 {
			return "emulated"
		}
	}
	return "single-stepped"
}

// TestClientGoLogsInAgentFormat: a line client-go logs through klog (a reflector's error)
// comes out of the agent's logger, in its format and level, marked logger=client-go, not in
// klog's own format.
func TestClientGoLogsInAgentFormat(t *testing.T) {
	var buf bytes.Buffer
	if _, err := newLogger(&buf, "info", "json"); err != nil {
		t.Fatal(err)
	}
	defer klog.ClearLogger()
	klog.ErrorS(errors.New("connection refused"), "Failed to watch", "reflector", "pods")
	klog.V(4).InfoS("below the level") // klog's verbosity: not shown at its default
	klog.Flush()
	var line struct {
		Level, Msg, Logger, Err, Reflector string
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one JSON line, got %d:\n%s", len(lines), buf.String())
	}
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatalf("not a JSON line of the agent's logger: %v\n%s", err, lines[0])
	}
	if line.Level != "ERROR" || line.Msg != "Failed to watch" || line.Logger != "client-go" || line.Err != "connection refused" || line.Reflector != "pods" {
		t.Errorf("client-go's line as the agent logs it: %+v, from %s", line, lines[0])
	}
}
