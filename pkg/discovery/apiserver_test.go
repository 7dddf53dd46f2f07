package discovery_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/kubeapi"
	"github.com/reconscope/reconscope/test/testenv"
)

// hexID is a container ID made of one repeated hex digit.
func hexID(c string) string { return strings.Repeat(c, 64) }

// createPod creates a pod bound to node (no scheduler runs, so nodeName stays as given) and
// writes container IDs into its status, as the kubelet would.
func createPod(t *testing.T, c kubernetes.Interface, ns, name, node string, labels map[string]string, containers, inits map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node},
	}
	status := func(name, id string) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			Name: name, Image: "example.com/" + name + ":v1", ImageID: "example.com/" + name + "@sha256:" + hexID("e"),
			ContainerID: "containerd://" + id,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}
	}
	for n := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: n, Image: "example.com/" + n + ":v1"})
	}
	for n := range inits {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: n, Image: "example.com/" + n + ":v1"})
	}
	created, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	for n, id := range containers {
		created.Status.ContainerStatuses = append(created.Status.ContainerStatuses, status(n, id))
	}
	for n, id := range inits {
		created.Status.InitContainerStatuses = append(created.Status.InitContainerStatuses, status(n, id))
	}
	created.Status.Phase = corev1.PodRunning
	updated, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status of pod %s/%s: %v", ns, name, err)
	}
	return updated
}

// TestPodIndexAPIServer runs a PodIndex against a real kube-apiserver, as a user that has
// nothing at first (the index must report it once and keep trying), then only get, list and
// watch on pods.
func TestPodIndexAPIServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	env := testenv.Start(t, testenv.Options{})
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The agent's identity: a user that RBAC knows nothing about yet.
	const user = "reconscope-agent-test"
	agentCfg := rest.CopyConfig(env.Config)
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	agent, err := kubeapi.NewForConfig(agentCfg)
	if err != nil {
		t.Fatal(err)
	}

	var logs testkit.LogBuffer
	x, err := discovery.NewPodIndex(discovery.PodIndexOptions{
		Client:   agent,
		NodeName: "node-a",
		Logger:   logs.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Go(t, x.Run) // Run must return no error when the test ends

	testkit.Eventually(t, "the forbidden list to be reported", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "kubernetes metadata unavailable")
	})
	if !strings.Contains(logs.String(), "forbidden") {
		t.Errorf("the report does not say why:\n%s", logs.String())
	}
	if x.Synced() {
		t.Fatal("Synced while forbidden")
	}

	// Grant exactly get, list and watch on pods.
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the index to sync once allowed", 60*time.Second, x.Synced)

	// A pod on another node first, then ours: once ours is indexed, the other one would have
	// been too if the field selector let it through.
	other := createPod(t, admin, "team-b", "elsewhere", "node-b", nil, map[string]string{"manager": hexID("b")}, nil)
	unscheduled := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "pending"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}},
	}
	if _, err := admin.CoreV1().Pods("team-b").Create(ctx, unscheduled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mine := createPod(t, admin, "team-a", "controller", "node-a",
		map[string]string{"app": "controller", "team": "a"},
		map[string]string{"manager": hexID("a"), "kube-rbac-proxy": hexID("c")},
		map[string]string{"migrate": hexID("d")})

	testkit.Eventually(t, "the pod's containers in the index", 20*time.Second, func() bool {
		_, ok := x.Lookup(hexID("a"))
		return ok
	})
	base := discovery.PodInfo{
		Namespace: "team-a", Name: "controller", UID: string(mine.UID),
		Labels: map[string]string{"app": "controller", "team": "a"}, Node: "node-a",
	}
	for id, container := range map[string]string{hexID("a"): "manager", hexID("c"): "kube-rbac-proxy", "containerd://" + hexID("d"): "migrate"} {
		got, ok := x.Lookup(id)
		want := base
		want.Container, want.Image = container, "example.com/"+container+":v1"
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("Lookup(%s…) = %+v, %v; want %+v", id[:16], got, ok, want)
		}
	}
	if got, ok := x.LookupPod(string(mine.UID)); !ok || !reflect.DeepEqual(got, base) {
		t.Errorf("LookupPod = %+v, %v; want %+v", got, ok, base)
	}
	if got, ok := x.Lookup(hexID("b")); ok {
		t.Errorf("Lookup found a container of another node's pod: %+v", got)
	}
	if got, ok := x.LookupPod(string(other.UID)); ok {
		t.Errorf("LookupPod found another node's pod: %+v", got)
	}

	// Deleted pods leave the index.
	if err := admin.CoreV1().Pods("team-a").Delete(ctx, "controller", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the deleted pod to leave the index", 20*time.Second, func() bool {
		_, ok := x.Lookup(hexID("a"))
		return !ok
	})

	out := logs.String()
	if n := strings.Count(out, "kubernetes metadata unavailable"); n != 1 {
		t.Errorf("degraded state logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "kubernetes metadata available again"); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, out)
	}
}
