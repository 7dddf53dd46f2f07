package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
)

func TestDropEmptyLabels(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`reconscope_reconcile_total{controller="deployment",k8s_container_name="",k8s_namespace_name="",k8s_pod_name="",result="error"} 3`,
			`reconscope_reconcile_total{controller="deployment",result="error"} 3`},
		{`reconscope_reconcile_total{controller="scripted",k8s_container_name="manager",k8s_namespace_name="demo",k8s_pod_name="op-0",result="success"} 7`,
			`reconscope_reconcile_total{controller="scripted",k8s_container_name="manager",k8s_namespace_name="demo",k8s_pod_name="op-0",result="success"} 7`},
		{`m{a="",b=""} 1`, `m 1`},
		{`m{a="x,y=\"\"",b=""} 1`, `m{a="x,y=\"\""} 1`},
		{`m 1`, `m 1`},
	} {
		if got := dropEmptyLabels(c.in); got != c.want {
			t.Errorf("dropEmptyLabels(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

// children returns the PIDs whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fs) > 1 && fs[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fs) > 0 && fs[0] != "Z" && fs[0] != "X"
}

// TestDemoStopsOnHangup: when the demo's terminal goes away (SIGHUP), it is told to stop
// (SIGTERM) or Ctrl-C is pressed (SIGINT), it stops etcd, kube-apiserver and everything else it
// started, and exits with status 0: a stop asked for is no failure.
func TestDemoStopsOnHangup(t *testing.T) {
	if os.Geteuid() != 0 {
		bpftest.SkipOrFail(t, "the demo needs root (it traces)")
	}
	bin := testkit.Build(t, "./test/demo")
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin, "-agent", "/nonexistent/agent")
			cmd.Dir = "../.."
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			// Once kube-controller-manager starts, etcd and kube-apiserver serve.
			sc := bufio.NewScanner(out)
			for sc.Scan() && !strings.Contains(sc.Text(), "starting kube-controller-manager") {
			}
			started := children(t, cmd.Process.Pid)
			if len(started) < 2 {
				t.Fatalf("demo runs %d child processes, want at least etcd and kube-apiserver", len(started))
			}
			go func() {
				for sc.Scan() {
				}
			}()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				// A stop asked for is a clean exit: make demo ends without make's "Error 1".
				if err != nil {
					t.Errorf("demo stopped by %v: %v, want exit status 0", sig, err)
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("demo still running 2 minutes after %v", sig)
			}
			for _, pid := range started {
				if alive(pid) {
					b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
					t.Errorf("after %v, the demo's child %d (%s) is still running", sig, pid, strings.ReplaceAll(string(b), "\x00", " "))
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}
