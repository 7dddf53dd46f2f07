//go:build e2e

// TestNodeRunsPod builds containerd 2 from source on first use (a heavy third-party build):
// it runs in make e2e, not make test.

package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
)

// TestNodeRunsPod starts the test bed with a node and runs a pod on it: the node registers
// Ready, the pod gets an IP from the node's range, a service account token, and its process
// runs in the node's cgroups; deleting it and stopping the node leaves nothing behind (the
// node's teardown fails the test otherwise).
func TestNodeRunsPod(t *testing.T) {
	if os.Geteuid() != 0 {
		bpftest.SkipOrFail(t, "a node needs root (containerd, runc, mounts, cgroups)")
	}
	t.Cleanup(func() { CheckNoLeftovers(t) })
	env := Start(t, Options{Node: true})
	node := StartNode(t, env, NodeOptions{})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "node-test"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No kube-controller-manager here: the namespace's default service account by hand.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	if _, err := cs.CoreV1().ServiceAccounts(ns.Name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(env.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	root := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: ns.Name}, Data: map[string]string{"ca.crt": string(ca)}}
	if _, err := cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, root, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: ns.Name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "sleeper", Image: SandboxImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}
	if _, err := cs.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	testkit.WaitFor(t, "the pod to be Running and Ready", 60*time.Second, func() (bool, string) {
		got, err = cs.CoreV1().Pods(ns.Name).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.PodRunning && len(got.Status.ContainerStatuses) == 1 && got.Status.ContainerStatuses[0].Ready,
			fmt.Sprintf("%+v", got.Status)
	})
	if got.Spec.NodeName != node.Name {
		t.Errorf("pod on node %q, want %q", got.Spec.NodeName, node.Name)
	}
	_, podNet, _ := net.ParseCIDR(node.PodCIDR)
	if ip := net.ParseIP(got.Status.PodIP); ip == nil || !podNet.Contains(ip) {
		t.Errorf("pod IP %q is not in the node's pod range %s", got.Status.PodIP, node.PodCIDR)
	}
	if got.Status.HostIP != node.IP {
		t.Errorf("pod's host IP %q, want the node's %s", got.Status.HostIP, node.IP)
	}
	token := false
	for _, v := range got.Spec.Volumes {
		token = token || (v.Projected != nil && len(v.Projected.Sources) > 0 && v.Projected.Sources[0].ServiceAccountToken != nil)
	}
	if !token {
		t.Errorf("pod has no service account token volume: %+v", got.Spec.Volumes)
	}
	if procs := cgroupProcs(node.CgroupRoot); len(procs) < 2 {
		t.Errorf("%d processes in the node's cgroups %s, want the sandbox's and the container's", len(procs), node.CgroupRoot)
	}
	t.Logf("pod %s/%s uid %s Running on %s with IP %s, container %s", got.Namespace, got.Name, got.UID, got.Spec.NodeName, got.Status.PodIP, got.Status.ContainerStatuses[0].ContainerID)
}
