package testenv

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/testproc"
)

// RestartKubelet stops the node's kubelet as a service manager restarting it does (SIGTERM)
// and starts it again with the same configuration and state. The pods' containers run on
// meanwhile (containerd keeps them). It returns once the new kubelet has posted the Node's
// status as Ready.
func (n *Node) RestartKubelet(t testing.TB) {
	t.Helper()
	began := time.Now()
	if err := n.Kubelet.Stop(); err != nil && !testproc.KilledBy(err, syscall.SIGTERM) {
		t.Logf("testenv: kubelet stopped: %v", err)
	}
	n.Kubelet = StartProcess(t, "kubelet", n.kubeletCommand())
	t.Cleanup(n.cleanup) // the node drains through this kubelet before it stops
	if err := n.waitReadySince(began, nodeReadyTimeout); err != nil {
		testproc.LogTail(t, "kubelet stderr", n.Kubelet.StderrPath())
		t.Fatalf("testenv: node %s after kubelet's restart: %v", n.Name, err)
	}
	t.Logf("testenv: kubelet of node %s restarted, Ready again in %s", n.Name, time.Since(began).Round(time.Millisecond))
}

// RestartContainerd stops the node's containerd (SIGTERM) and starts it again with the same
// configuration and state, as a package upgrade does; the containers' shims run on. It returns
// once containerd answers again.
func (n *Node) RestartContainerd(t testing.TB) {
	t.Helper()
	began := time.Now()
	if err := n.Containerd.Stop(); err != nil && !testproc.KilledBy(err, syscall.SIGTERM) {
		t.Logf("testenv: containerd stopped: %v", err)
	}
	n.Containerd = StartProcess(t, "containerd", n.containerdCommand())
	t.Cleanup(n.cleanup) // the node drains before this containerd stops
	if err := n.waitContainerd(30 * time.Second); err != nil {
		testproc.LogTail(t, "containerd stderr", n.Containerd.StderrPath())
		t.Fatalf("testenv: node %s: containerd after its restart: %v", n.Name, err)
	}
	t.Logf("testenv: containerd of node %s restarted, answering again in %s", n.Name, time.Since(began).Round(time.Millisecond))
}

// waitReadySince waits for the Node's Ready condition to be true with a heartbeat after since:
// posted by a kubelet running since then.
func (n *Node) waitReadySince(since time.Time, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	since = since.Truncate(time.Second) // the API's times have whole seconds
	for {
		node, err := n.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since) {
					return nil
				}
			}
		}
		select {
		case <-n.Kubelet.Done():
			return fmt.Errorf("kubelet exited: %v", n.Kubelet.Wait())
		case <-ctx.Done():
			return fmt.Errorf("no Ready heartbeat since %s after %s (last: %v)", since.Format(time.RFC3339), timeout, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
