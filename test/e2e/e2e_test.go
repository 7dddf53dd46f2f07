//go:build e2e

// Package e2e is reconscope's end-to-end test (`make e2e`, docs/e2e.md): the agent in DaemonSet
// mode (`reconscope-agent run`) on a real control plane, tracing three real controllers it
// finds by scanning /proc — kube-controller-manager (stripped, as released), the scripted
// fixture and controller-runtime's own builtins example — while a story of Deployments and
// ConfigMaps plays; then what the agent said (JSON lines, a real OTLP/gRPC receiver, a real
// Prometheus) is checked against what really happened (the fixture's ground truth, the API
// server's objects, the controllers' own controller-runtime metrics).
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

const (
	ns                 = "e2e"
	node               = "e2e-node"
	scriptAnnotation   = "scripted.reconscope.io/script"
	fixtureController  = "scripted"
	builtinsController = "foo-controller" // the name examples/builtins gives its controller
	deploymentName     = "web"
)

// fixtureScripts are the scripted ConfigMaps: every kind of outcome (see the fixture's doc).
var fixtureScripts = []struct{ name, script string }{
	{"ok", "success"},
	{"calls", "times:1;get:configmap/ok;list:configmap;create:configmap/made;patch:configmap/made"},
	{"fail", "times:2;error"},               // fails twice, then recovers
	{"fail-status", "times:1;error-status"}, // a *errors.StatusError, then recovers
	{"requeue", "times:1;requeue"},
	{"requeue-after", "times:1;requeue-after:300ms"},
	{"panic", "times:1;panic"}, // controller-runtime recovers it: an error, then a success
}

// minRecords is how many reconciles of each ConfigMap the story causes at least: its script's
// reconciles, one for the update of "ok", one for each deletion.
var minRecords = map[string]int{"ok": 3, "calls": 1, "fail": 4, "fail-status": 2, "requeue": 2, "requeue-after": 2, "panic": 3}

// fixtureDeleted are the ConfigMaps the story deletes.
var fixtureDeleted = []string{"ok", "fail", "panic"}

