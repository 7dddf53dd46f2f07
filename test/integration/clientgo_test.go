package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestKubeControllerManager traces the real kube-controller-manager (client-go workqueue
// controllers): creating and scaling a Deployment yields deployment and replicaset spans for
// the right objects, with their API calls (pod creation, status updates) nested.
func TestKubeControllerManager(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	for _, stripped := range []bool{true, false} {
		name := "plain"
		if stripped {
			name = "stripped"
		}
		t.Run(name, func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{ControllerManager: []string{"replicaset", "deployment"}, StrippedControllerManager: stripped})
			tr, s, plan := testenv.Trace(t, "kube-controller-manager", env.ControllerManagerPID)
			defer tr.Close()
			for _, o := range plan.Offsets {
				if o.Err != nil {
					t.Errorf("offset unknown: %s.%s: %v", o.Type, o.Path, o.Err)
				}
			}
			stop := testkit.Go(t, tr.Run)

			ns := "kcm-" + name
			c := env.Client
			bg := context.Background()
			if err := c.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			// Ground truth for UIDs and resourceVersions: every version of the namespace's
			// deployments, replicasets and pods, as the API server's watches deliver them.
			seen := watchVersions(t, env, ns)
			dep := createWeb(t, c, ns)
			if err := c.Patch(bg, dep, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":4}}`))); err != nil {
				t.Fatal(err)
			}
			waitPods(t, c, ns, 4)
			time.Sleep(1500 * time.Millisecond) // status updates settle
			if err := stop(); err != nil {
				t.Fatal(err)
			}

			var rsList appsv1.ReplicaSetList
			if err := c.List(bg, &rsList, client.InNamespace(ns)); err != nil || len(rsList.Items) != 1 {
				t.Fatalf("replicasets: %v (%d)", err, len(rsList.Items))
			}
			rsName := rsList.Items[0].Name
			var pods corev1.PodList
			if err := c.List(bg, &pods, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}

			var live appsv1.Deployment
			if err := c.Get(bg, client.ObjectKeyFromObject(dep), &live); err != nil {
				t.Fatal(err)
			}
			versions := seen()
			var depSpans, rsSpans, waited int
			podCreates, rsCreates, statusUpdates, writes := 0, 0, 0, 0
			var lines []string
			// The deployment controller creates and scales the ReplicaSet and writes the
			// Deployment's status; the replicaset controller writes the ReplicaSet's status.
			for _, sp := range cooperating(t, s.Snapshot(), ns) {
				lines = append(lines, fmt.Sprintf("%s %s/%s uid=%s rv=%s %s calls=%d queued=%v", sp.Controller, sp.Namespace, sp.Name, sp.UID, sp.ResourceVersion, sp.Result, len(sp.Calls), sp.QueueWait))
				// The object each span reconciles, as its lister read it: the API server's UID,
				// and a version the API server had.
				wantUID := string(live.UID)
				if sp.Controller == "replicaset" {
					wantUID = string(rsList.Items[0].UID)
				}
				// A sync may fail before reading its object (kube-controller-manager refuses to act
				// on a cache older than its own last write): no read, no UID.
				unread := sp.UID == "" && len(sp.Calls) == 0 && sp.Result == span.ResultError
				if !unread && sp.UID != wantUID {
					t.Errorf("%s span of %s: uid %q, the API server's is %q", sp.Controller, sp.Name, sp.UID, wantUID)
				}
				if !unread && !versions[objectVersion{sp.UID, sp.ResourceVersion}] {
					t.Errorf("%s span of %s read resourceVersion %q of %s: no such version was watched", sp.Controller, sp.Name, sp.ResourceVersion, sp.UID)
				}
				if sp.QueueWait > 0 {
					waited++
				}
				switch sp.Controller {
				case "deployment":
					if sp.Name != "web" {
						t.Errorf("deployment span for %q", sp.Name)
					}
					depSpans++
				case "replicaset":
					if sp.Name != rsName {
						t.Errorf("replicaset span for %q, the ReplicaSet is %q", sp.Name, rsName)
					}
					rsSpans++
				}
				for _, cl := range sp.Calls {
					lines = append(lines, callLine(cl))
					// A lister's read of the reconciled object names its resource as the
					// lister's own GroupResource does: lister-gen's listers say
					// appsv1.Resource("deployment"), in the singular.
					if want := map[string]string{"deployment": "deployment", "replicaset": "replicaset"}[sp.Controller]; cl.Kind == span.CallCacheGet && cl.Name == sp.Name && cl.Resource != want {
						t.Errorf("%s span of %s: lister read of %s names resource %q, want %q", sp.Controller, sp.Name, cl.Name, cl.Resource, want)
					}
					if checkWrite(t, versions, sp.Controller, cl) {
						writes++
					}
					switch {
					case sp.Controller == "replicaset" && cl.Verb == "POST" && cl.Resource == "pods" && cl.Status == 201:
						podCreates++
					case sp.Controller == "deployment" && cl.Verb == "POST" && cl.Resource == "replicasets" && cl.Status == 201:
						rsCreates++
					case cl.Verb == "PUT" && cl.Subresource == "status" && cl.Status == 200:
						statusUpdates++
					}
					if cl.Namespace != ns {
						t.Errorf("call %s %s in namespace %q", cl.Verb, cl.Resource, cl.Namespace)
					}
				}
			}
			if depSpans == 0 || rsSpans == 0 {
				t.Errorf("%d deployment and %d replicaset spans", depSpans, rsSpans)
			}
			if podCreates != len(pods.Items) {
				t.Errorf("%d pod creations nested in replicaset spans; the API server has %d pods", podCreates, len(pods.Items))
			}
			if rsCreates != 1 {
				t.Errorf("%d ReplicaSet creations nested in deployment spans, want 1", rsCreates)
			}
			if waited < (depSpans+rsSpans)/2 {
				t.Errorf("only %d of %d spans have a queue wait from the work queue's adds", waited, depSpans+rsSpans)
			}
			if writes == 0 {
				t.Error("no write call checked")
			}
			if statusUpdates == 0 {
				t.Error("no status update nested in any span")
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("spans:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
}

// createWeb creates Deployment web (2 replicas of one container) in ns and waits for its 2 pods.
func createWeb(t *testing.T, c client.Client, ns string) *appsv1.Deployment {
	t.Helper()
	labels := map[string]string{"app": "web"}
	replicas := int32(2)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}},
	}
	if err := c.Create(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	waitPods(t, c, ns, 2)
	return dep
}

func waitPods(t *testing.T, c client.Client, ns string, n int) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("%d pods in %s", n, ns), 30*time.Second, func() (bool, string) {
		var pods corev1.PodList
		if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		return len(pods.Items) == n, fmt.Sprintf("there are %d: %v", len(names), names)
	})
}

