package discovery

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/discovery/cgroup"
	"github.com/reconscope/reconscope/pkg/kubeapi"
	"github.com/reconscope/reconscope/pkg/kubeapi/kubeapitest"
)

// testPod is a pod on node with one container of each kind, whose IDs start with the digit d.
func testPod(ns, name, uid, node string, d byte) *corev1.Pod {
	id := func(kind byte) string { return strings.Repeat(string([]byte{d, kind}), 32) }
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID(uid),
			Labels: map[string]string{"app": name},
			Annotations: map[string]string{"big": strings.Repeat("x", 1000),
				"resource.opentelemetry.io/deployment.environment.name": "test"},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller", UID: "cm"},
				{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name + "-set", UID: "sts", Controller: ptrTrue()},
			},
		},
		Spec: corev1.PodSpec{
			NodeName:       node,
			Containers:     []corev1.Container{{Name: "manager", Image: "example/manager"}},
			InitContainers: []corev1.Container{{Name: "init", Image: "example/init"}},
		},
		Status: corev1.PodStatus{
			Phase:                      corev1.PodRunning,
			ContainerStatuses:          []corev1.ContainerStatus{{Name: "manager", ContainerID: "containerd://" + id('a'), Image: "example/manager"}},
			InitContainerStatuses:      []corev1.ContainerStatus{{Name: "init", ContainerID: "cri-o://" + id('b')}},
			EphemeralContainerStatuses: []corev1.ContainerStatus{{Name: "debugger", ContainerID: "docker://" + id('c')}},
		},
	}
}

// startIndex makes a PodIndex with opts and runs it until the test ends; Run must then return
// no error.
func startIndex(t *testing.T, opts PodIndexOptions) *PodIndex {
	t.Helper()
	x, err := NewPodIndex(opts)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Go(t, x.Run)
	return x
}

// syncedIndex is startIndex of node-a's pods in client, once it has synced.
func syncedIndex(t *testing.T, client *fake.Clientset) *PodIndex {
	t.Helper()
	x := startIndex(t, PodIndexOptions{Client: kubeapitest.Clientset{Interface: client}, NodeName: "node-a"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !x.WaitSynced(ctx) || !x.Synced() {
		t.Fatal("index did not sync")
	}
	return x
}

func TestPodIndexLookup(t *testing.T) {
	client := fake.NewClientset(testPod("ns1", "ctl", "uid-1", "node-a", '1'))
	x := syncedIndex(t, client)
	base := PodInfo{Namespace: "ns1", Name: "ctl", UID: "uid-1", Labels: map[string]string{"app": "ctl"}, Node: "node-a",
		Annotations: map[string]string{"resource.opentelemetry.io/deployment.environment.name": "test"},
		OwnerKind:   "StatefulSet", OwnerName: "ctl-set"}
	for _, tt := range []struct {
		id        string
		container string
		image     string
	}{
		{strings.Repeat("1a", 32), "manager", "example/manager"},
		{"containerd://" + strings.Repeat("1a", 32), "manager", "example/manager"},
		{strings.Repeat("1b", 32), "init", "example/init"},
		{strings.Repeat("1c", 32), "debugger", ""}, // an ephemeral container's image is not kept
	} {
		got, ok := x.Lookup(tt.id)
		want := base
		want.Container, want.Image = tt.container, tt.image
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v", tt.id, got, ok, want)
		}
	}
	if _, ok := x.Lookup(strings.Repeat("9a", 32)); ok {
		t.Error("Lookup of an unknown ID found a pod")
	}
	if _, ok := x.Lookup(""); ok {
		t.Error("Lookup of an empty ID found a pod")
	}
	// A pod with an init container: a process found by its pod UID alone may run in either.
	if got, ok := x.LookupPod("uid-1"); !ok || !reflect.DeepEqual(got, base) {
		t.Errorf("LookupPod = %+v, %v; want %+v", got, ok, base)
	}

	// Labels are the caller's copy.
	got, _ := x.Lookup(strings.Repeat("1a", 32))
	got.Labels["app"] = "changed"
	if again, _ := x.Lookup(strings.Repeat("1a", 32)); again.Labels["app"] != "ctl" {
		t.Error("changing returned labels changed the index")
	}

	// The index follows updates and deletions.
	p2 := testPod("ns2", "new", "uid-2", "node-a", '2')
	if _, err := client.CoreV1().Pods("ns2").Create(context.Background(), p2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "new pod in index", 15*time.Second, func() bool { _, ok := x.Lookup(strings.Repeat("2a", 32)); return ok })
	if err := client.CoreV1().Pods("ns1").Delete(context.Background(), "ctl", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "deleted pod gone from index", 15*time.Second, func() bool { _, ok := x.Lookup(strings.Repeat("1a", 32)); return !ok })
}

// TestPodIndexLookupPodOneContainer: before the kubelet reports a container's ID, a process
// found by its pod UID is named with the pod's container when the pod has only one; with two
// containers, an init container or an ephemeral container it stays unnamed.
func TestPodIndexLookupPodOneContainer(t *testing.T) {
	starting := func(name string, edit func(*corev1.Pod)) *corev1.Pod {
		p := testPod("ns", name, "uid-"+name, "node-a", '1')
		p.Spec.InitContainers = nil
		p.Status = corev1.PodStatus{Phase: corev1.PodPending}
		if edit != nil {
			edit(p)
		}
		return p
	}
	client := fake.NewClientset(
		starting("one", nil),
		starting("two", func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar"}) }),
		starting("init", func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: "setup"}} }),
		starting("debugged", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger"}}}
		}),
	)
	x := syncedIndex(t, client)
	for name, want := range map[string]string{"one": "manager", "two": "", "init": "", "debugged": ""} {
		got, ok := x.LookupPod("uid-" + name)
		if !ok || got.Container != want || got.Name != name {
			t.Errorf("LookupPod(uid-%s) = %+v, %v; want container %q", name, got, ok, want)
		}
	}
}

