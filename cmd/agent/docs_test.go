package main

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// commands are the agent's commands that take flags.
var commands = []string{"run", "trace", "inspect", "version"}

// otherPrograms are the flags README.md and docs/ name of programs other than the agent, with
// the program: a flag named there and in neither this list nor an agent command is stale.
var otherPrograms = map[string]string{
	"set":              "helm install",
	"namespace":        "helm install",
	"create-namespace": "helm install",
	"dry-run":          "helm install",
	"clusterrole":      "kubectl create clusterrolebinding",
	"serviceaccount":   "kubectl create clusterrolebinding",
	"enable-feature":   "prometheus",
	"stat":             "git show",
	"spec":             "mkimage",
	"raw":              "kubectl get",
	"previous":         "kubectl logs",
	"selector":         "the scripted fixture",
	"ground-truth":     "the scripted fixture",
	"cache-pause-file": "the scripted fixture",
	"local":            "ctr images tag",
	// kubectl reconscope (cmd/kubectl-reconscope checks that docs/kubectl-plugin.md names each)
	"context":         "kubectl reconscope",
	"agent-namespace": "kubectl reconscope",
	"agent-port":      "kubectl reconscope",
	"via":             "kubectl reconscope",
	"token":           "kubectl reconscope",
	"object":          "kubectl reconscope",
	"errors":          "kubectl reconscope",
	"follow":          "kubectl reconscope",
	"interval":        "kubectl reconscope",
	"sort":            "kubectl reconscope",
	"limit":           "kubectl reconscope",
	"user":            "kubectl create clusterrolebinding",
}

