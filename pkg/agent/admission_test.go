package agent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/kubeapi/kubeapitest"
	"github.com/reconscope/reconscope/pkg/proc"
)

// TestAdmissionDecide: one decision for run (a pod index, the config's rules) and trace --exe
// (one executable, no pod metadata): whether a process is traced, what its spans carry, and
// whether its pod is looked up again later.
func TestAdmissionDecide(t *testing.T) {
	hostOnly, err := discovery.NewPodIndex(discovery.PodIndexOptions{Logger: testkit.Quiet()}) // no API: no pod is known
	if err != nil {
		t.Fatal(err)
	}
	filter := func(cfg discovery.Config) *discovery.Filter {
		t.Helper()
		f, err := discovery.NewFilter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	nodeA := syncedIndex(t, "node-a", "pod-uid", "0123abcd")
	want := proc.StatFileID{Dev: 1, Ino: 2}
	container := discovery.Container{PodUID: "pod-uid", ID: "0123abcd"}
	manager := discovery.Process{PID: 10, Exe: "/manager", ExeID: want, Container: container}
	// the same executable in a pod node-a's index does not hold: node-b's, on one kernel
	elsewhere := discovery.Process{PID: 12, Exe: "/manager", ExeID: want, Container: discovery.Container{PodUID: "node-b-pod", ID: "4567cdef"}}
	shell := discovery.Process{PID: 11, Exe: "/bin/sh", ExeID: proc.StatFileID{Dev: 1, Ino: 3}}
	tests := []struct {
		name        string
		a           Admission
		p           discovery.Process
		traced      bool
		workload    bool // spans carry the container's identity
		controllers bool // spans of some controllers only
		unnamed     bool // its pod is looked up again
	}{
		{"trace --exe: its executable", Admission{Exe: &want}, manager, true, false, false, false},
		{"trace --exe: another executable", Admission{Exe: &want}, shell, false, false, false, false},
		{"run: no config, pod not known yet", Admission{Pods: hostOnly}, manager, true, true, false, true},
		{"run: no config, no container", Admission{Pods: hostOnly}, shell, true, false, false, false},
		{"run: this node's pod", Admission{Pods: nodeA}, manager, true, true, false, false},
		{"run: another node's pod", Admission{Pods: nodeA}, elsewhere, false, false, false, false},
		{"run: no API access, a pod not known", Admission{Pods: hostOnly}, elsewhere, true, true, false, true},
		{"run: excluded executable", Admission{Pods: hostOnly, Filter: filter(discovery.Config{Exclude: []discovery.Rule{{Executables: []string{"sh"}}}})},
			shell, false, false, false, false},
		{"run: some controllers", Admission{Pods: hostOnly, Filter: filter(discovery.Config{Include: []discovery.Rule{{Executables: []string{"manager"}, Controllers: []string{"deployment"}}}})},
			manager, true, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta, v := tt.a.Decide(tt.p)
			ok := v == Trace
			if other, want := v == Elsewhere, tt.p.PID == elsewhere.PID && tt.a.Pods == nodeA; other != want {
				t.Errorf("another node's: %v, want %v", other, want)
			}
			if ok != tt.traced {
				t.Fatalf("traced: %v, want %v", ok, tt.traced)
			}
			if got := meta.Workload != nil && meta.Workload.ContainerID == tt.p.Container.ID; got != tt.workload {
				t.Errorf("workload %+v: container's identity %v, want %v", meta.Workload, got, tt.workload)
			}
			if got := meta.Controllers != nil; got != tt.controllers {
				t.Errorf("controllers chosen: %v, want %v", got, tt.controllers)
			}
			if got := ok && tt.a.unnamed(tt.p, meta); got != tt.unnamed {
				t.Errorf("looked up again: %v, want %v", got, tt.unnamed)
			}
		})
	}
}

// TestAdmissionAdmitExecGone: a process admitted at exec and gone before it is read is kept
// without rules (its spans go out as they are), dropped when rules must decide on it.
func TestAdmissionAdmitExecGone(t *testing.T) {
	root := t.TempDir() // no process in it
	if _, ok := (&Admission{ProcRoot: root}).AdmitExec(4242); !ok {
		t.Error("without rules: dropped")
	}
	f, err := discovery.NewFilter(discovery.Config{Include: []discovery.Rule{{Executables: []string{"manager"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := (&Admission{ProcRoot: root, Filter: f}).AdmitExec(4242); ok {
		t.Error("with rules: kept")
	}
}

// syncedIndex is node's pod index over one pod of node, uid, with container "manager" of ID
// containerID running, once it has listed them.
func syncedIndex(t *testing.T, node, uid, containerID string) *discovery.PodIndex {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "manager", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "manager"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "manager", ContainerID: "containerd://" + containerID}}},
	}
	x, err := discovery.NewPodIndex(discovery.PodIndexOptions{Client: kubeapitest.Clientset{Interface: fake.NewClientset(pod)}, NodeName: node, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Go(t, x.Run)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !x.WaitSynced(ctx) {
		t.Fatal("pod index did not sync")
	}
	return x
}