func TestPodIndexSlimsPods(t *testing.T) {
	in := testPod("ns", "p", "u", "n", '1')
	out, err := slimPod(in)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if len(p.Annotations) != 1 || len(p.OwnerReferences) != 1 || p.Spec.Containers[0].Image != "example/manager" || p.Status.Phase != "" || p.Status.ContainerStatuses[0].Image != "" {
		t.Errorf("slimPod kept fields it does not need: %+v", p)
	}
	if p.Name != "p" || p.Namespace != "ns" || p.UID != "u" || p.Spec.NodeName != "n" || p.Labels["app"] != "p" ||
		p.Status.ContainerStatuses[0].ContainerID != in.Status.ContainerStatuses[0].ContainerID ||
		p.Annotations["resource.opentelemetry.io/deployment.environment.name"] != "test" || p.OwnerReferences[0].Name != "p-set" ||
		p.Spec.Containers[0].Name != "manager" || p.Spec.InitContainers[0].Name != "init" {
		t.Errorf("slimPod lost fields it needs: %+v", p)
	}
	again, _ := slimPod(p)
	if !reflect.DeepEqual(again, p) {
		t.Error("slimPod is not idempotent")
	}
	if obj, _ := slimPod("not a pod"); obj != "not a pod" {
		t.Error("slimPod changed a non-pod")
	}
}

// TestPodIndexDegraded checks that refused API calls are reported once, that the index keeps
// retrying, and that recovery is reported once.
func TestPodIndexDegraded(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(testPod("ns1", "ctl", "uid-1", "node-a", '1'))
	var calls atomic.Int32
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) <= 2 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC: no"))
		}
		return false, nil, nil
	})
	var logs testkit.LogBuffer
	x := startIndex(t, PodIndexOptions{Client: kubeapitest.Clientset{Interface: client}, NodeName: "node-a", Logger: logs.Logger()})
	testkit.Eventually(t, "sync after two refusals", 15*time.Second, x.Synced)
	if _, ok := x.Lookup(strings.Repeat("1a", 32)); !ok {
		t.Error("Lookup after recovery found nothing")
	}
	out := logs.String()
	if n := strings.Count(out, "kubernetes metadata unavailable"); n != 1 {
		t.Errorf("degraded state logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "forbidden") {
		t.Errorf("log does not say why:\n%s", out)
	}
	if n := strings.Count(out, "kubernetes metadata available again"); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, out)
	}
	if c := calls.Load(); c < 3 {
		t.Errorf("%d list calls, want at least 3", c)
	}
}