// flagMention is a flag named in prose: --name, or --prefix-* for every flag of a prefix.
var flagMention = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]*[a-z0-9](?:-\*)?)`)

// mentions returns the flags text names, each once.
func mentions(text string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range flagMention.FindAllStringSubmatch(text, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	return out
}

// helpOf returns what cmd --help prints before its flags, and the flags it lists.
func helpOf(t *testing.T, cmd string) (summary string, flags map[string]bool) {
	t.Helper()
	code, out, _ := runCLI(t, cmd, "--help")
	summary, list, ok := strings.Cut(out, "\nFlags:\n")
	if code != 0 || !ok {
		t.Fatalf("%s --help: exit %d, no Flags: section in %q", cmd, code, out)
	}
	flags = map[string]bool{}
	// pflag's listing: "  -o, --output string" or "      --pid int"; a description's wrapped
	// lines are indented further.
	for _, m := range regexp.MustCompile(`(?m)^(?:  -[a-z], |      )--([a-z0-9-]+)`).FindAllStringSubmatch(list, -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("%s --help lists no flag:\n%s", cmd, out)
	}
	return summary, flags
}

// known says whether flag (or, for prefix-*, some flag of the prefix) is in flags.
func known(flag string, flags map[string]bool) bool {
	if prefix, ok := strings.CutSuffix(flag, "*"); ok {
		for f := range flags {
			if strings.HasPrefix(f, prefix) {
				return true
			}
		}
		return false
	}
	return flags[flag]
}

// userDocs returns README.md and docs/*.md by name.
func userDocs(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(paths) == 0 {
		t.Fatalf("docs: %v, %d files", err, len(paths))
	}
	docs := map[string]string{}
	for _, p := range append(paths, "../../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs[strings.TrimPrefix(p, "../../")] = string(b)
	}
	return docs
}

// TestFlagsDocumented: the flags --help, README.md and docs/ speak of are the flags the agent
// has. Every flag a command's --help lists is named (--flag) in README.md or docs/; every flag
// they name is a flag of an agent command (or of another program, otherPrograms); and the
// text of a command's --help above its flags names only flags of that command (the commands'
// list only flags of some command, --help and --version).
func TestFlagsDocumented(t *testing.T) {
	all := map[string]bool{"help": true, "version": true}
	for _, cmd := range commands {
		summary, flags := helpOf(t, cmd)
		for f := range flags {
			all[f] = true
		}
		flags["help"] = true
		for _, f := range mentions(summary) {
			if !known(f, flags) {
				t.Errorf("%s --help speaks of --%s, which %s does not have", cmd, f, cmd)
			}
		}
	}
	// A deprecated flag works and is not listed: the docs may name it (as deprecated).
	deprecated := map[string]bool{}
	for _, c := range newProgram(io.Discard, io.Discard).Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Deprecated != "" {
				deprecated[f.Name] = true
			}
		})
	}
	_, usage, _ := runCLI(t, "--help")
	for _, f := range mentions(usage) {
		if !known(f, all) {
			t.Errorf("reconscope-agent --help speaks of --%s, which no command has", f)
		}
	}

	docs := userDocs(t)
	named := map[string]bool{}
	for name, text := range docs {
		for _, f := range mentions(text) {
			named[f] = true
			if !known(f, all) && !deprecated[f] && otherPrograms[f] == "" {
				t.Errorf("%s speaks of --%s, which no command of reconscope-agent has (another program's flag: add it to otherPrograms)", name, f)
			}
		}
	}
	var missing []string
	for f := range all {
		if f != "help" && f != "version" && !named[f] {
			missing = append(missing, "--"+f)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("flags --help lists that README.md and docs/ never name: %s", strings.Join(missing, ", "))
	}
	for f := range deprecated {
		if !named[f] {
			t.Errorf("deprecated --%s is named nowhere in README.md and docs/: say what replaces it", f)
		}
	}
	for f, prog := range otherPrograms {
		if all[f] {
			t.Errorf("--%s is listed as %s's, but reconscope-agent has it", f, prog)
		}
	}
}

// agentCall is a command line of reconscope-agent or kubectl reconscope in prose or a shell
// example, up to the end of its line, code span or shell command.
var agentCall = regexp.MustCompile(`(?:reconscope-agent|kubectl reconscope)\s+(?:run|trace|inspect|version|tail|top)\b[^\x60\n|;&]*`)

// singleDashFlag is a flag with one dash in a command line, as Go's flag package took it.
var singleDashFlag = regexp.MustCompile(`(?:^|[\s"'])-([a-z][a-z0-9-]+)`)

// argsFlag is a flag in a container's args, YAML list item or JSON array element.
var argsFlag = regexp.MustCompile(`(?m)(?:^\s*-\s+|"|,\s*)-([a-z][a-z0-9-]+)`)

// TestNoSingleDashLongFlags: the command lines README.md, docs/, the manifests, the chart and
// the Dockerfile give the agent spell long flags with two dashes (pflag takes -pid for -p -i
// -d and refuses it).
func TestNoSingleDashLongFlags(t *testing.T) {
	long := map[string]bool{}
	for _, c := range newProgram(io.Discard, io.Discard).Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) { long[f.Name] = true })
	}
	for name, text := range userDocs(t) {
		for _, call := range agentCall.FindAllString(text, -1) {
			for _, m := range singleDashFlag.FindAllStringSubmatch(call, -1) {
				if long[m[1]] || otherPrograms[m[1]] == "kubectl reconscope" {
					t.Errorf("%s: %q gives -%s one dash", name, strings.TrimSpace(call), m[1])
				}
			}
		}
	}
	var files []string
	_ = filepath.WalkDir("../../deploy", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".tpl")) {
			files = append(files, p)
		}
		return nil
	})
	if len(files) < 5 {
		t.Fatalf("deploy/: %d YAML files", len(files))
	}
	for _, p := range append(files, "../../Dockerfile") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range argsFlag.FindAllStringSubmatch(string(b), -1) {
			if long[m[1]] {
				t.Errorf("%s: -%s has one dash", strings.TrimPrefix(p, "../../"), m[1])
			}
		}
	}
}
