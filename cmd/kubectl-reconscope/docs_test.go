package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestFlagsDocumented: every flag of tail and top is named in docs/kubectl-plugin.md, and each
// command's --help prints its summary and flags.
func TestFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/kubectl-plugin.md")
	if err != nil {
		t.Fatal(err)
	}
	// pflag's listing: "  -n, --namespace string" or "      --object string".
	flagLine := regexp.MustCompile(`(?m)^(?:  -([a-z]), |      )--([a-z][a-z0-9-]*)`)
	for _, cmd := range []string{"tail", "top"} {
		var out, errOut bytes.Buffer
		if code := run([]string{cmd, "--help"}, &out, &errOut); code != 0 {
			t.Fatalf("%s --help: exit %d: %s", cmd, code, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "Usage: kubectl reconscope "+cmd) {
			t.Errorf("%s --help starts %.60q", cmd, out.String())
		}
		flags := flagLine.FindAllStringSubmatch(out.String(), -1)
		if len(flags) < 8 {
			t.Errorf("%s --help lists %d flags:\n%s", cmd, len(flags), out.String())
		}
		for _, m := range flags {
			names := []string{"--" + m[2]}
			if m[1] != "" {
				names = append(names, "-"+m[1])
			}
			for _, name := range names {
				if !bytes.Contains(doc, []byte(name)) {
					t.Errorf("%s --help lists %s, which docs/kubectl-plugin.md never names", cmd, name)
				}
			}
		}
	}
}

// TestUsageErrors: a bad flag or flag value is a usage error (exit 2), one line naming the
// command and what was wrong, before any cluster is contacted.
func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"tail", "-o", "yaml"}, `tail: --output "yaml": want tree or json`},
		{[]string{"tail", "--controller", "["}, "tail: --controller"},
		{[]string{"top", "--sort", "name"}, `top: --sort "name": want rate, p99 or errors`},
		{[]string{"tail", "--via", "ssh", "--kubeconfig", os.DevNull}, "tail: --via"},
		{[]string{"tail", "-namespace", "default"}, "a long flag takes two dashes: --namespace"},
		{[]string{"top", "default"}, `top: unexpected argument "default"`},
		{[]string{"nope"}, `unknown command "nope"`},
	} {
		var out, errOut bytes.Buffer
		code := run(tt.args, &out, &errOut)
		if code != 2 || !strings.HasPrefix(errOut.String(), "kubectl reconscope") || !strings.Contains(errOut.String(), tt.says) ||
			strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q: want 2 and one line saying %q", tt.args, code, errOut.String(), tt.says)
		}
	}
}

// TestCompletion: completion prints each shell's script; tail -o, top --sort and --via
// complete their values.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		var out, errOut bytes.Buffer
		if code := run([]string{"completion", shell}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "kubectl-reconscope") {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", shell, code, out.Len(), errOut.String())
		}
	}
	for args, want := range map[string]string{
		"tail -o":        "tree\njson\n",
		"top --sort":     "rate\np99\nerrors\n",
		"top --via":      "auto\nproxy\nport-forward\n",
		"tail -n x -o=j": "tree\njson\n",
	} {
		var out, errOut bytes.Buffer
		line := append([]string{"__complete"}, strings.Fields(args)...)
		if strings.HasSuffix(args, "=j") {
			line[len(line)-1] = "-o="
		} else {
			line = append(line, "")
		}
		if code := run(line, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), strings.ReplaceAll(want, "\n", "\n")) {
			t.Errorf("complete %q: exit %d, %q; want %q first", args, code, out.String(), want)
		}
	}
}