func TestEndToEnd(t *testing.T) {
	began := time.Now()
	ctrllog.SetLogger(logr.Discard()) // envtest logs through controller-runtime; its lines are not wanted here
	bpftest.Require(t)
	promBin := requirePrometheus(t)

	// Build everything (the builtins install runs meanwhile), then start the control plane.
	builtinsBin := installBuiltins(t)
	usePrivateControlPlane(t)
	agentBin := testkit.Build(t, "./cmd/agent")
	fixtureBin := testkit.Build(t, "./test/fixtures/scripted-controller")
	builtinsPath := builtinsBin()
	checkPortsFree(t, builtinsPorts)
	env := testenv.Start(t, testenv.Options{ControllerManager: []string{"replicaset", "deployment"}, StrippedControllerManager: true})
	ctx := context.Background()

	// The scripted fixture, with its ground truth and its own metrics.
	truthPath := filepath.Join(t.TempDir(), "truth.jsonl")
	fixture := testenv.StartProcess(t, "scripted-controller", exec.Command(fixtureBin, "--kubeconfig", env.Kubeconfig,
		"--ground-truth", truthPath, "--metrics-bind-address", "127.0.0.1:0", "--max-concurrent-reconciles", "2"))
	var fixtureMetrics string
	testkit.WaitFor(t, "the fixture's metrics address", 30*time.Second, func() (bool, string) {
		mustRun(t, fixture, "scripted-controller")
		addr, ok := lineAfter(fixture.StderrPath(), "metrics listening on ")
		fixtureMetrics = "http://" + addr + "/metrics"
		return ok, `no "metrics listening on" line on its stderr yet`
	})

	// controller-runtime's builtins example: its webhook server needs a certificate in
	// $TMPDIR/k8s-webhook-server/serving-certs; it reads KUBECONFIG (it parses no flags).
	tmp := t.TempDir()
	writeServingCert(t, filepath.Join(tmp, "k8s-webhook-server", "serving-certs"))
	bcmd := exec.Command(builtinsPath)
	bcmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "TMPDIR="+tmp)
	builtins := testenv.StartProcess(t, "builtins", bcmd)
	builtinsMetrics := "http://127.0.0.1:" + builtinsPorts[0] + "/metrics"
	for _, m := range []struct {
		p                     *testenv.Process
		name, url, controller string
	}{
		{fixture, "scripted-controller", fixtureMetrics, fixtureController},
		{builtins, "builtins", builtinsMetrics, builtinsController},
	} {
		// controller-runtime sets a controller's counters to 0 when it starts the controller.
		testkit.WaitFor(t, m.name+" starts its controller", 60*time.Second, func() (bool, string) {
			mustRun(t, m.p, m.name)
			body, err := httpGet(m.url)
			return err == nil && strings.Contains(body, `controller_runtime_reconcile_total{controller="`+m.controller+`"`), fmt.Sprint(err)
		})
	}

	// The agent, as the DaemonSet runs it, limited to this test's three executables, exporting
	// to a real OTLP/gRPC receiver. Nothing has been reconciled yet: the agent attaches before
	// the story starts, so every reconcile the controllers count, it sees.
	rx := testkit.StartOTLPReceiver(t)
	otlpAddr := rx.Addr
	agent, metricsAddr := startRunAgent(t, agentBin, env.Kubeconfig, node, otlpAddr, fixtureBin, builtinsPath, env.ControllerManagerPath)
	pids := map[int]string{fixture.PID(): "scripted-controller", builtins.PID(): "builtins", env.ControllerManagerPID: "kube-controller-manager"}
	waitTracing(t, agent, pids)
	promURL, _ := startPrometheus(t, promBin, metricsAddr)
	t.Logf("set up in %s: control plane, kube-controller-manager (pid %d), scripted-controller (pid %d), builtins (pid %d), agent, OTLP receiver, Prometheus",
		time.Since(began).Round(time.Millisecond), env.ControllerManagerPID, fixture.PID(), builtins.PID())

	// The story.
	storyStart := time.Now()
	st := playStory(t, ctx, env, truthPath)
	t.Logf("story played in %s", time.Since(storyStart).Round(time.Millisecond))

	// Wait until the controllers are done: the ground truth has every reconcile the story
	// causes, the agent has a span for each, and neither output grew for 3 s.
	var recs []groundtruth.Record
	var spans []exporter.JSONSpan
	lastSig, stableSince := "", time.Now()
	testkit.WaitFor(t, "the controllers settle", 120*time.Second, func() (bool, string) {
		mustRun(t, agent, "reconscope-agent")
		recs, _ = groundtruth.ReadFile(truthPath)
		spans = readSpans(t, agent.StdoutPath(), false)
		sig := fmt.Sprintf("%d ground-truth records, %d spans", len(recs), len(spans))
		if sig != lastSig {
			lastSig, stableSince = sig, time.Now()
		}
		if why := truthIncomplete(recs); why != "" {
			return false, why
		}
		if n := len(byPID(spans, fixture.PID())); n != len(recs) {
			return false, fmt.Sprintf("%d fixture spans for %d ground-truth records", n, len(recs))
		}
		return time.Since(stableSince) >= 3*time.Second, "still changing: " + sig
	})
	settledAt := time.Now()
	spans = readSpans(t, agent.StdoutPath(), true)
	st.stopWatches(t)

	// What the agent says must hold everywhere. kube-controller-manager's queues the story does
	// not drive (its serving-certificate controllers') have spans too (every work-queue item is
	// one, issue 26): the story's checks are about its two controllers.
	storyKCM := func(s exporter.JSONSpan) bool { return s.Controller == "deployment" || s.Controller == "replicaset" }
	perController := counts{}
	for _, s := range spans {
		perController[s.Controller+"|"+s.Result]++
		if _, ok := pids[int(s.PID)]; !ok {
			t.Errorf("span of pid %d (%s), which the agent was told not to trace: %+v", s.PID, s.Exe, s)
		}
		if int(s.PID) == env.ControllerManagerPID && !storyKCM(s) {
			continue
		}
		if s.Namespace != ns {
			t.Errorf("%s span in namespace %q: nothing was reconciled outside %q", s.Controller, s.Namespace, ns)
		}
		if s.Result == "abandoned" || s.Incomplete {
			t.Errorf("%s span of %s/%s: result %s, incomplete %v", s.Controller, s.Namespace, s.Name, s.Result, s.Incomplete)
		}
	}
	t.Logf("%d spans by controller|result: %s", len(spans), perController)
	// No false report of why it ran: no controller of the story loops on its own writes, and the
	// fixture reads nothing a traced write had already replaced (its reads come before its
	// writes, of objects only kubectl writes). A stale read elsewhere may be real (an informer
	// behind a write of the other controller): logged, not failed.
	stale := counts{}
	for _, s := range spans {
		for _, h := range s.HotLoops {
			t.Errorf("%s span of %s/%s reports a hot loop (%s) the story has none of: %+v", s.Controller, s.Namespace, s.Name, h.Kind, h)
		}
		if len(s.StaleReads) == 0 {
			continue
		}
		stale[s.Controller] += len(s.StaleReads)
		if int(s.PID) == fixture.PID() {
			t.Errorf("fixture span of %s/%s reports stale reads, yet it read nothing a traced write had replaced: %+v", s.Namespace, s.Name, s.StaleReads)
		}
	}
	if len(stale) == 0 {
		t.Logf("stale reads flagged: none")
	} else {
		t.Logf("stale reads flagged by controller: %s", stale)
	}

	checkGroundTruth(t, recs, byPID(spans, fixture.PID()), st.cmUIDs)
	checkControllerManager(t, slices.DeleteFunc(byPID(spans, env.ControllerManagerPID), func(s exporter.JSONSpan) bool { return !storyKCM(s) }), st)
	checkBuiltins(t, byPID(spans, builtins.PID()), st)
	checkPrometheus(t, promURL, spans, settledAt, len(pids))
	for _, m := range []struct {
		name, url, controller string
		pid                   int
	}{
		{"scripted-controller", fixtureMetrics, fixtureController, fixture.PID()},
		{"builtins", builtinsMetrics, builtinsController, builtins.PID()},
	} {
		theirs, panics, err := controllerRuntimeTotals(m.url, m.controller)
		if err != nil {
			t.Errorf("%s's own metrics: %v", m.name, err)
			continue
		}
		ours := counts{}
		for _, s := range byPID(spans, m.pid) {
			if s.Controller == m.controller {
				ours[s.Result]++
			}
		}
		if d := diffCounts(ours, theirs); len(d) > 0 {
			t.Errorf("%s: our spans by result differ from its controller_runtime_reconcile_total{controller=%q}: %v", m.name, m.controller, d)
		}
		t.Logf("%s: controller_runtime_reconcile_total{controller=%q} by result = ours: %s (panics %d)", m.name, m.controller, theirs, panics)
		if m.pid == fixture.PID() {
			want := 0
			for _, r := range recs {
				if r.Outcome == groundtruth.OutcomePanic {
					want++
				}
			}
			if panics != want {
				t.Errorf("controller_runtime_reconcile_panics_total %d, ground truth has %d panics", panics, want)
			}
		}
	}

	// SIGTERM: the agent flushes its spans to the receiver, detaches and exits 0.
	if err := agent.Stop(); err != nil {
		t.Errorf("agent exit after SIGTERM: %v", err)
	}
	stopped := false
	for _, l := range agentLogs(agent.StderrPath()) {
		if l.msg() == "stopped" {
			stopped = true
			if lost := l.int("lost"); lost != 0 {
				t.Errorf("the agent lost %d events", lost)
			}
		}
	}
	if !stopped {
		t.Error(`the agent logged no "stopped" line`)
	}
	if final := readSpans(t, agent.StdoutPath(), true); len(final) != len(spans) {
		t.Errorf("%d spans after the agent stopped, %d before: it closed reconciles at shutdown", len(final), len(spans))
		spans = final
	}
	if links, err := bpftest.UprobeLinks(); err == nil {
		for _, l := range links {
			if l.File == fixtureBin || l.File == builtinsPath {
				t.Errorf("uprobe link left after the agent stopped: %+v", l)
			}
		}
	}
	sum := compareOTLP(t, spans, rx, node)
	t.Logf("OTLP receiver: %d reconciles (root spans) with %d call spans in %d export requests match the JSON output; %d links to the previous reconcile",
		sum.roots, sum.calls, sum.requests, sum.links)
	t.Logf("end-to-end test took %s", time.Since(began).Round(time.Millisecond))
}

