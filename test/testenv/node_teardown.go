package testenv

// A node's teardown: drained as an operator would (its pods deleted and torn down by the
// kubelet), then its daemons stopped, and what is still there (processes, sandboxes, mounts)
// reported and removed.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/reconscope/reconscope/internal/testproc"
)

// teardown stops the node: first (when graceful) the way an operator drains it — static pod
// manifests removed, every pod of the node deleted, kubelet tears them down (stops containers,
// unmounts volumes, releases pod IPs) — then kubelet, then whatever sandboxes are left through
// CRI, then containerd. What is still there afterwards (processes in the node's cgroups, shims,
// mounts under the node's folder) is reported with errorf and removed. It runs once.
func (n *Node) teardown(errorf, logf func(string, ...any), graceful bool) {
	n.downOnce.Do(func() {
		if n.stopBind != nil {
			n.stopBind()
			<-n.bindDone
		}
		if graceful && n.Kubelet != nil && !exited(n.Kubelet) {
			n.drain(logf)
		}
		if n.Kubelet != nil {
			_ = n.Kubelet.Stop()
		}
		if n.Containerd != nil && !exited(n.Containerd) {
			n.removeSandboxes(errorf)
			_ = n.Containerd.Stop()
		}
		if n.apiProxy != nil {
			n.apiProxy.Close()
			n.proxyDone.Wait()
		}
		n.checkLeftovers(errorf)
		if out, err := exec.Command("ip", "link", "del", n.net.bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
			errorf("testenv: delete bridge %s: %v: %s", n.net.bridge, err, out)
		}
		if err := removeCgroup(n.CgroupRoot); err != nil {
			errorf("testenv: %v", err)
		}
		if err := os.RemoveAll(n.dir); err != nil {
			errorf("testenv: remove node folder: %v", err)
		}
	})
}

func exited(p *Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// drain removes the static pods and deletes every pod of the node, then waits (30 s at most)
// until kubelet has stopped all sandboxes and unmounted every volume.
func (n *Node) drain(logf func(string, ...any)) {
	entries, _ := os.ReadDir(n.ManifestDir)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(n.ManifestDir, e.Name()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	last := ""
	for {
		pods, err := n.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()})
		if err == nil {
			for _, p := range pods.Items {
				if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
					continue // goes with its manifest
				}
				_ = n.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
		}
		ready, err := n.readySandboxes(ctx)
		mounts := mountsUnder(filepath.Join(n.dir, "kubelet", "pods"))
		if err == nil && len(ready) == 0 && len(mounts) == 0 {
			return
		}
		last = fmt.Sprintf("sandboxes ready: %v, volume mounts: %d, err: %v", ready, len(mounts), err)
		select {
		case <-ctx.Done():
			logf("testenv: node %s: kubelet did not finish tearing pods down in 30s (%s); removing them through CRI", n.Name, last)
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// readySandboxes names the pod sandboxes containerd still runs.
func (n *Node) readySandboxes(ctx context.Context) ([]string, error) {
	rt, done, err := n.criClient()
	if err != nil {
		return nil, err
	}
	defer done()
	resp, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range resp.Items {
		if s.State == cri.PodSandboxState_SANDBOX_READY {
			out = append(out, s.Metadata.Namespace+"/"+s.Metadata.Name)
		}
	}
	return out, nil
}

// removeSandboxes stops and removes every pod sandbox through CRI (with its containers, network
// namespace and mounts), as `crictl rmp -af` does.
func (n *Node) removeSandboxes(errorf func(string, ...any)) {
	rt, done, err := n.criClient()
	if err != nil {
		errorf("testenv: connect to containerd CRI: %v", err)
		return
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		errorf("testenv: list pod sandboxes: %v", err)
		return
	}
	for _, s := range resp.Items {
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errorf("testenv: stop pod sandbox %s/%s: %v", s.Metadata.Namespace, s.Metadata.Name, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errorf("testenv: remove pod sandbox %s/%s: %v", s.Metadata.Namespace, s.Metadata.Name, err)
		}
	}
}

// checkLeftovers fails t for every process still in the node's cgroups, every process whose
// command line names the node's folder (the shims of its containerd) and every mount under the
// node's folder, and removes them.
func (n *Node) checkLeftovers(errorf func(string, ...any)) {
	for _, pid := range cgroupProcs(n.CgroupRoot) {
		s, err := testproc.ReadStat(pid)
		if err != nil || !s.Alive() {
			continue
		}
		errorf("testenv: node %s left process %d in its cgroups: %s", n.Name, pid, testproc.Cmdline(s))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if procs, err := testproc.AllProcs(); err == nil {
		for _, s := range procs {
			if !s.Alive() {
				continue
			}
			// Its shims name its socket (-address), under its folder; another node's shims run
			// the same binary.
			args, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID), "cmdline"))
			if strings.Contains(string(args), n.dir+"/") && s.PID != os.Getpid() {
				errorf("testenv: node %s left process %d behind: %s", n.Name, s.PID, testproc.Cmdline(s))
				_ = syscall.Kill(s.PID, syscall.SIGKILL)
			}
		}
	}
	// kubelet links every container's log into /var/log/containers (a fixed path) and removes
	// the links with the containers; those of containers removed after it stopped stay.
	if entries, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range entries {
			p := filepath.Join("/var/log/containers", e.Name())
			if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, n.dir+"/") {
				_ = os.Remove(p)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	// kubelet bind-mounts its root folder onto itself (a shared mount, for mount propagation)
	// and leaves it at exit: that one is expected.
	rootDir := filepath.Join(n.dir, "kubelet")
	var mounts []string
	for _, m := range mountsUnder(n.dir) {
		if m == rootDir {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
			continue
		}
		mounts = append(mounts, m)
	}
	for _, m := range mounts {
		errorf("testenv: node %s left a mount: %s", n.Name, m)
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
	if len(mounts) > 0 {
		_ = syscall.Unmount(rootDir, syscall.MNT_DETACH)
	}
}
