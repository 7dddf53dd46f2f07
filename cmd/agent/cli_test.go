package main

import (
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reconscope/reconscope/internal/cli"
)

// TestCommandLine: what a user types, as the ecosystem's commands take it: flags before or
// after the arguments, -o/--output for every command that prints, --json kept for one release
// with a notice, long flags with two dashes (one dash is a usage error that says so), and
// usage errors one line naming the command, exit 2.
func TestCommandLine(t *testing.T) {
	self, err := os.Executable() // a Go binary: inspect reports on it, traceable or not
	if err != nil {
		t.Fatal(err)
	}
	code, after, _ := runCLI(t, "inspect", self, "-o", "json")
	var rep InspectReport
	if err := json.Unmarshal([]byte(after), &rep); err != nil || rep.Schema != InspectSchema || rep.Binary != self {
		t.Fatalf("inspect BINARY -o json: exit %d, %v, report schema %q binary %q; want schema %q", code, err, rep.Schema, rep.Binary, InspectSchema)
	}
	for _, args := range [][]string{{"inspect", "-o", "json", self}, {"inspect", "--output=json", self}, {"inspect", "-ojson", self}} {
		if c, out, errOut := runCLI(t, args...); c != code || out != after || errOut != "" && code == 0 {
			t.Errorf("%q: exit %d, stderr %q, output differs from inspect BINARY -o json (exit %d)", args, c, errOut, code)
		}
	}
	c, out, errOut := runCLI(t, "inspect", "--json", self)
	if c != code || out != after || !strings.Contains(errOut, "--json has been deprecated, use -o json") {
		t.Errorf("inspect --json (deprecated): exit %d, stderr %q, same output %v; want exit %d, the JSON report and a notice", c, errOut, out == after, code)
	}
	if _, text, _ := runCLI(t, "inspect", self); json.Valid([]byte(text)) || !strings.Contains(text, self) {
		t.Errorf("inspect without -o: want the text report, got:\n%.300s", text)
	}

	usage := []struct {
		args []string
		says string
	}{
		{[]string{"inspect", "-pid", "5"}, "a long flag takes two dashes: --pid"},
		{[]string{"trace", "--pid", "1", "-output=json"}, "a long flag takes two dashes: --output=json"},
		{[]string{"inspect", "--json", "-o", "text", self}, "give one"},
		{[]string{"inspect", "-o", "yaml", self}, `--output "yaml": want text or json`},
		{[]string{"version", "-o", "yaml"}, `--output "yaml": want text or json`},
		{[]string{"trace", "--pid", "1", "-o", "yaml"}, `--output "yaml": want tree or json`},
		{[]string{"run", "-o", "tree"}, `--output "tree": want none or json`},
		{[]string{"run", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"run", "extra"}, `unexpected argument "extra"`},
		{[]string{"trace", "--duration", "soon", "--pid", "1"}, `invalid argument "soon" for "--duration"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	}
	for _, u := range usage {
		code, out, errOut := runCLI(t, u.args...)
		errOut = strings.TrimPrefix(errOut, "Flag --json has been deprecated, use -o json; --json goes in the next release\n")
		cmd := "reconscope-agent"
		if !strings.HasPrefix(u.args[0], "frob") {
			cmd += " " + u.args[0]
		}
		if code != 2 || out != "" || !strings.HasPrefix(errOut, cmd+": ") || !strings.Contains(errOut, u.says) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line %q naming %q", u.args, code, out, errOut, cmd+": …", u.says)
		}
	}
	if code, _, errOut := runCLI(t); code != 2 || !strings.Contains(errOut, "Commands:") {
		t.Errorf("no command: exit %d, stderr %q; want 2 and the usage", code, errOut)
	}
}

// TestHelp: --help, -h and help CMD print a command's summary and flags on stdout and exit 0;
// each flag is listed as --name (and -x for those that have a letter).
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"inspect", "--help"}, {"inspect", "-h"}, {"help", "inspect"}, {"inspect", "./bin/manager", "--help"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage: reconscope-agent inspect") ||
			!strings.Contains(out, "\n  -o, --output string") || !strings.Contains(out, "\n      --pid int") {
			t.Errorf("%q: exit %d, stderr %q, stdout:\n%s", args, code, errOut, out)
		}
		if strings.Contains(out, "--json") {
			t.Errorf("%q lists the deprecated --json:\n%s", args, out)
		}
	}
	for _, cmd := range []string{"run", "trace"} {
		_, out, _ := runCLI(t, cmd, "--help")
		if !strings.Contains(out, "\nEnvironment:\n") || !strings.Contains(out, "RECONSCOPE_<FLAG>") || !strings.Contains(out, "command line wins over the environment") {
			t.Errorf("%s --help does not say how the environment sets its flags:\n%s", cmd, out)
		}
	}
}

// TestVersionJSON: version -o json is one JSON object with the fields version prints.
func TestVersionJSON(t *testing.T) {
	code, out, _ := runCLI(t, "version", "-o", "json")
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("version -o json: exit %d, %v:\n%s", code, err, out)
	}
	b := agentBuild()
	want := map[string]any{"schema": VersionSchema, "version": b.Version, "revision": b.Revision, "dirty": b.Dirty, "go": b.GoVersion, "goarch": b.GoArch}
	for k, w := range want {
		if v[k] != w {
			t.Errorf("version -o json: %s = %v, want %v", k, v[k], w)
		}
	}
	if len(v) != len(want) {
		t.Errorf("version -o json: fields %v, want %v", v, want)
	}
	if _, text, _ := runCLI(t, "version"); text != versionLine()+"\n" {
		t.Errorf("version: %q, want %q", text, versionLine())
	}
}

// TestCompletion: completion prints each shell's script, and a shell completes the values of
// the flags that take one of a few: every value offered is one the flag takes.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		code, out, errOut := runCLI(t, "completion", shell)
		if code != 0 || !strings.Contains(out, "reconscope-agent") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", shell, code, len(out), errOut)
		}
	}
	want := map[string][]string{
		"run":     {"output", "log-level", "log-format", "detail", "goroutine-inheritance", "error-messages", "otlp-protocol"},
		"trace":   {"output", "log-level", "detail", "goroutine-inheritance", "error-messages", "otlp-protocol"},
		"inspect": {"output", "detail", "goroutine-inheritance"},
		"version": {"output"},
	}
	root := newProgram(io.Discard, io.Discard)
	for _, cmd := range root.Commands() {
		for _, name := range want[cmd.Name()] {
			complete, ok := cmd.GetFlagCompletionFunc(name)
			if !ok {
				t.Errorf("%s --%s: no completion", cmd.Name(), name)
				continue
			}
			values, _ := complete(cmd, nil, "")
			for _, v := range values {
				fresh, _, _ := newProgram(io.Discard, io.Discard).Find([]string{cmd.Name()})
				if err := fresh.Flags().Set(name, v); err != nil {
					t.Errorf("%s --%s: completion offers %q, which the flag refuses: %v", cmd.Name(), name, v, err)
				}
			}
			if len(values) < 2 {
				t.Errorf("%s --%s: completion offers %q", cmd.Name(), name, values)
			}
		}
	}
	// Through the shell's own entry point: output values of trace, in order.
	code, out, _ := runCLI(t, "__complete", "trace", "--output", "")
	if code != 0 || !strings.HasPrefix(out, "tree\njson\n") {
		t.Errorf("__complete trace --output '': exit %d, %q", code, out)
	}
}

// commandOf returns the command name of reconscope-agent, its RunE replaced by one that only
// records that it ran: the flags are parsed and set, from the command line and the
// environment, and nothing starts.
func commandOf(t *testing.T, name string) (*cobra.Command, *cobra.Command, *bool) {
	t.Helper()
	root := newProgram(io.Discard, io.Discard)
	cmd, _, err := root.Find([]string{name})
	if err != nil || cmd.Name() != name {
		t.Fatalf("no command %s: %v", name, err)
	}
	ran := new(bool)
	cmd.RunE = func(*cobra.Command, []string) error { *ran = true; return nil }
	return root, cmd, ran
}

// TestFlagsFromEnvironment: every flag of run and trace can be set as RECONSCOPE_<FLAG>; the
// command line wins over the environment, the environment over the default; a bad value in
// the environment is a usage error naming the variable.
func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("RECONSCOPE_METRICS_ADDR", "127.0.0.1:1")
	t.Setenv("RECONSCOPE_SAMPLE_NOOP_RATE", "0.5")
	t.Setenv("RECONSCOPE_REDACT_ERRORS", "token=[a-z]+")
	t.Setenv("RECONSCOPE_METRICS_SECURE", "true")
	t.Setenv("RECONSCOPE_OUTPUT", "json")
	t.Setenv("RECONSCOPE_REQUIRE_BPF", "1") // no flag of that name: not the agent's business

	root, cmd, ran := commandOf(t, "run")
	if code := cli.Run(root, []string{"run", "--sample-noop-rate", "0.25", "--redact-errors", "secret", "--scan-interval=3s"}); code != 0 || !*ran {
		t.Fatalf("run with flags from the environment: exit %d, ran %v", code, *ran)
	}
	want := map[string]string{
		"metrics-addr":     "127.0.0.1:1", // environment
		"sample-noop-rate": "0.25",        // command line over environment
		"redact-errors":    "secret",      // command line over environment, not both
		"metrics-secure":   "true",        // environment
		"output":           "json",        // environment
		"scan-interval":    "3s",          // command line
		"log-level":        "info",        // default
	}
	for name, w := range want {
		if got := cmd.Flags().Lookup(name).Value.String(); got != w {
			t.Errorf("run --%s = %q, want %q", name, got, w)
		}
	}

	// The same for trace, through the same mechanism.
	root, cmd, ran = commandOf(t, "trace")
	if code := cli.Run(root, []string{"trace", "--pid", "1"}); code != 0 || !*ran {
		t.Fatalf("trace: exit %d, ran %v", code, *ran)
	}
	for name, w := range map[string]string{"output": "json", "metrics-addr": "127.0.0.1:1", "pid": "1", "detail": "reconcile"} {
		if got := cmd.Flags().Lookup(name).Value.String(); got != w {
			t.Errorf("trace --%s = %q, want %q", name, got, w)
		}
	}

	// Every flag: a variable set to a value other than the default is taken.
	for _, name := range []string{"run", "trace"} {
		_, cmd, _ := commandOf(t, name)
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			v := otherValue(f)
			fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
			fresh, _, _ := newProgram(io.Discard, io.Discard).Find([]string{name})
			fs.AddFlag(fresh.Flags().Lookup(f.Name))
			lookup := func(k string) (string, bool) { return v, k == cli.EnvName(envPrefix, f.Name) }
			if err := cli.SetFromEnv(fs, envPrefix, lookup); err != nil || !fs.Changed(f.Name) {
				t.Errorf("%s: %s=%q: %v, set %v", name, cli.EnvName(envPrefix, f.Name), v, err, fs.Changed(f.Name))
			}
		})
	}

	t.Setenv("RECONSCOPE_SAMPLE_NOOP_RATE", "lots")
	for _, name := range []string{"run", "trace"} {
		root, _, ran := commandOf(t, name)
		var errOut strings.Builder
		root.SetErr(&errOut)
		code := cli.Run(root, []string{name})
		if code != 2 || *ran || strings.Count(errOut.String(), "\n") != 1 ||
			!strings.HasPrefix(errOut.String(), "reconscope-agent "+name+`: RECONSCOPE_SAMPLE_NOOP_RATE="lots": `) {
			t.Errorf("%s with a bad value in the environment: exit %d, ran %v, stderr %q; want 2 and one line naming the variable", name, code, *ran, errOut.String())
		}
	}
}

// otherValue is a value flag f takes that is not its default.
func otherValue(f *pflag.Flag) string {
	special := map[string]string{
		"detail": "calls", "goroutine-inheritance": "off", "output": "json", "log-level": "debug", "log-format": "json",
		"error-messages": "drop", "otlp-protocol": "grpc", "probe": "example.com/c.(*C).sync=controller:c",
		"detail-for": "deploy*=calls", "controller": "deployment", "pid": "42", "detail-switch-when": "p99",
	}
	if v, ok := special[f.Name]; ok {
		return v
	}
	switch f.Value.Type() {
	case "bool":
		return "true"
	case "int", "float64":
		return "7"
	case "duration":
		return "7s"
	}
	if slices.Contains([]string{"string", "strings"}, f.Value.Type()) {
		return "x" + f.DefValue
	}
	return "x"
}