// story is what playStory did and saw.
type story struct {
	cmUIDs              map[string]string // fixture ConfigMap name → UID
	depUID              string
	rsName, rsUID       string
	pods, replicaSets   *seenObjects
	deployments         *seenObjects
	podsAtScaleDownDone int
	podsBeforeScaleDown int
	stopWatch           context.CancelFunc
}

// playStory creates a Deployment, scales it up and down, creates the scripted ConfigMaps,
// updates and deletes some, and deletes the Deployment, its ReplicaSet and pods.
func playStory(t *testing.T, ctx context.Context, env *testenv.Env, truthPath string) *story {
	t.Helper()
	c := env.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	cs, err := kubernetes.NewForConfig(env.Config)
	must(err)
	wctx, cancel := context.WithCancel(ctx)
	st := &story{cmUIDs: map[string]string{}, stopWatch: cancel}
	t.Cleanup(cancel)
	st.pods = watchObjects(wctx, "pods", func(ctx context.Context) (watch.Interface, error) {
		return cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	})
	st.replicaSets = watchObjects(wctx, "replicasets", func(ctx context.Context) (watch.Interface, error) {
		return cs.AppsV1().ReplicaSets(ns).Watch(ctx, metav1.ListOptions{})
	})
	st.deployments = watchObjects(wctx, "deployments", func(ctx context.Context) (watch.Interface, error) {
		return cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{})
	})
	for _, w := range []*seenObjects{st.pods, st.replicaSets, st.deployments} {
		must(w.startErr)
	}

	// The scripted ConfigMaps: the fixture reconciles them meanwhile.
	for _, s := range fixtureScripts {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name,
			Annotations: map[string]string{scriptAnnotation: s.script}}}
		must(c.Create(ctx, cm))
		st.cmUIDs[s.name] = string(cm.UID)
	}

	// A Deployment of 2, scaled to 4, then to 1. There is no kubelet: pods stay Pending, and
	// unscheduled pods go at once when deleted.
	labels := map[string]string{"app": deploymentName}
	replicas := int32(2)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deploymentName},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}},
	}
	must(c.Create(ctx, dep))
	st.depUID = string(dep.UID)
	waitPods(t, c, 2)
	scale := func(n int) {
		t.Helper()
		must(c.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deploymentName}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))))
	}
	scale(4)
	waitPods(t, c, 4)
	st.podsBeforeScaleDown = 4
	scale(1)
	waitPods(t, c, 1)
	st.podsAtScaleDownDone = 1
	testkit.WaitFor(t, "the Deployment settles at 1 replica", 60*time.Second, func() (bool, string) {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: deploymentName}, &d); err != nil {
			return false, err.Error()
		}
		s := d.Status
		return s.ObservedGeneration == d.Generation && s.Replicas == 1 && s.UpdatedReplicas == 1,
			fmt.Sprintf("generation %d, status %+v", d.Generation, s)
	})
	testkit.WaitFor(t, "builtins labels the ReplicaSet and it settles", 60*time.Second, func() (bool, string) {
		var list appsv1.ReplicaSetList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 {
			return false, fmt.Sprintf("%d ReplicaSets", len(list.Items))
		}
		rs := list.Items[0]
		st.rsName, st.rsUID = rs.Name, string(rs.UID)
		return rs.Labels["hello"] == "world" && rs.Status.ObservedGeneration == rs.Generation && rs.Status.Replicas == 1,
			fmt.Sprintf("labels %v, generation %d, status %+v", rs.Labels, rs.Generation, rs.Status)
	})

	// Change one ConfigMap, then delete some.
	must(c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ok"}},
		client.RawPatch(types.MergePatchType, []byte(`{"data":{"version":"2"}}`))))
	testkit.WaitFor(t, `the fixture reconciles the update of "ok"`, 60*time.Second, func() (bool, string) {
		n := 0
		recs, _ := groundtruth.ReadFile(truthPath)
		for _, r := range recs {
			if r.Name == "ok" {
				n++
			}
		}
		return n >= 2, fmt.Sprintf("%d reconciles of ok", n)
	})
	for _, name := range fixtureDeleted {
		must(c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	}

	// Delete the Deployment, then its ReplicaSet, then the pod left (no garbage collector
	// runs: kube-controller-manager runs the replicaset and deployment controllers only).
	must(c.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deploymentName}}))
	waitGone(t, c, &appsv1.Deployment{}, deploymentName)
	must(c.Delete(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: st.rsName}}))
	waitGone(t, c, &appsv1.ReplicaSet{}, st.rsName)
	must(c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns)))
	waitPods(t, c, 0)
	return st
}