func TestPodIndexNoClient(t *testing.T) {
	var logs testkit.LogBuffer
	x, err := NewPodIndex(PodIndexOptions{Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.Go(t, x.Run)
	testkit.Eventually(t, "warning", 15*time.Second, func() bool { return strings.Contains(logs.String(), "no API client") })
	if x.Synced() {
		t.Error("Synced without a client")
	}
	if _, ok := x.Lookup(strings.Repeat("1a", 32)); ok {
		t.Error("Lookup without a client found a pod")
	}
	if _, ok := x.LookupPod("u"); ok {
		t.Error("LookupPod without a client found a pod")
	}
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	if x.WaitSynced(short) {
		t.Error("WaitSynced without a client returned true")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestPodIndexNeedsNodeName(t *testing.T) {
	if _, err := NewPodIndex(PodIndexOptions{Client: kubeapitest.Clientset{Interface: fake.NewClientset()}}); !errors.Is(err, ErrNoNodeName) {
		t.Fatalf("err = %v, want ErrNoNodeName", err)
	}
}

// TestPodIndexServerDown checks that an unreachable API server is reported once while the
// index keeps retrying.
func TestPodIndexServerDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connections are refused
	var requests atomic.Int32
	cfg := &rest.Config{Host: "http://" + addr, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			requests.Add(1)
			return rt.RoundTrip(r)
		})
	}}
	client, err := kubeapi.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	x := startIndex(t, PodIndexOptions{Client: client, NodeName: "node-a", Logger: logs.Logger()})
	testkit.Eventually(t, "a retry", 15*time.Second, func() bool { return requests.Load() >= 2 })
	if x.Synced() {
		t.Error("Synced without a server")
	}
	out := logs.String()
	if n := strings.Count(out, "kubernetes metadata unavailable"); n != 1 {
		t.Errorf("degraded state logged %d times after %d requests, want once:\n%s", n, requests.Load(), out)
	}
	if !strings.Contains(out, "connection refused") {
		t.Errorf("log does not say why:\n%s", out)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func ptrTrue() *bool { b := true; return &b }

func TestPodServiceIdentity(t *testing.T) {
	for _, tt := range []struct {
		name               string
		pod                PodInfo
		kind, workload, rs string
		service            string
	}{
		{name: "deployment by pod-template-hash",
			pod:  PodInfo{Name: "web-7d9f8c-x2x9z", Labels: map[string]string{"pod-template-hash": "7d9f8c"}, OwnerKind: "ReplicaSet", OwnerName: "web-7d9f8c"},
			kind: "Deployment", workload: "web", rs: "web-7d9f8c", service: "web"},
		{name: "replicaset of its own",
			pod:  PodInfo{Labels: map[string]string{"pod-template-hash": "other"}, OwnerKind: "ReplicaSet", OwnerName: "rs-1"},
			kind: "ReplicaSet", workload: "rs-1", rs: "rs-1", service: "rs-1"},
		{name: "statefulset", pod: PodInfo{OwnerKind: "StatefulSet", OwnerName: "db"}, kind: "StatefulSet", workload: "db", service: "db"},
		{name: "daemonset", pod: PodInfo{OwnerKind: "DaemonSet", OwnerName: "agent"}, kind: "DaemonSet", workload: "agent", service: "agent"},
		{name: "static pod: the container", pod: PodInfo{Name: "kube-controller-manager-node1", OwnerKind: "Node", OwnerName: "node1"}, service: "manager"},
		{name: "app.kubernetes.io/name",
			pod:  PodInfo{Labels: map[string]string{"app.kubernetes.io/name": "widgets"}, OwnerKind: "StatefulSet", OwnerName: "db"},
			kind: "StatefulSet", workload: "db", service: "widgets"},
		{name: "app.kubernetes.io/instance before name",
			pod:     PodInfo{Labels: map[string]string{"app.kubernetes.io/name": "widgets", "app.kubernetes.io/instance": "widgets-prod"}},
			service: "widgets-prod"},
		{name: "annotation first",
			pod: PodInfo{Labels: map[string]string{"app.kubernetes.io/instance": "widgets-prod"},
				Annotations: map[string]string{"resource.opentelemetry.io/service.name": "widget-operator"}},
			service: "widget-operator"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kind, name, rs := tt.pod.Workload()
			if kind != tt.kind || name != tt.workload || rs != tt.rs {
				t.Errorf("Workload() = %q %q %q, want %q %q %q", kind, name, rs, tt.kind, tt.workload, tt.rs)
			}
			if got := tt.pod.ServiceName("manager"); got != tt.service {
				t.Errorf("ServiceName = %q, want %q", got, tt.service)
			}
		})
	}
}

// TestPodIndexOtherNode: a process whose cgroup names a pod the synced index does not hold is
// another node's (one kernel, several nodes); one of a pod of this node is not, whether found
// by its container ID, by its pod UID before the kubelet reports the ID, or, for a static pod,
// by the kubelet's UID of it; nor is a process outside Kubernetes, nor any process while the
// index cannot tell (no API access).
func TestPodIndexOtherNode(t *testing.T) {
	static := testPod("kube-system", "kube-controller-manager-node-a", "mirror-uid", "node-a", '3')
	static.Annotations[corev1.MirrorPodAnnotationKey] = strings.Repeat("5f", 16)
	x := syncedIndex(t, fake.NewClientset(testPod("ns1", "ctl", "uid-1", "node-a", '1'), static))
	noClient, err := NewPodIndex(PodIndexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		index *PodIndex
		c     Container
		want  bool
	}{
		{"this node's pod, by container ID", x, Container{ID: strings.Repeat("1a", 32), PodUID: "uid-1"}, false},
		{"this node's pod, container ID not reported yet", x, Container{ID: strings.Repeat("7a", 32), PodUID: "uid-1"}, false},
		{"this node's static pod, by the kubelet's UID", x, Container{ID: strings.Repeat("7b", 32), PodUID: strings.Repeat("5f", 16)}, false},
		{"another node's pod", x, Container{ID: strings.Repeat("8a", 32), PodUID: "uid-of-node-b"}, true},
		{"another node's pod, no container ID in its path", x, Container{PodUID: "uid-of-node-b"}, true},
		{"a host process", x, Container{}, false},
		{"a container outside Kubernetes", x, Container{Runtime: cgroup.RuntimeDocker, ID: strings.Repeat("9a", 32)}, false},
		{"no API access", noClient, Container{ID: strings.Repeat("8a", 32), PodUID: "uid-of-node-b"}, false},
	} {
		if got := tt.index.OtherNode(tt.c); got != tt.want {
			t.Errorf("%s: OtherNode(%+v) = %v, want %v", tt.name, tt.c, got, tt.want)
		}
	}
	// LookupPod finds the static pod by the UID its cgroup path names.
	if got, ok := x.LookupPod(strings.Repeat("5f", 16)); !ok || got.Name != static.Name || got.UID != "mirror-uid" {
		t.Errorf("LookupPod(kubelet's UID of the static pod) = %+v, %v; want its mirror pod", got, ok)
	}
}

// TestPodIndexOtherNodeWhileUnreachable: while the API server does not answer, and for a
// moment after it answers again (the new list is not stored yet), a pod the index does not
// hold is not taken for another node's: it may have started during the outage on this node.
func TestPodIndexOtherNodeWhileUnreachable(t *testing.T) {
	x := syncedIndex(t, fake.NewClientset(testPod("ns1", "ctl", "uid-1", "node-a", '1')))
	now := time.Now()
	x.mu.Lock()
	x.now = func() time.Time { return now }
	x.mu.Unlock()
	c := Container{ID: strings.Repeat("8a", 32), PodUID: "uid-started-meanwhile"}
	ctx := context.Background()
	for _, step := range []struct {
		what string
		do   func()
		want bool
	}{
		{"reachable", func() {}, true},
		{"a list fails", func() { x.report(ctx, errors.New("connection refused")) }, false},
		{"still failing a minute later", func() { now = now.Add(time.Minute); x.report(ctx, errors.New("connection refused")) }, false},
		{"a list answers", func() { x.report(ctx, nil) }, false},
		{"just before the settle time", func() { now = now.Add(resyncSettle - time.Millisecond) }, false},
		{"after it", func() { now = now.Add(time.Millisecond) }, true},
	} {
		step.do()
		if got := x.OtherNode(c); got != step.want {
			t.Errorf("%s: OtherNode = %v, want %v", step.what, got, step.want)
		}
	}
}
