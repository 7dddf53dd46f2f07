package testkit

import (
	"go/build/constraint"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// platformTags are constraint names that select a platform or toolchain, not a set of files
// that make lint would otherwise miss: the files behind them are generated (bpf2go) or
// compiled on that platform.
var platformTags = map[string]bool{
	"386": true, "amd64": true, "arm": true, "arm64": true, "linux": true, "darwin": true,
	"windows": true, "unix": true, "cgo": true, "ignore": true,
}

// moduleGoFile is one .go file of this module as go ./... sees it (no testdata, no nested
// module), with its build constraint (nil when it has none).
type moduleGoFile struct {
	rel   string // path from the module root
	src   []byte
	build constraint.Expr
}

// moduleGoFiles reads every .go file of this module outside testdata and the nested tool
// modules.
func moduleGoFiles(t *testing.T) []moduleGoFile {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var out []moduleGoFile
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name := d.Name(); name == "testdata" || name == "bin" || strings.HasPrefix(name, ".") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module: not in ./...
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f := moduleGoFile{src: src}
		f.rel, _ = filepath.Rel(root, path)
		for _, line := range strings.Split(string(src), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "package ") {
				break
			}
			if constraint.IsGoBuild(line) {
				if f.build, err = constraint.Parse(line); err != nil {
					t.Errorf("%s: %v", f.rel, err)
				}
				break
			}
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no .go file found under the module root")
	}
	return out
}

// TestLintTagsCoverEveryBuildTag: every build tag that a //go:build line of this module names
// (outside testdata and the nested tool modules) is in the Makefile's LINT_TAGS, so make lint
// vets and staticchecks every file.
func TestLintTagsCoverEveryBuildTag(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LINT_TAGS\s*:?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no LINT_TAGS := ... line in the Makefile")
	}
	lint := strings.Split(string(m[1]), ",")

	used := map[string][]string{} // tag -> files naming it
	for _, f := range moduleGoFiles(t) {
		for _, tag := range tagsOf(f.build) {
			if !platformTags[tag] && !strings.HasPrefix(tag, "go1.") {
				used[tag] = append(used[tag], f.rel)
			}
		}
	}
	if len(used) == 0 {
		t.Fatal("no build tag found: the walk missed the module's files")
	}
	for tag, files := range used {
		if !slices.Contains(lint, tag) {
			t.Errorf("build tag %q (%s) is not in the Makefile's LINT_TAGS %v: make lint would not vet those files", tag, strings.Join(files, ", "), lint)
		}
	}
	for _, tag := range lint {
		if used[tag] == nil {
			t.Errorf("LINT_TAGS names %q, which no file uses", tag)
		}
	}
}

// tagsOf lists every tag a build constraint names (Eval would stop at the first true operand).
func tagsOf(e constraint.Expr) []string {
	switch e := e.(type) {
	case *constraint.TagExpr:
		return []string{e.Tag}
	case *constraint.NotExpr:
		return tagsOf(e.X)
	case *constraint.AndExpr:
		return append(tagsOf(e.X), tagsOf(e.Y)...)
	case *constraint.OrExpr:
		return append(tagsOf(e.X), tagsOf(e.Y)...)
	}
	return nil
}

// TestHeavyToolsOnlyBehindE2E: the tests that start containerd 2, the OpenTelemetry Collector
// or Jaeger (each built from source on first use) are behind the e2e build tag, so make test
// (go test ./... without tags) never builds them; make e2e runs them.
func TestHeavyToolsOnlyBehindE2E(t *testing.T) {
	heavy := regexp.MustCompile(`\b(StartNode|StartCollector|StartJaeger)\(`)
	for _, f := range moduleGoFiles(t) {
		if !strings.HasSuffix(f.rel, "_test.go") || !heavy.Match(f.src) {
			continue
		}
		if f.build != nil && !f.build.Eval(func(tag string) bool { return tag != "e2e" }) {
			continue // not built without the e2e tag
		}
		t.Errorf("%s starts a node, a collector or Jaeger without the e2e build tag: make test would build containerd, otelcol or Jaeger", f.rel)
	}
}
