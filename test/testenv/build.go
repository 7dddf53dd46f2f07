package testenv

import (
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BuildFixture builds the main package pkg of this module — a path relative to the module root
// such as "./test/fixtures/scripted-controller", or an import path — with go build into
// t.TempDir and returns the binary's path. ldflags, when given, are joined into one -ldflags
// argument: BuildFixture(t, pkg, "-s", "-w") builds a stripped binary like release builds. Go's
// build cache makes repeated builds cheap (a link, a few seconds).
func BuildFixture(t testing.TB, pkg string, ldflags ...string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	out := filepath.Join(t.TempDir(), path.Base(pkg))
	args := []string{"build", "-o", out}
	if len(ldflags) > 0 {
		args = append(args, "-ldflags="+strings.Join(ldflags, " "))
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	start := time.Now()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	t.Logf("testenv: built %s in %s", strings.Join(args[3:], " "), time.Since(start).Round(time.Millisecond))
	return out
}
