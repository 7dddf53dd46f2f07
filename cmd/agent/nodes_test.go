package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/test/testenv"
)

// fixtureOnNode runs the fixture controller as container "manager" of pod default/podName on
// node, its process in the pod's cgroup (named the way containerd's cgroupfs driver names it)
// from before its exec, as runc puts a container's process: a shell waits on its input, joins
// the cgroup, then execs the fixture (with --kubeconfig and args) once release is called.
func fixtureOnNode(t *testing.T, env *testenv.Env, fixture, node, podName, containerID string, args ...string) (p *testenv.Process, release func()) {
	t.Helper()
	pod := podWithContainer(t, env, node, podName, containerID)
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read -r _ && exec "$@"`, "sh", fixture, "--kubeconfig", env.Kubeconfig}, args...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p = testenv.StartProcess(t, "scripted-"+node, cmd)
	fakeContainer(t, p.PID(), string(pod.UID), containerID)
	return p, func() {
		if _, err := in.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunLeavesOtherNodesPods runs the agent of node-1 on a machine where a pod of node-2 runs
// the same executable (one kernel, two nodes, as on kind): the agent traces its own node's pod
// and not the other's, neither when its /proc scan finds it nor when the kernel admits it at
// exec (the executable is attached already), and every span is its own pod's.
func TestRunLeavesOtherNodesPods(t *testing.T) {
	agent, env, fixture := agentWithFixture(t, testenv.Options{})
	own, execOwn := fixtureOnNode(t, env, fixture, "node-1", "op-1", strings.Repeat("c1d2", 16))
	execOwn()
	cmd := exec.Command(agent, "run", "--kubeconfig", env.Kubeconfig, "--node-name", "node-1", "--metrics-addr", "",
		"--scan-interval", "200ms", "--log-format", "json", "--log-level", "debug", "--output", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent's log:\n%s", logs.String())
		}
	})
	var otherPID atomic.Int64
	// Only these two: other tests' fixtures on the machine, outside any pod, are traced.
	spans := keepSpans(stdout, 1000, func(s exporter.JSONSpan) bool {
		return s.Controller == "scripted" && (s.PID == uint32(own.PID()) || s.PID == uint32(otherPID.Load()))
	})
	logged := func(msg string, pid int) bool {
		return strings.Contains(logs.String(), fmt.Sprintf(`"msg":%q,"pid":%d,`, msg, pid))
	}
	waitLogged(t, &logs, "the agent traces its node's pod", func() bool { return logged("tracing", own.PID()) })
	// Started now, the other node's process execs an attached executable: the kernel admits it,
	// the agent lets it go. (Its shell, before it joined the pod's cgroup, may have been seen as
	// a host process: judged before it execs.)
	other, execOther := fixtureOnNode(t, env, fixture, "node-2", "op-2", strings.Repeat("e3f4", 16))
	otherPID.Store(int64(other.PID()))
	waitLogged(t, &logs, "the agent decides on the other node's shell", func() bool {
		return logged("not traced", other.PID()) || logged("not traced: its pod is not on this node", other.PID())
	})
	execOther()
	waitLogged(t, &logs, "the agent decides on the other node's pod", func() bool {
		return logged("not traced: its pod is not on this node", other.PID()) || logged("tracing", other.PID())
	})
	for _, name := range []string{"a", "b", "c"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Annotations: map[string]string{"scripted.reconscope.io/script": "success"}}}
		if err := env.Client.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
	}
	// Both fixtures reconcile the three objects; only node-1's reconciles are spans.
	got := map[uint32][]string{}
	timeout := time.After(30 * time.Second)
	for len(got[uint32(own.PID())]) < 3 {
		select {
		case s := <-spans:
			got[s.PID] = append(got[s.PID], s.Pod+" "+s.Name)
		case <-timeout:
			t.Fatalf("spans by PID after 30 s: %v, want 3 of %d; logs:\n%s", got, own.PID(), logs.String())
		}
	}
	time.Sleep(2 * time.Second) // the other's reconciles are done too: any span of them has come
	for len(spans) > 0 {
		s := <-spans
		got[s.PID] = append(got[s.PID], s.Pod+" "+s.Name)
	}
	for pid, names := range got {
		if pid != uint32(own.PID()) {
			t.Errorf("node-2's pod (pid %d) has spans: %v", pid, names)
			continue
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "default/op-1 ") {
				t.Errorf("span of node-1's process names %q, want pod default/op-1", n)
			}
		}
	}
	if logged("tracing", other.PID()) {
		t.Errorf("the agent of node-1 traces node-2's pod (pid %d)", other.PID())
	}
	t.Logf("node-1's pod (pid %d): spans %v; node-2's pod (pid %d): %d spans", own.PID(), got[uint32(own.PID())], other.PID(), len(got[uint32(other.PID())]))
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}
}
