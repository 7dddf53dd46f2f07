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
	"github.com/reconscope/reconscope/test/groundtruth"
)

// TestCallsInsideReconcile: the scripted Get/List/Create/Update/Patch/Delete and status
// update appear as children of the reconcile's span with the right verb, resource, object and
// HTTP status; the span's UID is the object's real UID; phases add up to the duration.
func TestCallsInsideReconcile(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	forEachBuild(t, func(t *testing.T, build fixtureBuild) {
		f := startTracedFixture(t, build.flags...)
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
		spans := f.sink.Snapshot()
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
		// The fixture's own record of this reconcile: the UID and resourceVersion it read, and
		// those its objects held after each call (the API server's responses).
		var rec *groundtruth.Record
		for i := range recs {
			if recs[i].ReconcileID == first.ReconcileID {
				rec = &recs[i]
			}
		}
		if rec == nil || len(rec.Calls) != 7 {
			t.Fatalf("no ground truth with 7 calls for reconcile %q: %+v", first.ReconcileID, rec)
		}
		if first.ResourceVersion != rec.ResourceVersion {
			t.Errorf("span resource_version %q, the reconcile read %q", first.ResourceVersion, rec.ResourceVersion)
		}
		type want struct {
			kind                          span.CallKind
			verb, resource, ns, name, sub string
			status                        int
			// uid and rv the call must carry ("": none); rv "*": any non-empty one
			uid, rv string
		}
		truth := func(i int) (string, string) { return rec.Calls[i].UID, rec.Calls[i].ResourceVersion }
		uidOf := func(i int) string { return rec.Calls[i].UID }
		targetUID, targetRV := truth(0)
		madeUID, madeRV := truth(2)
		updUID, updRV := truth(3)
		patchUID, patchRV := truth(4)
		svcUID, svcRV := truth(6)
		wants := []want{
			{span.CallCacheGet, "GET", "configmaps", ns, "calls", "", 0, rec.UID, rec.ResourceVersion},
			{span.CallCacheGet, "GET", "configmaps", ns, "target", "", 0, targetUID, targetRV},
			{span.CallCacheList, "LIST", "configmaps", "", "", "", 0, "", ""},
			// a create's name comes from the object the API server returned
			{span.CallAPI, "POST", "configmaps", ns, "made", "", 201, madeUID, madeRV},
			// the update's read of the live object (its version is not recorded by the fixture)
			{span.CallAPI, "GET", "configmaps", ns, "target", "", 200, uidOf(0), "*"},
			{span.CallAPI, "PUT", "configmaps", ns, "target", "", 200, updUID, updRV},
			{span.CallAPI, "PATCH", "configmaps", ns, "target", "", 200, patchUID, patchRV},
			{span.CallAPI, "DELETE", "configmaps", ns, "del-me", "", 200, "", ""},
			{span.CallAPI, "PATCH", "services", ns, "svc", "status", 200, svcUID, svcRV},
		}
		for i, w := range wants {
			if w.uid == "" && w.rv != "" || (w.kind == span.CallAPI && w.verb != "DELETE" && w.verb != "LIST" && w.uid == "") {
				t.Fatalf("ground truth lacks the object of call %d (%+v): %+v", i, w, rec.Calls)
			}
		}
		if updRV == patchRV || madeUID == targetUID {
			t.Fatalf("ground truth: update and patch made one version, or two objects share a UID: %+v", rec.Calls)
		}
		// and the API server itself: the last write of target and of the service made their
		// current versions
		var target corev1.ConfigMap
		var svc corev1.Service
		must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "target"}, &target))
		must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc"}, &svc))
		if string(target.UID) != patchUID || target.ResourceVersion != patchRV || string(svc.UID) != svcUID || svc.ResourceVersion != svcRV {
			t.Errorf("API server: target %s@%s, svc %s@%s; fixture saw %s@%s, %s@%s",
				target.UID, target.ResourceVersion, svc.UID, svc.ResourceVersion, patchUID, patchRV, svcUID, svcRV)
		}
		var got []string
		var top []span.Call
		for _, cl := range first.Calls {
			if cl.Depth == 0 {
				top = append(top, cl)
			}
			got = append(got, fmt.Sprintf("%d:%s %s %s %s/%s/%s %d uid=%s rv=%s", cl.Depth, cl.Kind, cl.Verb, cl.Resource, cl.Namespace, cl.Name, cl.Subresource, cl.Status, cl.UID, cl.ResourceVersion))
		}
		if len(top) != len(wants) {
			t.Fatalf("span has %d top-level calls, want %d:\n%s", len(top), len(wants), strings.Join(got, "\n"))
		}
		for i, w := range wants {
			g := top[i]
			if g.Kind != w.kind || g.Verb != w.verb || g.Resource != w.resource || g.Namespace != w.ns || g.Name != w.name || g.Subresource != w.sub || g.Status != w.status {
				t.Errorf("call %d = %s, want %+v", i, got[i], w)
			}
			if g.UID != w.uid || (w.rv == "*" && g.ResourceVersion == "") || (w.rv != "*" && g.ResourceVersion != w.rv) {
				t.Errorf("call %d = %s, want uid %q resource_version %q", i, got[i], w.uid, w.rv)
			}
		}
		sum := first.Phases.Fetch + first.Phases.Apply + first.Phases.Diff
		if diff := first.Duration - sum; diff < 0 || diff > first.Duration/100 {
			t.Errorf("phases %+v sum to %v, span lasted %v", first.Phases, sum, first.Duration)
		}
		if first.Phases.Apply <= 0 || first.Phases.Fetch <= 0 {
			t.Errorf("phases %+v: want reads and writes", first.Phases)
		}
		t.Logf("span %s/%s %v phases %+v calls:\n%s", first.Namespace, first.Name, first.Duration, first.Phases, strings.Join(got, "\n"))
	})
}
