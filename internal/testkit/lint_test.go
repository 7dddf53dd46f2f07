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
