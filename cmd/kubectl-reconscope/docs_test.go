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
	flagLine := regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)
	for _, cmd := range []string{"tail", "top"} {
		var out, errOut bytes.Buffer
		if code := run([]string{cmd, "--help"}, &out, &errOut); code != 0 {
			t.Fatalf("%s --help: exit %d: %s", cmd, code, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "Usage: kubectl reconscope "+cmd) {
			t.Errorf("%s --help starts %.60q", cmd, out.String())
		}
		for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
			name := "--" + m[1]
			if len(m[1]) == 1 {
				name = "-" + m[1]
			}
			if !bytes.Contains(doc, []byte(name)) {
				t.Errorf("%s --help lists %s, which docs/kubectl-plugin.md never names", cmd, name)
			}
		}
	}
}

// TestUsageErrors: a bad flag value is a usage error (exit 2) naming the flag, before any
// cluster is contacted.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"tail", "-o", "yaml"},
		{"tail", "--controller", "["},
		{"top", "--sort", "name"},
		{"tail", "--via", "ssh", "--kubeconfig", os.DevNull},
		{"nope"},
	} {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		if code == 0 || errOut.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q: want a usage error", args, code, errOut.String())
		}
	}
}