// cooperating fails t for each span that reported a fight, and returns the spans of objects in
// namespace ns. The controllers these tests run cooperate: one writer per object and
// subresource, no fight.
func cooperating(t *testing.T, spans []span.Span, ns string) []span.Span {
	t.Helper()
	var out []span.Span
	for _, sp := range spans {
		for _, f := range sp.Fights {
			t.Errorf("%s span of %s/%s reported a fight: %+v", sp.Controller, sp.Namespace, sp.Name, f)
		}
		if sp.Namespace == ns {
			out = append(out, sp)
		}
	}
	return out
}

// callLine is one call as the tests log it, under its span's line.
func callLine(cl span.Call) string {
	return fmt.Sprintf("    %s %s %s %s/%s/%s %d uid=%s rv=%s", cl.Kind, cl.Verb, cl.Resource, cl.Namespace, cl.Name, cl.Subresource, cl.Status, cl.UID, cl.ResourceVersion)
}

// checkWrite tells whether cl, a call of controller's span, is a successful create, update or
// patch, and fails t when such a write does not carry a version the API server had (versions):
// the version it made.
func checkWrite(t *testing.T, versions map[objectVersion]bool, controller string, cl span.Call) bool {
	t.Helper()
	if cl.Kind != span.CallAPI || !cl.IsWrite() || cl.Verb == "DELETE" || cl.Status/100 != 2 {
		return false
	}
	if !versions[objectVersion{cl.UID, cl.ResourceVersion}] {
		t.Errorf("%s span: %s %s %s/%s: uid %q resourceVersion %q is no version the API server had", controller, cl.Verb, cl.Resource, cl.Name, cl.Subresource, cl.UID, cl.ResourceVersion)
	}
	return true
}

// objectVersion is one version of one object.
type objectVersion struct{ uid, resourceVersion string }

