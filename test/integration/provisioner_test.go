package integration

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/testenv"
)

// provisionerName is the external-provisioner fixture's name, as its StorageClass names it.
const provisionerName = "reconscope.example/external-provisioner"

// TestExternalProvisionerQueues traces a third-party client-go controller that reconscope
// knows nothing of: the Kubernetes SIG Storage external-provisioner library
// (sigs.k8s.io/sig-storage-lib-external-provisioner/v13 v13.1.0, built from the Go module proxy
// by test/fixtures/external-provisioner, stripped), whose ProvisionController drains two work
// queues, "claims" (keyed by PersistentVolumeClaim UID) and "volumes" (keyed by
// PersistentVolume name), while claims of its StorageClass are provisioned, bound
// (kube-controller-manager's binder), deleted and their volumes deleted, one provisioning and
// one deletion failing once. Its own client-go work-queue metrics are the ground truth: per
// queue, spans = the delta of workqueue_work_duration_seconds_count, spans with result error =
// the delta of workqueue_retries_total; each span's object is a key of that queue (a claim's
// UID, a volume's name) and every claim and volume has spans; the scripted failures are error
// spans. Traced from its exec, the spans are named by the queues; traced from after its
// queues were made, by the library's workers that process them (probes.WorkerName of
// (*ProvisionController).processNextClaimWorkItem and processNextVolumeWorkItem, which its
// source names).
func TestExternalProvisionerQueues(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	bin := testkit.BuildModule(t, "test/fixtures/external-provisioner", "-trimpath", "-ldflags=-s -w")
	t.Run("from exec", func(t *testing.T) {
		provisionerQueues(t, bin, map[string]string{"claims": "claims", "volumes": "volumes"})
	})
	t.Run("attached late", func(t *testing.T) {
		provisionerQueues(t, bin, map[string]string{
			"claims":  "controller.ProvisionController.processNextClaimWorkItem",
			"volumes": "controller.ProvisionController.processNextVolumeWorkItem",
		})
	})
}

