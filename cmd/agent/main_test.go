package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
}

func goBuild(t *testing.T, dir, src string, args ...string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prog")
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, args...), "main.go")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// TestInspectBadInput: a clear message and the right exit code, never a panic.
func TestInspectBadInput(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	empty := filepath.Join(dir, "empty")
	os.WriteFile(text, []byte("hello\n"), 0o644)
	os.WriteFile(empty, nil, 0o644)
	plainGo := goBuild(t, t.TempDir(), "package main\nfunc main() { println(1) }\n")
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
		{"text file", text, 2, "not an ELF"},
		{"empty file", empty, 2, "not an ELF"},
		{"non-Go ELF", "/bin/ls", 2, "not a Go executable"},
		{"truncated Go binary", truncated, 1, "truncated"},
		{"Go binary without controllers", plainGo, 2, "no probe applies"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := runCLI(t, "inspect", tc.path)
			if code != tc.code || !strings.Contains(strings.ToLower(out), strings.ToLower(tc.says)) {
				t.Errorf("inspect %s: exit %d, want %d; output:\n%s\nwant it to say %q", tc.path, code, tc.code, out, tc.says)
			}
			code, out, errOut := runCLI(t, "inspect", "--json", tc.path)
			var rep InspectReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("--json output is not JSON: %v\n%s", err, out)
			}
			if code != tc.code || rep.Traceable || rep.Reason == "" || !strings.Contains(errOut, rep.Reason) {
				t.Errorf("--json: exit %d, report %+v, stderr %q", code, rep, errOut)
			}
		})
	}
}

// TestInspectFixture: the fixture controller is traceable, with its reconcile probe, entry
// and return sites and the offsets it needs, plain and stripped.
func TestInspectFixture(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fixture controller")
	}
	for _, ldflags := range []string{"", "-s -w"} {
		bin := filepath.Join(t.TempDir(), "scripted")
		cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "./test/fixtures/scripted-controller")
		cmd.Dir = "../.."
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, b)
		}
		code, out, _ := runCLI(t, "inspect", "--json", bin)
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
			if p.Entry.Address <= p.Address || p.Entry.Insn == "" {
				t.Errorf("%s: entry site %+v is not after the stack check of %#x", p.Symbol, p.Entry, p.Address)
			}
			if (p.Role == "span" || p.Role == "call" || p.Role == "goroutine-start") && len(p.Returns) == 0 {
				t.Errorf("%s: no return site", p.Symbol)
			}
			for _, r := range p.Returns {
				if !strings.HasPrefix(r.Insn, "RET") {
					t.Errorf("%s: return site %+v is not a RET", p.Symbol, r)
				}
			}
		}
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
	}
}