func (st *story) stopWatches(t *testing.T) {
	t.Helper()
	st.stopWatch()
	for _, w := range []*seenObjects{st.pods, st.replicaSets, st.deployments} {
		if err := w.wait(); err != nil {
			t.Errorf("watch of %s: %v", w.what, err)
		}
	}
}

// seenObjects records what a watch saw: every object added (name → UID) and deletions.
type seenObjects struct {
	what     string
	mu       sync.Mutex
	added    map[string]string
	nAdded   int
	nDeleted int
	startErr error
	err      error
	done     chan struct{}
}

func watchObjects(ctx context.Context, what string, start func(context.Context) (watch.Interface, error)) *seenObjects {
	s := &seenObjects{what: what, added: map[string]string{}, done: make(chan struct{})}
	w, err := start(ctx)
	if err != nil {
		s.startErr = fmt.Errorf("watch %s: %w", what, err)
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					if ctx.Err() == nil {
						s.mu.Lock()
						s.err = fmt.Errorf("the watch of %s ended early: events may be missing", what)
						s.mu.Unlock()
					}
					return
				}
				obj, err := meta.Accessor(ev.Object)
				if err != nil {
					s.mu.Lock()
					s.err = fmt.Errorf("watch %s: %v event with %T", what, ev.Type, ev.Object)
					s.mu.Unlock()
					continue
				}
				s.mu.Lock()
				switch ev.Type {
				case watch.Added:
					s.added[obj.GetName()] = string(obj.GetUID())
					s.nAdded++
				case watch.Deleted:
					s.nDeleted++
				}
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *seenObjects) wait() error {
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *seenObjects) snapshot() (map[string]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]string, len(s.added))
	for k, v := range s.added {
		m[k] = v
	}
	return m, s.nAdded
}