// provisionerQueues runs the provisioner and its workload, traced from its exec when every
// queue's spans are to be named by the queue (controllers: queue -> its spans' controller),
// else from after it made its queues, and compares the spans with its own counts.
func provisionerQueues(t *testing.T, bin string, controllers map[string]string) {
	fromExec := controllers["claims"] == "claims"
	env := testenv.Start(t, testenv.Options{ControllerManager: []string{
		"persistentvolume-binder-controller", "persistentvolume-protection-controller", "persistentvolumeclaim-protection-controller"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		tr   interface{ Close() error }
		sink *testkit.Sink
		stop func() error
	)
	if fromExec {
		tracer, s, plan := testenv.TraceExe(t, ctx, bin)
		t.Logf("attached %s", plan)
		tr, sink, stop = tracer, s, testkit.Go(t, tracer.Run)
		defer tr.Close()
	}

	addr := testenv.FreeAddr(t)
	p := testenv.StartProcess(t, "external-provisioner", exec.Command(bin,
		"--kubeconfig", env.Kubeconfig, "--name", provisionerName, "--metrics-addr", addr))
	url := "http://" + addr
	var baseWork, baseRetried map[string]uint64
	testkit.WaitFor(t, "the provisioner's metrics", 30*time.Second, func() (bool, string) {
		var err error
		if baseWork, err = queueCounts(url, workDuration); err != nil {
			return false, err.Error()
		}
		baseRetried, err = queueCounts(url, retries)
		return err == nil, fmt.Sprint(err)
	})
	if !fromExec { // its queues are made: their names are not seen
		tracer, s, plan := testenv.Trace(t, "external-provisioner", p.PID())
		t.Logf("attached %s", plan)
		tr, sink, stop = tracer, s, testkit.Go(t, tracer.Run)
		defer tr.Close()
	}

	claims, volumes := provisionerWorkload(t, env.Client)

	// Compared when the provisioner is quiet.
	var retried map[string]uint64
	var all []span.Span
	work := waitQueuesQuiet(t, "the provisioner", url, 60*time.Second, func() (err error) {
		all = sink.Snapshot()
		retried, err = queueCounts(url, retries)
		return err
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	keys := map[string]map[string]string{"claims": claims, "volumes": volumes}
	queueOf := map[string]string{}
	for q, c := range controllers {
		queueOf[c] = q
	}
	spans, errs := map[string]int{}, map[string]int{}
	seen := map[string]map[string]bool{"claims": {}, "volumes": {}}
	failed := map[string]map[string]bool{"claims": {}, "volumes": {}}
	for _, sp := range all {
		q, ok := queueOf[sp.Controller]
		if !ok {
			t.Errorf("span of controller %q (%s/%s %s), want one of %v", sp.Controller, sp.Namespace, sp.Name, sp.Result, controllers)
			continue
		}
		spans[q]++
		if sp.Result == span.ResultError {
			errs[q]++
		}
		objects := keys[q]
		if _, ok := objects[sp.Name]; !ok || sp.Namespace != "" || sp.ItemType != "" {
			t.Errorf("queue %s: span of object %q/%q (item type %q), which is none of its keys", q, sp.Namespace, sp.Name, sp.ItemType)
		}
		seen[q][sp.Name] = true
		if sp.Result == span.ResultError {
			failed[q][objects[sp.Name]] = true
		} else if sp.Result != span.ResultSuccess {
			t.Errorf("queue %s: span of %s with result %s, want success or error (the provisioner only retries)", q, objects[sp.Name], sp.Result)
		}
	}
	var lines []string
	for _, q := range []string{"claims", "volumes"} {
		work[q] -= baseWork[q]
		retried[q] -= baseRetried[q]
		lines = append(lines, fmt.Sprintf("%-8s %3d items %3d spans of %s, %2d retries %2d error spans", q, work[q], spans[q], controllers[q], retried[q], errs[q]))
		if work[q] == 0 || retried[q] == 0 {
			t.Errorf("queue %s: %d items done, %d retries: the workload should make both", q, work[q], retried[q])
		}
		if uint64(spans[q]) != work[q] {
			t.Errorf("queue %s: %d items done (its workqueue_work_duration_seconds_count), %d spans", q, work[q], spans[q])
		}
		if uint64(errs[q]) != retried[q] {
			t.Errorf("queue %s: %d retries (its workqueue_retries_total), %d spans with result error", q, retried[q], errs[q])
		}
		for key, object := range keys[q] {
			if !seen[q][key] {
				t.Errorf("queue %s: no span of %s (key %s)", q, object, key)
			}
		}
	}
	for q, object := range map[string]string{"claims": "claim fail-provision-0", "volumes": "volume of claim fail-delete-0"} {
		if !failed[q][object] {
			t.Errorf("queue %s: no error span of %s, whose first attempt failed", q, object)
		}
		for o := range failed[q] {
			if o != object {
				t.Logf("queue %s: %s also had an error span (a retry of the library's own)", q, o)
			}
		}
	}
	slices.Sort(lines)
	t.Logf("the provisioner's queues:\n%s", strings.Join(lines, "\n"))
}

// provisionerWorkload creates claims of the provisioner's StorageClass, waits until each is
// bound to the volume the provisioner made, deletes them and waits until the provisioner has
// deleted their volumes. It returns the keys of the provisioner's two queues, each with the
// object it stands for: the claims' UIDs and the volumes' names.
func provisionerWorkload(t *testing.T, c client.Client) (claims, volumes map[string]string) {
	t.Helper()
	bg := context.Background()
	reclaim := corev1.PersistentVolumeReclaimDelete
	immediate := storagev1.VolumeBindingImmediate
	if err := c.Create(bg, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "provisioned"},
		Provisioner: provisionerName, ReclaimPolicy: &reclaim, VolumeBindingMode: &immediate}); err != nil {
		t.Fatal(err)
	}
	const ns = "volumes"
	if err := c.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	class := "provisioned"
	var pvcs []*corev1.PersistentVolumeClaim
	for _, name := range []string{"data-0", "data-1", "data-2", "data-3", "fail-provision-0", "fail-delete-0"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if err := c.Create(bg, pvc); err != nil {
			t.Fatalf("create claim %s: %v", name, err)
		}
		pvcs = append(pvcs, pvc)
	}
	claims, volumes = map[string]string{}, map[string]string{}
	testkit.WaitFor(t, "every claim bound to a provisioned volume", 90*time.Second, func() (bool, string) {
		for _, pvc := range pvcs {
			if err := c.Get(bg, client.ObjectKeyFromObject(pvc), pvc); err != nil {
				return false, err.Error()
			}
			if pvc.Status.Phase != corev1.ClaimBound {
				return false, fmt.Sprintf("claim %s is %s", pvc.Name, pvc.Status.Phase)
			}
			claims[string(pvc.UID)] = "claim " + pvc.Name
			volumes[pvc.Spec.VolumeName] = "volume of claim " + pvc.Name
		}
		return true, ""
	})
	for _, pvc := range pvcs {
		if err := c.Delete(bg, pvc); err != nil {
			t.Fatalf("delete claim %s: %v", pvc.Name, err)
		}
	}
	testkit.WaitFor(t, "the provisioner deletes every volume", 90*time.Second, func() (bool, string) {
		for name := range volumes {
			err := c.Get(bg, client.ObjectKey{Name: name}, &corev1.PersistentVolume{})
			if !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("volume %s: %v", name, err)
			}
		}
		return true, ""
	})
	return claims, volumes
}
