package testkit

import (
	"bufio"
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
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "bin" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // another module: not in ./...
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "package ") {
				break
			}
			if !constraint.IsGoBuild(line) {
				continue
			}
			expr, err := constraint.Parse(line)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				break
			}
			rel, _ := filepath.Rel(root, path)
			for _, tag := range tagsOf(expr) {
				if !platformTags[tag] && !strings.HasPrefix(tag, "go1.") {
					used[tag] = append(used[tag], rel)
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
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
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	heavy := regexp.MustCompile(`\b(StartNode|StartCollector|StartJaeger)\(`)
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if !heavy.Match(src) {
			return nil
		}
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(line, "package ") {
				break
			}
			if constraint.IsGoBuild(line) {
				if expr, err := constraint.Parse(line); err == nil && !expr.Eval(func(tag string) bool { return tag != "e2e" }) {
					return nil // not built without the e2e tag
				}
			}
		}
		rel, _ := filepath.Rel(root, path)
		t.Errorf("%s starts a node, a collector or Jaeger without the e2e build tag: make test would build containerd, otelcol or Jaeger", rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no test file found")
	}
}