// watchVersions watches the deployments, replicasets, pods, statefulsets, daemonsets,
// controllerrevisions and jobs of namespace ns from now on and
// returns a function that stops the watches and gives every version they delivered.
func watchVersions(t *testing.T, env *testenv.Env, ns string) func() map[objectVersion]bool {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu       sync.Mutex
		versions = map[objectVersion]bool{}
		wg       sync.WaitGroup
	)
	for _, w := range []func(context.Context, metav1.ListOptions) (watch.Interface, error){
		cs.AppsV1().Deployments(ns).Watch, cs.AppsV1().ReplicaSets(ns).Watch, cs.CoreV1().Pods(ns).Watch,
		cs.AppsV1().StatefulSets(ns).Watch, cs.AppsV1().DaemonSets(ns).Watch, cs.AppsV1().ControllerRevisions(ns).Watch,
		cs.BatchV1().Jobs(ns).Watch,
	} {
		wi, err := w(ctx, metav1.ListOptions{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wi.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-wi.ResultChan():
					if !ok {
						t.Error("a watch ended early: versions may be missing")
						return
					}
					if o, ok := ev.Object.(metav1.Object); ok {
						mu.Lock()
						versions[objectVersion{string(o.GetUID()), o.GetResourceVersion()}] = true
						mu.Unlock()
					}
				}
			}
		}()
	}
	return func() map[objectVersion]bool {
		time.Sleep(500 * time.Millisecond) // the last events arrive
		cancel()
		wg.Wait()
		return versions
	}
}

// TestKubeControllerManagerWorkloads: the statefulset, daemonset and job controllers of a
// stripped kube-controller-manager read their object through client-go's listers: their spans
// carry the object's UID as the API server has it, and a version the API server had; their
// writes carry the versions they made.
func TestKubeControllerManagerWorkloads(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	env := testenv.Start(t, testenv.Options{ControllerManager: []string{"statefulset", "daemonset", "job"}, StrippedControllerManager: true})
	tr, s, _ := testenv.Trace(t, "kube-controller-manager", env.ControllerManagerPID)
	defer tr.Close()
	stop := testkit.Go(t, tr.Run)

	const ns = "kcm-workloads"
	c, bg := env.Client, context.Background()
	if err := c.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	seen := watchVersions(t, env, ns)
	one := int32(1)
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: app, Image: "busybox"}}}}
	}
	always := func(app string) corev1.PodTemplateSpec {
		pt := template(app)
		pt.Spec.RestartPolicy = corev1.RestartPolicyAlways
		return pt
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	objs := map[string]client.Object{
		"statefulset": &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
			Spec: appsv1.StatefulSetSpec{Replicas: &one, Selector: selector("db"), Template: always("db")}},
		"daemonset": &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
			Spec: appsv1.DaemonSetSpec{Selector: selector("agent"), Template: always("agent")}},
		"job": &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "once"},
			Spec: batchv1.JobSpec{Template: template("once")}},
	}
	for _, o := range objs {
		if err := c.Create(bg, o); err != nil {
			t.Fatal(err)
		}
	}
	// Each controller reconciles its object at least once, and the first syncs' writes settle.
	testkit.WaitFor(t, "a span of each controller's object", 30*time.Second, func() (bool, string) {
		got := map[string]bool{}
		for _, sp := range s.Snapshot() {
			if sp.Namespace == ns && sp.UID != "" {
				got[sp.Controller] = true
			}
		}
		return len(got) == len(objs), fmt.Sprintf("spans of %d of %d controllers", len(got), len(objs))
	})
	time.Sleep(1500 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	versions := seen()

	spans := map[string]int{}
	writes := 0
	var lines []string
	// The workload controllers cooperate: the deployment controller writes ReplicaSets and its
	// Deployments' status, the replicaset controller the ReplicaSets' status, and so on.
	for _, sp := range cooperating(t, s.Snapshot(), ns) {
		lines = append(lines, fmt.Sprintf("%s %s/%s uid=%s rv=%s %s calls=%d", sp.Controller, sp.Namespace, sp.Name, sp.UID, sp.ResourceVersion, sp.Result, len(sp.Calls)))
		for _, cl := range sp.Calls {
			lines = append(lines, callLine(cl))
			if checkWrite(t, versions, sp.Controller, cl) {
				writes++
			}
		}
		o, ok := objs[sp.Controller]
		if !ok || sp.Name != o.GetName() {
			t.Errorf("%s span for %q", sp.Controller, sp.Name)
			continue
		}
		spans[sp.Controller]++
		if sp.UID == "" && len(sp.Calls) == 0 && sp.Result == span.ResultError {
			continue // failed before reading its object (see TestKubeControllerManager)
		}
		if sp.UID != string(o.GetUID()) {
			t.Errorf("%s span of %s: uid %q, the API server's is %q", sp.Controller, sp.Name, sp.UID, o.GetUID())
		}
		if !versions[objectVersion{sp.UID, sp.ResourceVersion}] {
			t.Errorf("%s span of %s read resourceVersion %q: no such version was watched", sp.Controller, sp.Name, sp.ResourceVersion)
		}
	}
	for ctl := range objs {
		if spans[ctl] == 0 {
			t.Errorf("no %s span", ctl)
		}
	}
	if writes == 0 {
		t.Error("no write call checked")
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("spans:\n%s", strings.Join(lines, "\n"))
	}
}
