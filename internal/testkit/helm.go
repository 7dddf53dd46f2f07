package testkit

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Helm returns the helm binary test/tools/build-helm.sh builds from the Go module proxy into
// the cache on first use (a few minutes) and reuses after; it skips t with -short.
func Helm(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds Helm from the Go module proxy on first use; skipped with -short")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "test", "tools", "build-helm.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build helm: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