func waitPods(t *testing.T, c client.Client, n int) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("%d pods in %s", n, ns), 60*time.Second, func() (bool, string) {
		var pods corev1.PodList
		if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == n, fmt.Sprintf("%d pods", len(pods.Items))
	})
}

func waitGone(t *testing.T, c client.Client, obj client.Object, name string) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("%T %s/%s gone", obj, ns, name), 60*time.Second, func() (bool, string) {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// truthIncomplete says what the ground truth still lacks of the reconciles the story causes,
// or "" when it has them all.
func truthIncomplete(recs []groundtruth.Record) string {
	n := map[string]int{}
	gone := map[string]bool{}
	for _, r := range recs {
		n[r.Name]++
		if r.UID == "" {
			gone[r.Name] = true
		}
	}
	var missing []string
	for _, name := range sortedKeys(minRecords) {
		if n[name] < minRecords[name] {
			missing = append(missing, fmt.Sprintf("%s has %d of ≥%d", name, n[name], minRecords[name]))
		}
	}
	for _, name := range fixtureDeleted {
		if !gone[name] {
			missing = append(missing, name+" deleted: not reconciled yet")
		}
	}
	return strings.Join(missing, "; ")
}

// readSpans parses the agent's JSON lines; strict: every line must parse.
func readSpans(t *testing.T, path string, strict bool) []exporter.JSONSpan {
	t.Helper()
	var out []exporter.JSONSpan
	for _, line := range completeLines(path) {
		var s exporter.JSONSpan
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			if strict {
				t.Errorf("agent stdout: not a JSON span: %v: %s", err, line)
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

func byPID(spans []exporter.JSONSpan, pid int) []exporter.JSONSpan {
	var out []exporter.JSONSpan
	for _, s := range spans {
		if int(s.PID) == pid {
			out = append(out, s)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkGroundTruth: every reconcile the fixture performed has exactly one span, by reconcile
// ID, with its object, UID, result, error, requeue delay, times and calls.
func checkGroundTruth(t *testing.T, recs []groundtruth.Record, spans []exporter.JSONSpan, uids map[string]string) {
	t.Helper()
	byID := testkit.ByReconcileID(t, spans, len(recs), func(s exporter.JSONSpan) string { return s.ReconcileID })
	outcomes := counts{}
	for _, r := range recs {
		outcomes[string(r.Outcome)]++
		s, ok := byID[r.ReconcileID]
		if !ok {
			t.Errorf("%s/%s attempt %d (%s, %s): no span", r.Namespace, r.Name, r.Attempt, r.Outcome, r.ReconcileID)
			continue
		}
		var bad []string
		if s.Controller != r.Controller || s.Namespace != r.Namespace || s.Name != r.Name {
			bad = append(bad, fmt.Sprintf("object %s %s/%s", s.Controller, s.Namespace, s.Name))
		}
		if want := r.MetricResult(); s.Result != want {
			bad = append(bad, fmt.Sprintf("result %s, want %s", s.Result, want))
		}
		wantType, wantErr := testkit.WantError(r)
		if s.ErrorType != wantType {
			bad = append(bad, fmt.Sprintf("error type %q, want %q", s.ErrorType, wantType))
		}
		if !testkit.MessageMatches(s.Error, wantErr) {
			bad = append(bad, fmt.Sprintf("error %q, want %q", s.Error, wantErr))
		}
		if s.RequeueAfterNS != r.RequeueAfterNS {
			bad = append(bad, fmt.Sprintf("requeue after %d ns, want %d", s.RequeueAfterNS, r.RequeueAfterNS))
		}
		if s.UID != r.UID {
			bad = append(bad, fmt.Sprintf("uid %q, the fixture read %q", s.UID, r.UID))
		}
		if r.UID != "" && r.UID != uids[r.Name] {
			bad = append(bad, fmt.Sprintf("the fixture read uid %q, the API server gave %q", r.UID, uids[r.Name]))
		}
		// The probed function encloses the fixture's Reconcile (5ms slack for two clocks).
		start := s.Start
		end := start.Add(time.Duration(s.DurationNS))
		if start.After(r.Start.Add(5*time.Millisecond)) || end.Before(r.End.Add(-5*time.Millisecond)) {
			bad = append(bad, fmt.Sprintf("span [%s, %s] does not enclose the fixture's [%s, %s]", start.Format(time.RFC3339Nano),
				end.Format(time.RFC3339Nano), r.Start.Format(time.RFC3339Nano), r.End.Format(time.RFC3339Nano)))
		}
		if s.Noop == hasWrite(r.Calls) { // reconscope's no-op: a reconcile that wrote nothing
			bad = append(bad, fmt.Sprintf("noop %v, but the fixture's calls were %+v", s.Noop, r.Calls))
		}
		for _, c := range r.Calls {
			if !hasCall(s.Calls, c) {
				bad = append(bad, fmt.Sprintf("no call for %s %s/%s", c.Verb, c.Kind, c.Name))
			}
		}
		// What it cost in traps: at least its start and its end, and one for each call seen.
		if hits := int(s.ProbeHits.Emulated + s.ProbeHits.SingleStepped); hits < 2+len(s.Calls) {
			bad = append(bad, fmt.Sprintf("probe_hits %+v for a reconcile with %d calls: fewer than one hit at its start, one at its end and one per call", s.ProbeHits, len(s.Calls)))
		}
		if len(bad) > 0 {
			t.Errorf("%s/%s attempt %d (%s): %s", r.Namespace, r.Name, r.Attempt, r.Outcome, strings.Join(bad, "; "))
		}
	}
	t.Logf("ground truth: %d reconciles of the fixture by outcome: %s; each has exactly one span", len(recs), outcomes)
}

func hasWrite(calls []groundtruth.Call) bool {
	for _, c := range calls {
		switch c.Verb {
		case "create", "update", "patch", "delete":
			return true
		}
	}
	return false
}

// hasCall tells whether calls hold the call a script step made.
func hasCall(calls []exporter.JSONCall, want groundtruth.Call) bool {
	kind, verb, status := "api", "", 200
	switch want.Verb {
	case "get":
		kind, verb, status = "cache_get", "GET", 0
	case "list":
		kind, verb, status = "cache_list", "LIST", 0
	case "create":
		verb, status = "POST", 201
	case "update":
		verb = "PUT"
	case "patch":
		verb = "PATCH"
	case "delete":
		verb = "DELETE"
	}
	resource := want.Kind + "s"
	for _, c := range calls {
		if c.Kind != kind || c.Verb != verb || c.Resource != resource || c.Subresource != want.Subresource || c.Status != status {
			continue
		}
		if verb == "POST" || verb == "LIST" || c.Name == want.Name {
			return true
		}
	}
	return false
}

// checkControllerManager: kube-controller-manager's spans name the Deployment and ReplicaSet the
// API server had, carry their UIDs when read, and hold the pod and ReplicaSet writes.
func checkControllerManager(t *testing.T, spans []exporter.JSONSpan, st *story) {
	t.Helper()
	rsAdded, nRS := st.replicaSets.snapshot()
	depAdded, _ := st.deployments.snapshot()
	_, nPods := st.pods.snapshot()
	results := counts{}
	var podPosts, podDeletes, rsPosts, withUID int
	for _, s := range spans {
		results[s.Controller+"|"+s.Result]++
		var want map[string]string
		switch s.Controller {
		case "deployment":
			want = depAdded
		case "replicaset":
			want = rsAdded
		default:
			t.Errorf("kube-controller-manager span of controller %q", s.Controller)
			continue
		}
		uid, ok := want[s.Name]
		if !ok {
			t.Errorf("%s span names %s/%s, which the API server never had (it had %v)", s.Controller, s.Namespace, s.Name, sortedKeys(want))
		}
		if s.UID != "" {
			withUID++
			if s.UID != uid {
				t.Errorf("%s span of %s: uid %q, the API server's is %q", s.Controller, s.Name, s.UID, uid)
			}
		}
		for _, c := range s.Calls {
			if c.Kind != "api" {
				continue
			}
			if c.Namespace != ns {
				t.Errorf("%s span: call %s %s in namespace %q", s.Controller, c.Verb, c.Resource, c.Namespace)
			}
			switch {
			case c.Verb == "POST" && c.Resource == "pods":
				if s.Controller != "replicaset" || c.Status != 201 {
					t.Errorf("pod creation (status %d) in a %s span", c.Status, s.Controller)
				}
				podPosts++
			case c.Verb == "DELETE" && c.Resource == "pods":
				if s.Controller != "replicaset" || c.Status != 200 {
					t.Errorf("pod deletion (status %d) in a %s span", c.Status, s.Controller)
				}
				podDeletes++
			case c.Verb == "POST" && c.Resource == "replicasets":
				if s.Controller != "deployment" || c.Status != 201 {
					t.Errorf("ReplicaSet creation (status %d) in a %s span", c.Status, s.Controller)
				}
				rsPosts++
			}
		}
	}
	if results["deployment|success"] == 0 || results["replicaset|success"] == 0 {
		t.Errorf("kube-controller-manager spans by controller|result: %s: want deployment and replicaset successes", results)
	}
	if podPosts != nPods {
		t.Errorf("%d pod creations nested in replicaset spans; the API server created %d pods", podPosts, nPods)
	}
	if want := st.podsBeforeScaleDown - st.podsAtScaleDownDone; podDeletes != want {
		t.Errorf("%d pod deletions nested in replicaset spans; scaling 4 → 1 deletes %d", podDeletes, want)
	}
	if rsPosts != nRS {
		t.Errorf("%d ReplicaSet creations nested in deployment spans; the API server created %d", rsPosts, nRS)
	}
	t.Logf("kube-controller-manager: %d spans (%s), %d with a UID; %d pod POSTs and %d pod DELETEs in replicaset spans "+
		"(API server: %d pods created), %d ReplicaSet POSTs in deployment spans (API server: %d)",
		len(spans), results, withUID, podPosts, podDeletes, nPods, rsPosts, nRS)
}

// checkBuiltins: builtins' spans name the ReplicaSet, carry its UID, and hold its label update.
func checkBuiltins(t *testing.T, spans []exporter.JSONSpan, st *story) {
	t.Helper()
	rsAdded, _ := st.replicaSets.snapshot()
	results := counts{}
	withUID, labelUpdates := 0, 0
	for _, s := range spans {
		results[s.Result]++
		if s.Controller != builtinsController {
			t.Errorf("builtins span of controller %q", s.Controller)
		}
		uid, ok := rsAdded[s.Name]
		if !ok {
			t.Errorf("builtins span names %s/%s, not a ReplicaSet the API server had", s.Namespace, s.Name)
		}
		if s.UID != "" {
			withUID++
			if s.UID != uid {
				t.Errorf("builtins span of %s: uid %q, the API server's is %q", s.Name, s.UID, uid)
			}
		}
		if len(s.Calls) == 0 || s.Calls[0].Kind != "cache_get" || s.Calls[0].Resource != "replicasets" || s.Calls[0].Name != s.Name {
			t.Errorf("builtins span of %s: first call is not its cache Get of the ReplicaSet: %+v", s.Name, s.Calls)
		}
		for _, c := range s.Calls {
			if c.Kind == "api" && c.Verb == "PUT" && c.Resource == "replicasets" && c.Name == s.Name && c.Status == 200 {
				labelUpdates++
			}
		}
	}
	if withUID == 0 {
		t.Errorf("no builtins span carries the ReplicaSet's UID %s", st.rsUID)
	}
	if labelUpdates == 0 {
		t.Error("no successful PUT replicasets (the hello=world label) nested in a builtins span")
	}
	t.Logf("builtins: %d spans (%s), %d with the ReplicaSet's UID, %d successful label updates (PUT replicasets)", len(spans), results, withUID, labelUpdates)
}

// checkPrometheus: after a scrape later than the last reconcile, Prometheus's figures agree
// with the spans, and the agent lost nothing.
func checkPrometheus(t *testing.T, base string, spans []exporter.JSONSpan, settledAt time.Time, traced int) {
	t.Helper()
	testkit.WaitFor(t, "a Prometheus scrape after the last reconcile", 60*time.Second, func() (bool, string) {
		ts, err := promScalar(base, "min(timestamp(reconscope_reconcile_total))")
		if err != nil {
			return false, err.Error()
		}
		return ts > float64(settledAt.UnixNano())/1e9, fmt.Sprintf("last scrape at %.3f, settled at %.3f", ts, float64(settledAt.UnixNano())/1e9)
	})
	wantReconciles, wantAPI, wantNoop, wantDurations := counts{}, counts{}, counts{}, counts{}
	for _, s := range spans {
		wantReconciles[s.Controller+"|"+s.Result]++
		if s.Noop {
			wantNoop[s.Controller]++
		}
		if s.Result != "abandoned" {
			wantDurations[s.Controller]++
		}
		for _, c := range s.Calls {
			if c.Kind != "api" {
				continue
			}
			res, code := c.Resource, "unknown"
			if c.Subresource != "" {
				res += "/" + c.Subresource
			}
			if c.Status != 0 {
				code = strconv.Itoa(c.Status)
			}
			wantAPI[s.Controller+"|"+c.Verb+"|"+res+"|"+code]++
		}
	}
	for _, q := range []struct {
		query  string
		labels []string
		want   counts
	}{
		{"sum by (controller, result) (reconscope_reconcile_total)", []string{"controller", "result"}, wantReconciles},
		{"sum by (controller, verb, resource, code) (reconscope_api_requests_total)", []string{"controller", "verb", "resource", "code"}, wantAPI},
		{"sum by (controller) (reconscope_noop_reconciles_total)", []string{"controller"}, wantNoop},
		{"sum by (controller) (reconscope_reconcile_duration_seconds_count)", []string{"controller"}, wantDurations},
	} {
		got, err := promCounts(base, q.query, q.labels...)
		if err != nil {
			t.Error(err)
			continue
		}
		if d := diffCounts(got, q.want); len(d) > 0 {
			t.Errorf("Prometheus %s differs from the spans: %v", q.query, d)
		}
	}
	for _, q := range []struct {
		query string
		want  float64
	}{
		{"sum(reconscope_events_lost_total)", 0}, // both causes
		{"reconscope_processes_traced", float64(traced)},
		{"reconscope_reconciles_in_flight", 0},
		{"reconscope_spans_dropped_total", 0},
	} {
		v, err := promScalar(base, q.query)
		if err != nil {
			t.Error(err)
			continue
		}
		if v != q.want {
			t.Errorf("Prometheus: %s = %v, want %v", q.query, v, q.want)
		}
	}
	t.Logf("Prometheus (scraped after the last reconcile): reconscope_reconcile_total by controller|result = the spans' %s; "+
		"%d api_requests_total series, noop and duration counts agree; events_lost_total 0, processes_traced %d, in flight 0",
		wantReconciles, len(wantAPI), traced)
}
