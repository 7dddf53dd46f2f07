package testenv

import (
	"os/exec"
	"testing"

	"github.com/reconscope/reconscope/internal/testproc"
)

// Process is a program a test started (package testproc, the one process starter of the tests).
type Process = testproc.Process

// StartProcess starts cmd as name: see testproc.Start.
func StartProcess(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	return testproc.Start(t, name, cmd)
}

// CheckNoLeftovers fails t if a process the tests started is still alive: see
// testproc.CheckNoLeftovers.
func CheckNoLeftovers(t testing.TB) {
	t.Helper()
	testproc.CheckNoLeftovers(t)
}
