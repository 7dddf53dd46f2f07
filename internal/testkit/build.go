package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Build builds the main package pkg of this module — a path relative to the module root such
// as "./test/fakectl", or an import path — with go build and the given flags (e.g. "-trimpath",
// "-ldflags=-s -w", "-buildmode=pie") into t.TempDir, and returns the binary's path. It fails t
// when the build fails. Go's build cache makes repeated builds cheap (a link, a few seconds).
func Build(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	return BuildEnv(t, pkg, nil, flags...)
}

// BuildEnv is Build with env (e.g. "CGO_ENABLED=0") added to go's environment.
func BuildEnv(t testing.TB, pkg string, env []string, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(pkg))
	start := time.Now()
	if err := GoBuild(out, pkg, env, flags...); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	t.Logf("testkit: built %s in %s", pkg, time.Since(start).Round(time.Millisecond))
	return out
}

// GoBuild builds the main package pkg of this module into out, as Build does, for a build
// outside one test (once for a whole test binary, or in a program of the module's own).
func GoBuild(out, pkg string, env []string, flags ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s go %s: %w\n%s", strings.Join(env, " "), strings.Join(args, " "), err, msg)
	}
	return nil
}

// BuildModule builds the main package of the module of its own in dir — a folder relative to
// this module's root holding a go.mod and go.sum, such as "test/fixtures/external-provisioner"
// — with go build and the given flags into t.TempDir, and returns the binary's path. Its
// modules come from the module cache, or the Go module proxy the first time (go.sum checks
// them); Go's build cache makes repeated builds cheap.
func BuildModule(t testing.TB, dir string, flags ...string) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	out := filepath.Join(t.TempDir(), path.Base(dir))
	args := append(append([]string{"build", "-o", out}, flags...), ".")
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(root, dir)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	start := time.Now()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testkit: go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, msg)
	}
	t.Logf("testkit: built %s in %s", dir, time.Since(start).Round(time.Millisecond))
	return out
}

// modulePath is this module's path, as its go.mod names it.
const modulePath = "github.com/reconscope/reconscope"

// ModuleRoot finds the folder of this module's go.mod, walking up from the working directory
// (go test runs in the package's folder), then from this source file.
func ModuleRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if isModuleRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("find module root: no go.mod of " + modulePath + " above the working directory")
}

// isModuleRoot tells whether dir holds the go.mod of modulePath.
func isModuleRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == modulePath
		}
	}
	return false
}
