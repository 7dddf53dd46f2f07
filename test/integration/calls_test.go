package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/pkg/span"
)

// TestCallsInsideReconcile: the scripted Get/List/Create/Update/Patch/Delete and status
// update appear as children of the reconcile's span with the right verb, resource, object and
// HTTP status; the span's UID is the object's real UID; phases add up to the duration.
func TestCallsInsideReconcile(t *testing.T) {
	bpftest.Require(t)
	for _, build := range []struct {
		name    string
		ldflags []string
	}{{"plain", nil}, {"stripped", []string{"-s", "-w"}}} {
		t.Run(build.name, func(t *testing.T) {
			f := startTracedFixture(t, build.ldflags...)
			ctx := context.Background()
			ns := "calls-" + build.name
			c := f.env.Client
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			must(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "target"}}))
			must(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "del-me"}}))
			must(c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}))
			time.Sleep(500 * time.Millisecond) // the fixture's cache sees them
			script := "times:1;get:configmap/target;list:configmap;create:configmap/made;update:configmap/target;" +
				"patch:configmap/target;delete:configmap/del-me;status:service/svc"
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "calls",
				Annotations: map[string]string{"scripted.reconscope.io/script": script}}}
			must(c.Create(ctx, obj))
			var live corev1.ConfigMap
			must(c.Get(ctx, client.ObjectKeyFromObject(obj), &live))

			recs := settle(t, f.truth, []string{"calls"})
			time.Sleep(300 * time.Millisecond)
			f.stop(t)

			var first *span.Span
			spans := f.sink.snapshot()
			for i := range spans {
				s := &spans[i]
				if s.Namespace == ns && s.Name == "calls" && !s.Noop {
					first = s
				}
			}
			if first == nil {
				t.Fatalf("no writing span for %s/calls among %d spans (%d ground-truth lines)", ns, len(spans), len(recs))
			}
			if first.UID != string(live.UID) {
				t.Errorf("span uid %q, object's uid %q", first.UID, live.UID)
			}
			type want struct {
				kind                          span.CallKind
				verb, resource, ns, name, sub string
				status                        int
			}
			wants := []want{
				{span.CallCacheGet, "GET", "configmaps", ns, "calls", "", 0},
				{span.CallCacheGet, "GET", "configmaps", ns, "target", "", 0},
				{span.CallCacheList, "LIST", "configmaps", "", "", "", 0},
				{span.CallAPI, "POST", "configmaps", ns, "", "", 201},
				{span.CallAPI, "GET", "configmaps", ns, "target", "", 200},
				{span.CallAPI, "PUT", "configmaps", ns, "target", "", 200},
				{span.CallAPI, "PATCH", "configmaps", ns, "target", "", 200},
				{span.CallAPI, "DELETE", "configmaps", ns, "del-me", "", 200},
				{span.CallAPI, "PATCH", "services", ns, "svc", "status", 200},
			}
			var got []string
			var top []span.Call
			for _, cl := range first.Calls {
				if cl.Depth == 0 {
					top = append(top, cl)
				}
				got = append(got, fmt.Sprintf("%d:%s %s %s %s/%s/%s %d", cl.Depth, cl.Kind, cl.Verb, cl.Resource, cl.Namespace, cl.Name, cl.Subresource, cl.Status))
			}
			if len(top) != len(wants) {
				t.Fatalf("span has %d top-level calls, want %d:\n%s", len(top), len(wants), strings.Join(got, "\n"))
			}
			for i, w := range wants {
				g := top[i]
				if g.Kind != w.kind || g.Verb != w.verb || g.Resource != w.resource || g.Namespace != w.ns || g.Name != w.name || g.Subresource != w.sub || g.Status != w.status {
					t.Errorf("call %d = %s, want %+v", i, got[i], w)
				}
			}
			sum := first.Phases.Read + first.Phases.Write + first.Phases.Compute
			if diff := first.Duration - sum; diff < 0 || diff > first.Duration/100 {
				t.Errorf("phases %+v sum to %v, span lasted %v", first.Phases, sum, first.Duration)
			}
			if first.Phases.Write <= 0 || first.Phases.Read <= 0 {
				t.Errorf("phases %+v: want reads and writes", first.Phases)
			}
			t.Logf("span %s/%s %v phases %+v calls:\n%s", first.Namespace, first.Name, first.Duration, first.Phases, strings.Join(got, "\n"))
		})
	}
}
