package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestKubeControllerManager traces the real kube-controller-manager (client-go workqueue
// controllers): creating and scaling a Deployment yields deployment and replicaset spans for
// the right objects, with their API calls (pod creation, status updates) nested.
func TestKubeControllerManager(t *testing.T) {
	bpftest.Require(t)
	for _, stripped := range []bool{true, false} {
		name := "plain"
		if stripped {
			name = "stripped"
		}
		t.Run(name, func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{ControllerManager: []string{"replicaset", "deployment"}, StrippedControllerManager: stripped})
			s := &sink{}
			tr, err := tracer.New(tracer.Options{Writer: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			plan, err := tr.TracePID(env.ControllerManagerPID)
			if err != nil {
				t.Fatalf("trace kube-controller-manager: %v", err)
			}
			for _, o := range plan.Offsets {
				if o.Err != nil {
					t.Errorf("offset unknown: %s.%s: %v", o.Type, o.Path, o.Err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- tr.Run(ctx) }()

			ns := "kcm-" + name
			c := env.Client
			bg := context.Background()
			if err := c.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			labels := map[string]string{"app": "web"}
			replicas := int32(2)
			dep := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
				Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}},
			}
			if err := c.Create(bg, dep); err != nil {
				t.Fatal(err)
			}
			waitPods(t, c, ns, 2)
			if err := c.Patch(bg, dep, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":4}}`))); err != nil {
				t.Fatal(err)
			}
			waitPods(t, c, ns, 4)
			time.Sleep(1500 * time.Millisecond) // status updates settle
			cancel()
			if err := <-done; err != nil {
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

			var depSpans, rsSpans, waited int
			podCreates, rsCreates, statusUpdates := 0, 0, 0
			var lines []string
			for _, sp := range s.snapshot() {
				if sp.Namespace != ns {
					continue
				}
				lines = append(lines, fmt.Sprintf("%s %s/%s %s calls=%d queued=%v", sp.Controller, sp.Namespace, sp.Name, sp.Result, len(sp.Calls), sp.QueueWait))
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
					lines = append(lines, fmt.Sprintf("    %s %s %s/%s/%s %d", cl.Verb, cl.Resource, cl.Namespace, cl.Name, cl.Subresource, cl.Status))
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
			if statusUpdates == 0 {
				t.Error("no status update nested in any span")
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("spans:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
}

func waitPods(t *testing.T, c client.Client, ns string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var pods corev1.PodList
		if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err == nil && len(pods.Items) == n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no %d pods in %s after 30s", n, ns)
}
