//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/reconscope/reconscope/deploy/grafana"
	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/ociimage"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

const (
	agentImage    = "reconscope.test/reconscope-agent:e2e"
	fixtureImage  = "reconscope.test/scripted-controller:e2e"
	builtinsImage = "reconscope.test/controller-runtime-builtins:e2e"
	kcmImage      = "reconscope.test/kube-controller-manager:e2e"
	nodeName      = "e2e-node"
)

// TestDaemonSetOnNode runs the user's path on a real node (kubelet, containerd, runc): the
// agent installed with `kubectl apply -k` of a kustomization that takes deploy/ and overrides
// its image only, kube-controller-manager as a static pod, the scripted fixture as a Deployment;
// then the agent's pod is Running and Ready under the manifest's securityContext, every fixture
// reconcile is one span naming the fixture's real pod, deleting the agent's pod leaves no uprobe
// link and its replacement traces again, and `kubectl delete -k` leaves no link and no agent.
func TestDaemonSetOnNode(t *testing.T) {
	began := time.Now()
	ctx := context.Background()
	// Images: every one built here from local binaries, imported into the node's containerd.
	bins := beginNodeTest(t)
	stage := stageAgent(t)
	// The kubectl plugin, staged beside the agent as make release does (it is not in the image).
	pluginBin := buildStatic(t, "./cmd/kubectl-reconscope")
	stageFile(t, pluginBin, filepath.Join(stage, ociimage.AgentStage, "linux_"+runtime.GOARCH, "kubectl-reconscope"))
	builtinsBin := installBuiltins(t)
	images := []string{
		agentImageOf(t, stage),
		fixtureImageTar(t),
		testenv.BuildImage(t, testenv.ImageSpec{Ref: builtinsImage, Files: []string{builtinsBin() + "=/builtins:0555"},
			Entrypoint: []string{"/builtins"}, User: "65532"}),
		controllerManagerImage(t, bins),
	}

	// The release, as `make release` makes it from that image: its packaged chart runs the image
	// by digest.
	rel := buildRelease(t, images[0], filepath.Join(stage, ociimage.AgentStage))

	env := testenv.Start(t, testenv.Options{Node: true})
	node := testenv.StartNode(t, env, testenv.NodeOptions{
		Name:       nodeName,
		Images:     images,
		StaticPods: map[string][]byte{"kube-controller-manager.yaml": controllerManagerPod(env)},
	})
	// On failure, the agent's own log says why (its pods' logs, before the node goes).
	logAgentsOnFailure(t, node)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	kcm := waitPodReady(t, cs, "kube-system", "kube-controller-manager-"+nodeName, 120*time.Second)
	t.Logf("kube-controller-manager runs as a static pod: %s uid %s", kcm.Name, kcm.UID)

	// Spans go where the manifest says (OTEL_EXPORTER_OTLP_ENDPOINT, verbatim): to a real
	// OpenTelemetry Collector running deploy/otel-collector's configuration, which forwards them
	// to a real Jaeger; the test reads them back through Jaeger's API.
	jaeger := testenv.StartJaeger(t)
	startExampleCollector(t, jaeger)
	src := jaegerSpans{t: t, j: jaeger, from: began}
	// Metrics go where Prometheus finds them: the usual kubernetes-pods job keeps the pods by
	// their prometheus.io annotations (the manifest's, and the operators').
	prom := startPodDiscoveryPrometheus(t, cs, "exemplar-storage")
	// And a second one that ingests native histograms (the dashboard reads either).
	promNative := startPodDiscoveryPrometheus(t, cs, "native-histograms")

	// kubectl apply -k: deploy/ with the image overridden.
	overlay := writeOverlay(t, node.IP)
	kubectl(t, env, "apply", "-k", overlay)
	agentPod := waitDaemonSetPod(t, cs, "reconscope", "", 120*time.Second)
	checkSecurityContext(t, agentPod, agentImage)
	t.Logf("agent pod %s Running and Ready on %s", agentPod.Name, agentPod.Spec.NodeName)
	waitScraped(t, prom, agentPod)
	agentUse := startUsage(t, agentPod)
	checkProcessPrivileges(t, agentUse.pid, agentPod)

	// The fixture as a Deployment of its own namespace.
	truthDir := t.TempDir()
	fixturePod := startFixtureDeployment(t, cs, truthDir)
	truthPath := filepath.Join(truthDir, "truth.jsonl")

	// The fixture's image is new to the node: the agent attaches to it after its /proc scan (or
	// the exec notification) and the inspection of its binary, so reconciles of the first
	// moments may come before (only a restarted process of an attached executable is admitted
	// at exec), and until the kubelet has posted the container's status the agent knows the
	// pod but not the container's name (it looks again every 2 s). A warm-up object every few
	// seconds until a span names both.
	createUntil(t, cs, "the agent traces the fixture's pod", "warm-up", func(warmups int) (bool, string) {
		for _, s := range fixtureRoots(src, fixturePod) {
			if attrStr(s.Resource, "k8s.container.name") != "" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d warm-up objects, no span naming the pod and its container yet", warmups)
	})

	// Then scripted ConfigMaps (success, calls, errors, requeues; no panic): every reconcile of each must
	// be one span naming the fixture's pod.
	scripted := map[string]bool{}
	for _, s := range fixtureScripts[:6] {
		createScripted(t, cs, s.name, s.script)
		scripted[s.name] = true
	}
	// Once the scripted objects' reconciles are over by the ground truth's own times (none
	// added nor ended for settleWindow), every one of them is one span in Jaeger with its
	// reconcile ID, object, UID and result, and every span of them is one of them.
	isScripted := func(name string) bool { return scripted[name] }
	window := waitTruthSettled(t, truthPath, "the scripted objects' reconciles", isScripted)
	checkTruth(t, "scripted objects", window, truthPath, func() []recvSpan { return spansOfObjects(src, fixturePod, isScripted) }, 60*time.Second)
	checkPodIdentity(t, src, fixturePod, scripted)
	// Through Jaeger's API, as a user finds them: "calls" reconciled once with its calls under
	// it; "fail" three times (two errors, then success), each linked to the one before.
	truth, _ := groundtruth.ReadFile(truthPath)
	checkJaegerTrace(t, jaeger, src, fixturePod, "calls", truth)
	checkJaegerTrace(t, jaeger, src, fixturePod, "fail", truth)
	// And live, with kubectl only: the plugin's tail and top, through the API server.
	checkKubectlPlugin(t, env, pluginBin, fixturePod.Namespace+"/"+fixturePod.Name, scripted)
	waitScraped(t, prom, fixturePod)
	agentUse.report(t, "tracing kube-controller-manager and the fixture")
	// Causality between two controllers, in the trace backend: a Deployment created now (kube-
	// controller-manager is traced: the agent has traced the fixture it attached with it), of
	// no replicas, and the ReplicaSet its deployment controller creates.
	rs := createDeploymentReplicaSet(t, cs, "lifeline")
	checkLifelineInJaeger(t, jaeger, src, kcm.Name, rs)
	checkKubectlPluginKCM(t, env, pluginBin, "lifeline")

	// Restart the operator: the Deployment's next pod is a new process of an executable the
	// agent has attached, admitted in the kernel at exec. All of its first reconciles (the
	// initial sync of every ConfigMap of its namespace) are traced: its own
	// controller_runtime_reconcile_total and reconscope's count for it agree by result, both
	// as Prometheus scrapes them through pod discovery, and Jaeger holds one span each.
	fixturePod = restartPod(t, cs, fixturePod, "app=scripted")
	waitScraped(t, prom, fixturePod)
	checkRestarted(t, prom, src, fixturePod, fixtureController)
	checkPodIdentity(t, src, fixturePod, nil)

	// controller-runtime's own builtins example, an operator nobody here wrote, as a
	// Deployment: restarted the same way, its first reconciles (the ReplicaSets of the node's
	// Deployments) are all traced too.
	builtinsPod := startBuiltinsDeployment(t, cs)
	waitScraped(t, prom, builtinsPod)
	builtinsPod = restartPod(t, cs, builtinsPod, "app=builtins")
	waitScraped(t, prom, builtinsPod)
	checkRestarted(t, prom, src, builtinsPod, builtinsController)
	agentUse.report(t, "tracing kube-controller-manager, the fixture and builtins, through two operator restarts")
	// The dashboard on this data: every panel's query, with the variables set from their own
	// queries, shows data.
	vars := map[string]string{"cluster": "", "job": "kubernetes-pods", "namespace": ns, "workload": "scripted", "controller": fixtureController}
	checkDashboard(t, prom, began, vars, false)
	checkDashboard(t, promNative, began, vars, true)
	checkExemplars(t, prom, jaeger, fixturePod, began)

	// Delete the agent's pod while the fixture reconciles (a new scripted ConfigMap every
	// 300ms): the reconciles that ran while no agent was attached are not traced, by design;
	// every other one is. The old agent's links go with it, the DaemonSet's next pod traces
	// again, and the traced processes go on: same PIDs, no restart.
	traced := []*corev1.Pod{fixturePod, builtinsPod, kcm}
	pidsBefore, restartsBefore := podPIDs(traced...), podRestarts(t, cs, traced...)
	for _, p := range traced {
		if len(pidsBefore[p.Name]) == 0 {
			t.Fatalf("no process in the cgroups of pod %s", p.Name)
		}
	}
	linked := checkLinks(t, tracedExes)
	isFlow := func(name string) bool { return strings.HasPrefix(name, "flow-") }
	flowStart := time.Now()
	flow := startFlow(cs, "flow", 300*time.Millisecond)
	time.Sleep(5 * time.Second)
	var grace int64 = 30
	deleteAt := time.Now() // the old agent traced until at least here
	if err := cs.CoreV1().Pods(agentPod.Namespace).Delete(ctx, agentPod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitGonePod(t, cs, agentPod)
	goneAt := time.Now()
	checkNoLinks(t, tracedExes)
	newAgent := waitDaemonSetPod(t, cs, "reconscope", agentPod.Name, 120*time.Second)
	fixturePID := 0
	for _, pid := range pidsBefore[fixturePod.Name] {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "/scripted-controller") {
			fixturePID = pid
		}
	}
	if fixturePID == 0 {
		t.Fatalf("no scripted-controller among the processes %v of pod %s", pidsBefore[fixturePod.Name], fixturePod.Name)
	}
	// The new pod's attach: its "tracing" line for the fixture's process; the links on the
	// traced executables are back by then.
	attachAt := waitAgentTracing(t, node.PodLogsDir, newAgent, fixturePID)
	if now := time.Now(); now.Before(attachAt) {
		t.Errorf("the new agent's \"tracing\" line is dated %s, after the test saw it at %s", attachAt, now)
	}
	checkRelinked(t, tracedExes, linked, "before the agent's pod was deleted", "with the new pod")
	time.Sleep(8 * time.Second) // reconciles flow under the new pod too
	created := flow.end(t)
	flowRecs := waitTruthSettled(t, truthPath, "the flow's reconciles", isFlow)
	cut := time.Now().Add(-settleWindow)
	var required, lost []groundtruth.Record
	for _, r := range flowRecs {
		switch {
		case r.End.Before(deleteAt) || r.Start.After(attachAt) && r.End.Before(cut):
			required = append(required, r)
		case !r.Start.After(attachAt):
			lost = append(lost, r) // ran while no agent was attached (or during a stop or start)
		}
	}
	checkTruth(t, "the reconcile flow across the agent pod's deletion", required, truthPath, func() []recvSpan { return spansOfObjects(src, fixturePod, isFlow) }, 60*time.Second)
	spanned := map[string]bool{}
	for _, s := range spansOfObjects(src, fixturePod, isFlow) {
		spanned[attrStr(attrMap(s.Span.GetAttributes()), "reconscope.reconcile_id")] = true
	}
	untraced := 0
	for _, r := range lost {
		if !spanned[r.ReconcileID] {
			untraced++
		}
	}
	var after int
	for _, r := range flowRecs {
		if r.Start.After(goneAt) {
			after++
		}
	}
	t.Logf("reconcile flow: %d ConfigMaps created from %s, %d reconciles in the ground truth; pod %s deleted at %s, gone at %s, new pod %s tracing the fixture from %s (%s without an agent attached); %d reconciles required and traced, %d in the window between (%d of them untraced: what the deletion loses), %d after the old pod was gone",
		created, flowStart.Format("15:04:05.000"), len(flowRecs), agentPod.Name, deleteAt.Format("15:04:05.000"), goneAt.Format("15:04:05.000"),
		newAgent.Name, attachAt.Format("15:04:05.000"), attachAt.Sub(deleteAt).Round(time.Millisecond), len(required), len(lost), untraced, after)
	if len(required) == 0 || after == 0 {
		t.Errorf("reconcile flow: %d reconciles required, %d after the old agent was gone: the fixture did not go on reconciling", len(required), after)
	}
	if pids := podPIDs(traced...); !reflect.DeepEqual(pids, pidsBefore) {
		t.Errorf("traced processes before the agent's pod was deleted %v, after %v: want the same", pidsBefore, pids)
	}
	if r := podRestarts(t, cs, traced...); !reflect.DeepEqual(r, restartsBefore) {
		t.Errorf("restarts of the traced pods' containers before the agent's pod was deleted %v, after %v: want the same", restartsBefore, r)
	}
	t.Logf("traced pods' processes across the agent pod's deletion: %v; container restarts: %v", pidsBefore, restartsBefore)

	// Node faults while the fixture reconciles: kubelet restarted, then containerd restarted, as
	// a node's upgrade does. Neither is on the path of a span (the kernel's probes, the agent's
	// reader, its pod index from the API server), so nothing of the window is lost: every
	// reconcile is one span naming the fixture's pod, the agent runs on (no restart, same links),
	// and the traced processes are unharmed.
	checkNodeFaults(t, cs, node, src, truthPath, fixturePod, newAgent, traced)

	// The agent OOM-killed by a memory limit set too low: reported and restarted by the
	// kubelet, no link left, the traced processes unharmed; tracing again once the limit is
	// restored.
	newAgent = checkAgentOOM(t, env, cs, node, src, fixturePod, newAgent, traced)

	// kubectl delete -k: no agent left, no link left, namespaces it does not own stay.
	checkLinks(t, tracedExes)
	kubectl(t, env, "delete", "-k", overlay, "--wait=true", "--timeout=120s")
	waitGonePod(t, cs, newAgent)
	checkNoLinks(t, tracedExes)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Errorf("namespace %s (not the manifest's) after kubectl delete -k: %v", ns, err)
	}

	// Then once with Helm, as README says first: the chart with the image and the collector's
	// address set (the chart has no hostAliases; the test bed has no DNS), into a namespace of
	// its own. It traces the running fixture, and `helm uninstall` leaves no agent and no link.
	node.TagByDigest(t, agentImage, rel.byDigest)
	helmAgent := helmInstall(t, env, cs, node.IP, rel)
	before := len(fixtureRoots(src, fixturePod))
	createUntil(t, cs, "the agent installed with Helm traces the fixture", "after-helm", func(int) (bool, string) {
		n := len(fixtureRoots(src, fixturePod))
		return n > before, fmt.Sprintf("%d spans of the fixture, %d before helm install", n, before)
	})
	// The agent-health alerts of the chart's rules, in a real Prometheus: none while it traces,
	// ReconscopeAgentDown while it is stuck, ReconscopeAgentsAbsent while it is gone.
	helmAgent = checkAgentAlerts(t, env, cs, rel, helmAgent)
	checkLinks(t, tracedExes)
	helmRun(t, env, "uninstall", "reconscope", "--namespace", helmNamespace, "--wait", "--timeout", "120s")
	waitGonePod(t, cs, helmAgent)
	checkNoLinks(t, tracedExes)
	t.Logf("node end-to-end test took %s", time.Since(began).Round(time.Millisecond))
}

// checkNodeFaults restarts the node's kubelet, then its containerd, while the fixture reconciles
// a new ConfigMap every 300 ms, and checks that the agent traced every reconcile of that window
// (each one span with its reconcile ID, object, UID and result, naming the fixture's pod), that
// its uprobe links are those it had, and that neither the agent nor a traced process restarted.
func checkNodeFaults(t *testing.T, cs *kubernetes.Clientset, node *testenv.Node, src spanSource, truthPath string, fixturePod, agent *corev1.Pod, traced []*corev1.Pod) {
	t.Helper()
	all := append([]*corev1.Pod{agent}, traced...)
	pidsBefore, restartsBefore := podPIDs(all...), podRestarts(t, cs, all...)
	linked := checkLinks(t, tracedExes)
	isFault := func(name string) bool { return strings.HasPrefix(name, "fault-") }
	began := time.Now()
	flow := startFlow(cs, "fault", 300*time.Millisecond)
	time.Sleep(3 * time.Second)
	node.RestartKubelet(t)
	time.Sleep(3 * time.Second)
	node.RestartContainerd(t)
	time.Sleep(3 * time.Second)
	created := flow.end(t)
	recs := waitTruthSettled(t, truthPath, "the reconciles across kubelet's and containerd's restarts", isFault)
	checkTruth(t, "the reconcile flow across kubelet's and containerd's restarts", recs, truthPath,
		func() []recvSpan { return spansOfObjects(src, fixturePod, isFault) }, 60*time.Second)
	if len(recs) < created {
		t.Errorf("node faults: %d ConfigMaps created, %d reconciles in the ground truth: the fixture did not go on reconciling", created, len(recs))
	}
	if relinked := checkLinks(t, tracedExes); !reflect.DeepEqual(relinked, linked) {
		t.Errorf("uprobe sites per executable before the node's faults %v, after %v: want the same", linked, relinked)
	}
	if pids := podPIDs(all...); !reflect.DeepEqual(pids, pidsBefore) {
		t.Errorf("processes of the agent and the traced pods before the node's faults %v, after %v: want the same", pidsBefore, pids)
	}
	if r := podRestarts(t, cs, all...); !reflect.DeepEqual(r, restartsBefore) {
		t.Errorf("container restarts of the agent and the traced pods before the node's faults %v, after %v: want the same", restartsBefore, r)
	}
	t.Logf("node faults: kubelet then containerd restarted in %s while %d ConfigMaps were created: all %d reconciles traced, the agent (pid %v) and the traced processes unharmed, links unchanged",
		time.Since(began).Round(time.Millisecond), created, len(recs), pidsBefore[agent.Name])
}

// beginNodeTest starts a test of the agent on test bed nodes: eBPF required (or the test
// skipped), nothing of the test bed left behind at its end (or it fails). It returns the
// control plane folder, whose binaries the node images are built from.
func beginNodeTest(t *testing.T) string {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	bpftest.Require(t)
	t.Cleanup(func() { testenv.CheckNoLeftovers(t) })
	bins, err := testenv.ControlPlaneDir()
	if err != nil {
		t.Fatal(err)
	}
	return bins
}

// stageAgent stages the agent's binary for its image as `make image` does, and returns the
// staging folder.
func stageAgent(t *testing.T) string {
	t.Helper()
	stage := t.TempDir()
	stageFile(t, buildStatic(t, "./cmd/agent"), filepath.Join(stage, ociimage.AgentStage, "linux_"+runtime.GOARCH, "reconscope-agent"))
	stageFile(t, "/etc/ssl/certs/ca-certificates.crt", filepath.Join(stage, ociimage.AgentStage, "ca-certificates.crt"))
	return stage
}

// agentImageOf builds the agent's image from stage as `make image` does (mkimage --spec agent),
// for this machine's architecture only: the same files, modes, entrypoint, command and user.
func agentImageOf(t *testing.T, stage string) string {
	t.Helper()
	return testenv.BuildImage(t, testenv.ImageSpec{Ref: agentImage, Spec: "agent", Dir: stage, Platforms: []string{"linux/" + runtime.GOARCH}})
}

// fixtureImageTar builds the scripted fixture's image: its static binary, run as UID 65532.
func fixtureImageTar(t *testing.T) string {
	t.Helper()
	return testenv.BuildImage(t, testenv.ImageSpec{Ref: fixtureImage, Files: []string{buildStatic(t, "./test/fixtures/scripted-controller") + "=/scripted-controller:0555"},
		Entrypoint: []string{"/scripted-controller"}, User: "65532"})
}

// controllerManagerImage builds kube-controller-manager's image from the stripped build of the
// control plane folder bins, as released.
func controllerManagerImage(t *testing.T, bins string) string {
	t.Helper()
	return testenv.BuildImage(t, testenv.ImageSpec{Ref: kcmImage, Files: []string{filepath.Join(bins, "kube-controller-manager-stripped") + "=/kube-controller-manager:0555"},
		Entrypoint: []string{"/kube-controller-manager"}})
}

// buildStatic builds pkg as a static binary (no cgo), as an image needs.
func buildStatic(t *testing.T, pkg string) string {
	t.Helper()
	return testkit.BuildEnv(t, pkg, []string{"CGO_ENABLED=0"}, "-trimpath")
}

// stageFile copies src to dst, creating dst's folder.
func stageFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// controllerManagerPod is kube-controller-manager's static pod, as kubeadm writes it on a
// control-plane node: host network, the kubeconfig and CA from the host. Its controllers are
// what this node's workloads need: Deployments, ReplicaSets, DaemonSets, service accounts and
// their CA, garbage collection, namespace deletion.
func controllerManagerPod(env *testenv.Env) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: kube-controller-manager
  namespace: kube-system
  labels: {component: kube-controller-manager, tier: control-plane}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  containers:
    - name: kube-controller-manager
      image: %s
      imagePullPolicy: Never
      args:
        - --kubeconfig=/etc/kubernetes/kubeconfig
        - --authentication-kubeconfig=/etc/kubernetes/kubeconfig
        - --authorization-kubeconfig=/etc/kubernetes/kubeconfig
        - --authentication-skip-lookup=true
        - --root-ca-file=/etc/kubernetes/ca.crt
        - --bind-address=127.0.0.1
        - --secure-port=0
        - --leader-elect=false
        - --use-service-account-credentials=false
        - --controllers=deployment,replicaset,daemonset,serviceaccount,root-ca-cert-publisher,garbagecollector,namespace
      volumeMounts:
        - {name: kubeconfig, mountPath: /etc/kubernetes/kubeconfig, readOnly: true}
        - {name: ca, mountPath: /etc/kubernetes/ca.crt, readOnly: true}
  volumes:
    - name: kubeconfig
      hostPath: {path: %s, type: File}
    - name: ca
      hostPath: {path: %s, type: File}
`, kcmImage, env.Kubeconfig, env.CAFile))
}

// writeOverlay writes the kustomization a user writes to install the agent from this
// repository with their own image: deploy/ plus images:. The one addition: the node has no
// cluster DNS, so the manifest's collector name otel-collector.observability resolves through
// the pod's /etc/hosts (hostAliases) to the node, where the test's OTLP receiver listens. And
// the test looks at calls (call spans, lifelines): RECONSCOPE_DETAIL=calls, the variable a
// user sets for --detail.
func writeOverlay(t *testing.T, nodeIP string) string {
	t.Helper()
	dir := t.TempDir()
	deploy, err := filepath.Abs("../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, deploy)
	if err != nil {
		t.Fatal(err)
	}
	name, tag, _ := strings.Cut(agentImage, ":")
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: ghcr.io/reconscope/reconscope-agent
    newName: %s
    newTag: %s
patches:
  - target: {kind: DaemonSet, name: reconscope-agent}
    patch: |
      - op: add
        path: /spec/template/spec/hostAliases
        value: [{ip: %q, hostnames: [otel-collector.observability]}]
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: RECONSCOPE_DETAIL, value: calls}
`, rel, name, tag, nodeIP)
	if os.Getenv(pprofOutEnv) != "" {
		// The agent's own profiles on the pod's address, for report to save its heap's.
		k += `      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: RECONSCOPE_PPROF_ADDR, value: ":6060"}
`
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func kubectl(t *testing.T, env *testenv.Env, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(env.BinDir, "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("kubectl %s:\n%s", strings.Join(args, " "), strings.TrimSpace(string(out)))
}

func waitPodReady(t *testing.T, cs *kubernetes.Clientset, namespace, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testkit.WaitFor(t, "pod "+namespace+"/"+name+" Running and Ready", timeout, func() (bool, string) {
		p, err := cs.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return podReady(p), podState(p)
	})
	return pod
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf(" %s: waiting %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf(" %s: terminated %s %s (restarts %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.Message, c.RestartCount)
		default:
			s += fmt.Sprintf(" %s: ready=%v restarts=%d", c.Name, c.Ready, c.RestartCount)
		}
	}
	return s
}

// waitDaemonSetPod waits for a Running and Ready agent pod in namespace other than not.
func waitDaemonSetPod(t *testing.T, cs *kubernetes.Clientset, namespace, not string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	return waitReadyPod(t, cs, namespace, metav1.ListOptions{LabelSelector: agentSelector}, not, timeout)
}

// agentSelector selects the agent's pods (the manifest's and the chart's label).
const agentSelector = "app.kubernetes.io/name=reconscope-agent"

// waitReadyPod waits for a Running and Ready pod of namespace listed with sel (label and field
// selectors), other than the pod named not.
func waitReadyPod(t *testing.T, cs *kubernetes.Clientset, namespace string, sel metav1.ListOptions, not string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testkit.WaitFor(t, fmt.Sprintf("a pod %s %s Running and Ready in namespace %s", sel.LabelSelector, sel.FieldSelector, namespace), timeout, func() (bool, string) {
		pods, err := cs.CoreV1().Pods(namespace).List(context.Background(), sel)
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name == not {
				continue
			}
			if podReady(p) {
				pod = p
				return true, ""
			}
			states = append(states, p.Name+" "+podState(p))
		}
		return false, fmt.Sprint(states)
	})
	return pod
}

func waitGonePod(t *testing.T, cs *kubernetes.Clientset, p *corev1.Pod) {
	t.Helper()
	testkit.WaitFor(t, "pod "+p.Name+" gone", 90*time.Second, func() (bool, string) {
		_, err := cs.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// checkSecurityContext checks that the running agent pod has the manifest's privileges and no
// more: host PID namespace, not privileged, no privilege escalation, read-only root filesystem,
// ALL capabilities dropped and exactly the four added back; and that it runs image.
func checkSecurityContext(t *testing.T, p *corev1.Pod, image string) {
	t.Helper()
	if !p.Spec.HostPID {
		t.Error("agent pod without hostPID")
	}
	if p.Spec.HostNetwork {
		t.Error("agent pod on the host network: the manifest does not ask for it")
	}
	c := p.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil {
		t.Fatalf("agent container securityContext differs from the manifest's: %+v", sc)
	}
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	slices.Sort(add)
	if want := []string{"BPF", "DAC_READ_SEARCH", "PERFMON", "SYS_PTRACE"}; !slices.Equal(add, want) {
		t.Errorf("agent capabilities added %v, want %v", add, want)
	}
	if len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("agent capabilities dropped %v, want [ALL]", sc.Capabilities.Drop)
	}
	if c.Image != image {
		t.Errorf("agent image %q, want %q", c.Image, image)
	}
}

// capabilityBits are the bit numbers of the capabilities the manifest adds
// (include/uapi/linux/capability.h).
var capabilityBits = map[corev1.Capability]uint{"DAC_READ_SEARCH": 2, "SYS_PTRACE": 19, "PERFMON": 38, "BPF": 39}

// checkProcessPrivileges checks what the kernel says the agent's running process holds
// (/proc/PID/status), not what the pod spec asks for: exactly the capabilities the container
// adds in its effective, permitted and bounding sets, no new privileges, and a seccomp filter
// when the container asks for the runtime's default profile.
func checkProcessPrivileges(t *testing.T, pid int, pod *corev1.Pod) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			status[k] = strings.TrimSpace(v)
		}
	}
	c := pod.Spec.Containers[0]
	var want uint64
	for _, cap := range c.SecurityContext.Capabilities.Add {
		bit, ok := capabilityBits[cap]
		if !ok {
			t.Fatalf("the manifest adds %s, whose bit this test does not know", cap)
		}
		want |= 1 << bit
	}
	for _, set := range []string{"CapEff", "CapPrm", "CapBnd"} {
		got, err := strconv.ParseUint(status[set], 16, 64)
		if err != nil || got != want {
			t.Errorf("agent process %d: %s %s, want %016x (%v)", pid, set, status[set], want, c.SecurityContext.Capabilities.Add)
		}
	}
	if status["NoNewPrivs"] != "1" {
		t.Errorf("agent process %d: NoNewPrivs %q, want 1 (allowPrivilegeEscalation: false)", pid, status["NoNewPrivs"])
	}
	profile := c.SecurityContext.SeccompProfile
	if profile == nil && pod.Spec.SecurityContext != nil {
		profile = pod.Spec.SecurityContext.SeccompProfile
	}
	if profile != nil && profile.Type == corev1.SeccompProfileTypeRuntimeDefault && status["Seccomp"] != "2" {
		t.Errorf("agent process %d: Seccomp %q, want 2 (a filter: the runtime's default profile)", pid, status["Seccomp"])
	}
	t.Logf("agent process %d: CapEff %s, NoNewPrivs %s, Seccomp %s", pid, status["CapEff"], status["NoNewPrivs"], status["Seccomp"])
}

// startFixtureDeployment runs the scripted fixture as a one-replica Deployment in namespace
// ns (with cluster-admin for its service account), writing its ground truth to truthDir on the
// node, and returns its pod once Ready.
func startFixtureDeployment(t *testing.T, cs *kubernetes.Clientset, truthDir string) *corev1.Pod {
	t.Helper()
	createOperatorNamespace(t, cs)
	return runFixture(t, cs, "scripted", "", truthDir)
}

// createOperatorNamespace creates namespace ns, whose default service account is cluster-admin.
func createOperatorNamespace(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.BindClusterRole(t, cs, "e2e-scripted", "cluster-admin", ns, "default")
}

// runFixture runs the scripted fixture as the one-replica Deployment name in namespace ns,
// reconciling ns's ConfigMaps, its pods on node ("" : the scheduler's choice), writing its
// ground truth to truthDir/truth.jsonl on the node, and returns its pod once Ready.
func runFixture(t *testing.T, cs *kubernetes.Clientset, name, node, truthDir string) *corev1.Pod {
	t.Helper()
	// The fixture writes as UID 65532.
	if err := os.Chmod(truthDir, 0o777); err != nil {
		t.Fatal(err)
	}
	return runOperator(t, cs, name, node, "8080", corev1.Container{
		Image:        fixtureImage,
		Args:         []string{"--namespace=" + ns, "--ground-truth=/truth/truth.jsonl", "--metrics-bind-address=:8080", "--max-concurrent-reconciles=2"},
		VolumeMounts: []corev1.VolumeMount{{Name: "truth", MountPath: "/truth"}},
	}, corev1.Volume{Name: "truth", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: truthDir}}})
}

// runOperator runs an operator as a one-replica Deployment name in namespace ns (pods labelled
// app=<name>, whose default service account is cluster-admin) on node ("": the scheduler's
// choice): its container c named "manager", never pulled, with volume v; scraped by
// Prometheus's pod discovery at metricsPort, like the agent (its own
// controller_runtime_reconcile_total is the count to compare with). It returns the pod once
// Ready.
func runOperator(t *testing.T, cs *kubernetes.Clientset, name, node, metricsPort string, c corev1.Container, v corev1.Volume) *corev1.Pod {
	t.Helper()
	one := int32(1)
	labels := map[string]string{"app": name}
	c.Name, c.ImagePullPolicy = "manager", corev1.PullNever
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					"prometheus.io/scrape": "true", "prometheus.io/port": metricsPort, "prometheus.io/path": "/metrics"}},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{c}, Volumes: []corev1.Volume{v}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitReadyPod(t, cs, ns, metav1.ListOptions{LabelSelector: "app=" + name}, "", 120*time.Second)
}

func createScripted(t *testing.T, cs *kubernetes.Clientset, name, script string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{scriptAnnotation: script}}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createUntil waits up to 90 s for what: it creates a scripted ConfigMap that succeeds,
// prefix-1, prefix-2, …, every 3 s until done, given how many it created, says it holds.
func createUntil(t *testing.T, cs *kubernetes.Clientset, what, prefix string, done func(created int) (bool, string)) {
	t.Helper()
	created, last := 0, time.Time{}
	testkit.WaitFor(t, what, 90*time.Second, func() (bool, string) {
		if time.Since(last) > 3*time.Second {
			created++
			createScripted(t, cs, fmt.Sprintf("%s-%d", prefix, created), "success")
			last = time.Now()
		}
		return done(created)
	})
}

// fixtureRoots returns the reconcile spans (roots named "reconcile <controller>"; the other
// roots are object lifeline spans of writes) the receiver got from an operator's pod.
func fixtureRoots(src spanSource, pod *corev1.Pod) []recvSpan {
	all, _ := src.all()
	var out []recvSpan
	for _, s := range all {
		if len(s.Span.GetParentSpanId()) == 0 && strings.HasPrefix(s.Span.GetName(), "reconcile ") && attrStr(s.Resource, "k8s.pod.name") == pod.Name {
			out = append(out, s)
		}
	}
	return out
}

// checkPodIdentity checks that the fixture's spans of the given objects (nil: all) name its pod
// as the kubelet made it.
func checkPodIdentity(t *testing.T, src spanSource, pod *corev1.Pod, objects map[string]bool) {
	t.Helper()
	for _, s := range fixtureRoots(src, pod) {
		if objects != nil && !objects[attrStr(attrMap(s.Span.GetAttributes()), "k8s.object.name")] {
			continue
		}
		for k, want := range map[string]string{
			"k8s.namespace.name": pod.Namespace, "k8s.pod.name": pod.Name, "k8s.container.name": "manager",
			"k8s.pod.uid": string(pod.UID), "k8s.node.name": nodeName,
		} {
			if got := attrStr(s.Resource, k); got != want {
				t.Errorf("span %s: resource %s = %q, want %q", s.Span.GetName(), k, got, want)
			}
		}
	}
}

// tracedExes are the executables the agent traces on the node, as the kernel's uprobe links
// name them: the path in the container's root (the kernel's path of the file from its mount),
// the fixture, builtins and kube-controller-manager's static pod, each its image's one binary.
var tracedExes = []string{"/scripted-controller", "/builtins", "/kube-controller-manager"}

// linksOn counts the uprobe links, single and uprobe_multi alike, on each of exes (their sites:
// a uprobe_multi link counts its sites). A single uprobe keeps the path it was attached by, a
// process's /proc/PID/exe: that link is followed. Other tests' binaries of the same name (built
// under a host path) are not the node's.
func linksOn(exes []string) (map[string]int, []bpftest.ProbeLink, error) {
	links, err := bpftest.UprobeLinks()
	n := map[string]int{}
	var on []bpftest.ProbeLink
	for _, l := range links {
		file := l.File
		if strings.HasPrefix(file, "/proc/") && strings.HasSuffix(file, "/exe") {
			if target, err := os.Readlink(file); err == nil {
				file = target
			}
		}
		file = strings.TrimSuffix(file, " (deleted)")
		for _, exe := range exes {
			if file == exe {
				n[exe] += l.Count
				on = append(on, l)
			}
		}
	}
	return n, on, err
}

// checkLinks waits until every executable of exes has uprobe links on the node (the agent has
// attached them), so that checkNoLinks afterwards proves their removal, and returns the counts.
func checkLinks(t *testing.T, exes []string) map[string]int {
	t.Helper()
	var n map[string]int
	testkit.WaitFor(t, "uprobe links on every traced executable", 60*time.Second, func() (bool, string) {
		var err error
		n, _, err = linksOn(exes)
		if err != nil {
			return false, err.Error()
		}
		return len(n) == len(exes), fmt.Sprintf("sites linked per executable: %v, want all of %v", n, exes)
	})
	t.Logf("uprobe sites linked per traced executable: %v", n)
	return n
}

// checkRelinked waits for a new agent's links on exes to reach what the old one had (at least:
// links of the same name from other tests' agents on the machine count too), and fails t when
// they do not within a minute. The test waits for the new agent's "tracing" line for the
// fixture's process; the node's other executables (kube-controller-manager, builtins) are
// attached one after another, so one look right after that line can see a part of their links
// (CI saw 28 of builtins' 59 sites, and 96 of kube-controller-manager's 245).
func checkRelinked(t *testing.T, exes []string, before map[string]int, was, now string) {
	t.Helper()
	var n map[string]int
	testkit.WaitFor(t, "the new agent's uprobe links on every traced executable", 60*time.Second, func() (bool, string) {
		var err error
		if n, _, err = linksOn(exes); err != nil {
			return false, err.Error()
		}
		var short []string
		for exe, want := range before {
			if n[exe] < want {
				short = append(short, fmt.Sprintf("uprobe sites on %s: %d %s, %d %s", exe, want, was, n[exe], now))
			}
		}
		return len(short) == 0, strings.Join(short, "; ")
	})
	t.Logf("uprobe sites linked per traced executable: %v (%v %s)", n, before, was)
}

// checkNoLinks fails t when a uprobe link on the node, single or uprobe_multi, names one of
// exes.
func checkNoLinks(t *testing.T, exes []string) {
	t.Helper()
	testkit.WaitFor(t, "no uprobe link left on the traced executables", 30*time.Second, func() (bool, string) {
		_, left, err := linksOn(exes)
		if err != nil {
			return false, err.Error()
		}
		return len(left) == 0, fmt.Sprintf("%+v", left)
	})
}

// restartPod deletes an operator's pod, as `kubectl delete pod` does, and returns its
// Deployment's next pod (labels selector) once it is Ready.
func restartPod(t *testing.T, cs *kubernetes.Clientset, old *corev1.Pod, selector string) *corev1.Pod {
	t.Helper()
	var grace int64 = 30
	if err := cs.CoreV1().Pods(old.Namespace).Delete(context.Background(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	pod := waitReadyPod(t, cs, old.Namespace, metav1.ListOptions{LabelSelector: selector}, old.Name, 120*time.Second)
	t.Logf("pod %s deleted; its Deployment's next pod is %s", old.Name, pod.Name)
	return pod
}

// checkRestarted waits until a restarted operator's reconciles have settled (its own count
// unchanged for 3 s) and checks that every one was traced: its
// controller_runtime_reconcile_total and reconscope_reconcile_total for its pod, both as
// Prometheus scraped them through pod discovery, agree by result, and the trace backend holds
// one reconcile span of the pod for each.
func checkRestarted(t *testing.T, prom string, src spanSource, pod *corev1.Pod, controller string) {
	t.Helper()
	own := fmt.Sprintf(`sum by (result) (controller_runtime_reconcile_total{job="kubernetes-pods",namespace=%q,pod=%q,controller=%q})`, pod.Namespace, pod.Name, controller)
	ours := fmt.Sprintf(`sum by (result) (reconscope_reconcile_total{job="kubernetes-pods",k8s_namespace_name=%q,k8s_pod_name=%q,controller=%q})`, pod.Namespace, pod.Name, controller)
	var last counts
	var since time.Time
	testkit.WaitFor(t, "every reconcile of restarted "+pod.Name+" traced", 120*time.Second, func() (bool, string) {
		want, err := promCounts(prom, own, "result")
		if err != nil {
			return false, err.Error()
		}
		got, err := promCounts(prom, ours, "result")
		if err != nil {
			return false, err.Error()
		}
		if last == nil || len(diffCounts(want, last)) > 0 {
			last, since = want, time.Now()
		}
		total := 0
		for _, n := range want {
			total += n
		}
		spans := len(fixtureRoots(src, pod))
		d := diffCounts(got, want)
		settled := time.Since(since) >= 3*time.Second
		return total > 0 && settled && len(d) == 0 && spans == total,
			fmt.Sprintf("controller_runtime_reconcile_total %v (unchanged for %s); reconscope_reconcile_total differs by %v; %d spans in Jaeger",
				want, time.Since(since).Round(time.Second), d, spans)
	})
	t.Logf("restarted %s: all %v of its reconciles since its start traced (its own controller_runtime_reconcile_total, reconscope_reconcile_total and the spans in Jaeger agree)", pod.Name, last)
}

// usage follows the CPU time and memory of the agent's process in its pod.
type usage struct {
	pid   int
	podIP string
	cpu0  float64 // CPU seconds (user+system) at the start
	start time.Time

	reports int // heap profiles saved

	// The largest resident memory sampled since the start (every 20 ms), and its parts then:
	// VmHWM says how high it went, not of what.
	mu   sync.Mutex
	peak rssSample
}

// rssSample is one reading of a process's resident memory, in KiB.
type rssSample struct{ total, anon, file, shmem uint64 }

// memoryStatus reads the sizes in kB of /proc/PID/status (VmRSS, VmHWM, RssAnon, ...).
func memoryStatus(pid int) (map[string]uint64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, l := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(l, ":")
		num, kb := strings.CutSuffix(strings.TrimSpace(v), " kB")
		if !ok || !kb {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(num), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// sample follows the process's resident memory until it exits or the test ends.
func (u *usage) sample(t *testing.T) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			st, err := memoryStatus(u.pid)
			if err != nil {
				return
			}
			s := rssSample{total: st["VmRSS"], anon: st["RssAnon"], file: st["RssFile"], shmem: st["RssShmem"]}
			u.mu.Lock()
			if s.total > u.peak.total {
				u.peak = s
			}
			u.mu.Unlock()
		}
	}()
}

// startUsage finds the agent's process (the one in the pod's cgroup) and notes its CPU time.
func startUsage(t *testing.T, pod *corev1.Pod) *usage {
	t.Helper()
	uid := string(pod.UID)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cg, err := os.ReadFile(filepath.Join(d, "cgroup"))
		if err != nil || !strings.Contains(string(cg), uid) && !strings.Contains(string(cg), strings.ReplaceAll(uid, "-", "_")) {
			continue
		}
		exe, _ := os.Readlink(filepath.Join(d, "exe"))
		if filepath.Base(exe) != "reconscope-agent" {
			continue
		}
		var pid int
		fmt.Sscan(filepath.Base(d), &pid)
		u := &usage{pid: pid, podIP: pod.Status.PodIP, start: time.Now()}
		u.cpu0, _ = u.cpu()
		u.sample(t)
		return u
	}
	t.Fatalf("no reconscope-agent process in the cgroup of pod %s", pod.Name)
	return nil
}

// cpu is the process's user+system CPU time in seconds (/proc/PID/stat, clock ticks of 1/100 s).
func (u *usage) cpu() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", u.pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ut, st float64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return (ut + st) / 100, nil
}

// report logs the agent's CPU use since startUsage and its resident memory now and at peak.
func (u *usage) report(t *testing.T, while string) {
	t.Helper()
	cpu, err := u.cpu()
	if err != nil {
		t.Errorf("agent's CPU time: %v", err)
		return
	}
	status, _ := memoryStatus(u.pid)
	field := func(k string) string {
		if kb, ok := status[k]; ok {
			return fmt.Sprintf("%d kB", kb)
		}
		return "?"
	}
	wall := time.Since(u.start)
	u.mu.Lock()
	p := u.peak
	u.mu.Unlock()
	t.Logf("agent pod's process (pid %d) while %s: %.2f s of CPU in %s (%.1f%% of one core), RSS %s (peak %s; anonymous %s, file %s, shared %s); the highest sampled since it was found: %d kB (anonymous %d, file %d, shared %d)",
		u.pid, while, cpu-u.cpu0, wall.Round(time.Second), 100*(cpu-u.cpu0)/wall.Seconds(), field("VmRSS"), field("VmHWM"),
		field("RssAnon"), field("RssFile"), field("RssShmem"), p.total, p.anon, p.file, p.shmem)
	if dir := os.Getenv(pprofOutEnv); dir != "" {
		u.saveHeapProfile(t, dir)
	}
}

// pprofOutEnv names a directory: when set, the node tests' agents serve their profiles
// (--pprof-addr, on the pod's address) and each usage report saves the agent's heap profile
// there, to see which of its parts hold its memory on a node.
const pprofOutEnv = "RECONSCOPE_E2E_PPROF_OUT"

// saveHeapProfile saves the agent's heap profile (after a GC) in dir.
func (u *usage) saveHeapProfile(t *testing.T, dir string) {
	t.Helper()
	u.reports++
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/heap?gc=1", net.JoinHostPort(u.podIP, "6060")))
	if err != nil {
		t.Logf("agent's heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Logf("agent's heap profile: %s, %v", resp.Status, err)
		return
	}
	file := filepath.Join(dir, fmt.Sprintf("%s-agent-%d-heap-%d.pb.gz", t.Name(), u.pid, u.reports))
	err = os.MkdirAll(filepath.Dir(file), 0o755)
	if err == nil {
		err = os.WriteFile(file, raw, 0o644)
	}
	t.Logf("agent's heap profile: %s (%v)", file, err)
}

// startBuiltinsDeployment runs controller-runtime's builtins example as a one-replica
// Deployment in namespace ns (whose default service account is cluster-admin), scraped by
// Prometheus's pod discovery, and returns its pod once Ready. Its webhook server needs a
// serving certificate in $TMPDIR/k8s-webhook-server/serving-certs: a hostPath volume.
func startBuiltinsDeployment(t *testing.T, cs *kubernetes.Clientset) *corev1.Pod {
	t.Helper()
	tmp := t.TempDir()
	writeServingCert(t, filepath.Join(tmp, "k8s-webhook-server", "serving-certs"))
	if err := filepath.Walk(tmp, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, 0o755) // read by UID 65532
	}); err != nil {
		t.Fatal(err)
	}
	return runOperator(t, cs, "builtins", "", builtinsPorts[0], corev1.Container{
		Image:        builtinsImage,
		Env:          []corev1.EnvVar{{Name: "TMPDIR", Value: "/webhook"}},
		VolumeMounts: []corev1.VolumeMount{{Name: "webhook", MountPath: "/webhook", ReadOnly: true}},
	}, corev1.Volume{Name: "webhook", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: tmp}}})
}

// helmNamespace is where the e2e installs the chart: not the kustomization's namespace, which
// may still be terminating.
const helmNamespace = "reconscope-helm"

// helmRun runs Helm (built and cached by test/tools/build-helm.sh) against the test bed.
func helmRun(t *testing.T, env *testenv.Env, args ...string) {
	t.Helper()
	helm := testenv.ToolDir(t, "build-helm.sh")
	out, err := exec.Command(helm, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("helm %s:\n%s", strings.Join(args, " "), strings.TrimSpace(string(out)))
}

// release is what buildRelease made: the packaged chart and the image's reference by digest.
type release struct {
	chart, byDigest string
}

// buildRelease runs the release tool (`make release`'s) on the agent's image tarball and its
// staged binaries, and returns the packaged chart and the image's reference by digest.
func buildRelease(t *testing.T, imageTar, binaries string) release {
	t.Helper()
	version, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "release")
	cmd := exec.Command("go", "run", "./internal/cmd/release", "--version", strings.TrimSpace(string(version)),
		"--image-tar", imageTar, "--binaries", binaries, "--helm", testkit.Helm(t), "--out", out)
	cmd.Dir = "../.."
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("release: %v\n%s", err, b)
	}
	t.Logf("release: %s", b)
	charts, _ := filepath.Glob(filepath.Join(out, "reconscope-*.tgz"))
	digests, _ := filepath.Glob(filepath.Join(out, "reconscope-agent-image-*.digest"))
	if len(charts) != 1 || len(digests) != 1 {
		t.Fatalf("release: charts %v, digests %v", charts, digests)
	}
	ref, err := os.ReadFile(digests[0])
	if err != nil {
		t.Fatal(err)
	}
	return release{chart: charts[0], byDigest: strings.TrimSpace(string(ref))}
}

// helmInstall installs the release's packaged chart as README says, with nothing of its image
// overridden (the image by digest) and the collector at the node's address, and returns the
// agent's pod once Running and Ready.
func helmInstall(t *testing.T, env *testenv.Env, cs *kubernetes.Clientset, nodeIP string, rel release) *corev1.Pod {
	t.Helper()
	// A newcomer's typo first: the chart's schema refuses it, naming the key, and installs nothing.
	helm := testenv.ToolDir(t, "build-helm.sh")
	typo := []string{"--kubeconfig", env.Kubeconfig, "install", "reconscope", rel.chart, "--namespace", helmNamespace,
		"--create-namespace", "--set", "otlp.endpont=http://" + nodeIP + ":4317"}
	out, err := exec.Command(helm, typo...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "endpont") {
		t.Errorf("helm install with a typo in a value (otlp.endpont): %v, want a failure naming the key:\n%s", err, out)
	} else {
		t.Logf("helm install --set otlp.endpont=… (a typo) fails: %s", strings.TrimSpace(string(out)))
	}
	if l, err := cs.AppsV1().DaemonSets(helmNamespace).List(context.Background(), metav1.ListOptions{}); err == nil && len(l.Items) > 0 {
		t.Errorf("the refused install left DaemonSet %s", l.Items[0].Name)
	}
	helmRun(t, env, "install", "reconscope", rel.chart, "--namespace", helmNamespace, "--create-namespace",
		"--set", "otlp.endpoint=http://"+nodeIP+":4317")
	pod := waitDaemonSetPod(t, cs, helmNamespace, "", 120*time.Second)
	checkSecurityContext(t, pod, rel.byDigest) // the release's image by digest
	return pod
}

// checkDashboard runs every query of deploy/grafana's dashboard through Prometheus's HTTP API
// as Grafana would over the test's time range: each variable's own query must offer the value
// given in want ("" is All: the variable's all value, .*), and every panel query, with the
// variables set to those values, must return at least one number (not NaN) in that range.
// native says Prometheus ingests native histograms: a quantile's native half alone must then
// show data.
func checkDashboard(t *testing.T, prom string, since time.Time, want map[string]string, native bool) {
	t.Helper()
	d, err := grafana.Read()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		value, ok := want[v.Name]
		if !ok {
			t.Errorf("dashboard variable %s: the test has no value for it", v.Name)
			continue
		}
		if value == "" {
			set[v.Name] = ".*"
			continue
		}
		values, err := labelValues(prom, expandVars(q.Query, set), since)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
		if !slices.Contains(values, value) {
			t.Errorf("dashboard variable %s (%s) offers %v, not %q", v.Name, q.Query, values, value)
		}
		set[v.Name] = value
	}
	n := 0
	for _, p := range d.AllPanels() {
		for _, tg := range p.Targets {
			q := expandVars(tg.Expr, set)
			// The dashboard reads a histogram native first, then " or " the classic series.
			if nativeHalf, _, isOr := strings.Cut(q, " or "); native && isOr {
				q = nativeHalf
			}
			ok, err := promRangeHasNumber(prom, q, since, time.Now())
			switch {
			case err != nil:
				t.Errorf("dashboard panel %q: %v", p.Title, err)
			case !ok:
				t.Errorf("dashboard panel %q shows nothing: %s", p.Title, q)
			}
			n++
		}
	}
	t.Logf("dashboard (native histograms: %v): %d variables offer the test's values; %d panel queries all show data", native, len(set), n)
}

// expandVars replaces Grafana's variables in a query: $__rate_interval by 1m, $name by the
// value set (a regex of one value, as Grafana writes one selected value).
func expandVars(q string, set map[string]string) string {
	q = strings.ReplaceAll(q, "$__rate_interval", "1m")
	for k, v := range set {
		if v != ".*" {
			v = regexp.QuoteMeta(v)
		}
		q = strings.ReplaceAll(q, "${"+k+"}", v)
		q = strings.ReplaceAll(q, "$"+k, v)
	}
	return q
}

// labelValues answers a Grafana label_values(selector, label) query through Prometheus's
// series API.
func labelValues(prom, q string, since time.Time) ([]string, error) {
	inner, ok := strings.CutPrefix(q, "label_values(")
	inner, ok2 := strings.CutSuffix(inner, ")")
	if !ok || !ok2 {
		return nil, fmt.Errorf("not a label_values query: %s", q)
	}
	i := strings.LastIndex(inner, ",")
	selector, label := strings.TrimSpace(inner[:i]), strings.TrimSpace(inner[i+1:])
	u := fmt.Sprintf("%s/api/v1/series?%s", prom, url.Values{"match[]": {selector}, "start": {fmt.Sprint(since.Unix())}, "end": {fmt.Sprint(time.Now().Unix())}}.Encode())
	body, err := httpGet(u)
	if err != nil {
		return nil, err
	}
	var r struct {
		Data []map[string]string `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range r.Data {
		if v := s[label]; v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// promRangeHasNumber runs q as a range query over [from, to] (step 5 s) and reports whether
// any sample is a number.
func promRangeHasNumber(prom, q string, from, to time.Time) (bool, error) {
	u := fmt.Sprintf("%s/api/v1/query_range?%s", prom, url.Values{"query": {q}, "start": {fmt.Sprint(from.Unix())}, "end": {fmt.Sprint(to.Unix())}, "step": {"5"}}.Encode())
	body, err := httpGet(u)
	if err != nil {
		return false, fmt.Errorf("%s: %v", q, err)
	}
	var r struct {
		Data struct {
			Result []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return false, err
	}
	for _, s := range r.Data.Result {
		for _, v := range s.Values {
			if str, ok := v[1].(string); ok && str != "NaN" {
				return true, nil
			}
		}
	}
	return false, nil
}

// createDeploymentReplicaSet creates a Deployment of no replicas in namespace ns and returns
// the ReplicaSet kube-controller-manager's deployment controller makes for it.
func createDeploymentReplicaSet(t *testing.T, cs *kubernetes.Clientset, name string) *appsv1.ReplicaSet {
	t.Helper()
	zero := int32(0)
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: fixtureImage, ImagePullPolicy: corev1.PullNever}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rs *appsv1.ReplicaSet
	testkit.WaitFor(t, "the ReplicaSet of Deployment "+name, 60*time.Second, func() (bool, string) {
		l, err := cs.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil || len(l.Items) == 0 {
			return false, fmt.Sprint("none yet ", err)
		}
		rs = &l.Items[0]
		return true, ""
	})
	return rs
}

// checkAgentAlerts loads the alert rules of the installed chart (its PrometheusRule, rendered
// with the same release, and a short for on the two agent-health alerts, a chart value) into a
// Prometheus that scrapes the node's pods, and checks the alerts a platform team relies on:
// none fires while the agent traces; ReconscopeAgentDown fires while the agent's process is
// stopped (an agent stuck: its pod runs, its metrics do not answer) and clears when it runs
// again; ReconscopeAgentsAbsent fires once the DaemonSet's pod is deleted and none replaces it
// (scheduled nowhere) and clears when its pod is back. It returns the agent's pod then.
func checkAgentAlerts(t *testing.T, env *testenv.Env, cs *kubernetes.Clientset, rel release, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	helm := testenv.ToolDir(t, "build-helm.sh")
	out, err := exec.Command(helm, "template", "reconscope", rel.chart, "--namespace", helmNamespace, "--show-only", "templates/prometheusrule.yaml",
		"--set", "prometheusRule.enabled=true", "--set", "prometheusRule.for.ReconscopeAgentDown=3s",
		"--set", "prometheusRule.for.ReconscopeAgentsAbsent=3s").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template of the chart's PrometheusRule: %v\n%s", err, out)
	}
	var rule struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &rule); err != nil || len(rule.Spec.Groups) == 0 {
		t.Fatalf("the chart's PrometheusRule: %v, %d groups\n%s", err, len(rule.Spec.Groups), out)
	}
	groups, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, groups, 0o644); err != nil {
		t.Fatal(err)
	}
	prom := startRulesPrometheus(t, cs, rules)
	waitScraped(t, prom, pod)
	health := `ALERTS{alertname=~"ReconscopeAgentDown|ReconscopeAgentsAbsent|ReconscopeAgentNotTracing"}`
	// The rules evaluated a few times with the agent up: no agent-health alert, pending or firing.
	time.Sleep(5 * time.Second)
	if s, err := promQuery(prom, health); err != nil || len(s) > 0 {
		t.Errorf("agent-health alerts while the agent traces: %v %v, want none", s, err)
	}
	alert := func(what, q string, firing bool) {
		t.Helper()
		testkit.WaitFor(t, what, 90*time.Second, func() (bool, string) {
			s, err := promQuery(prom, q)
			if err != nil {
				return false, err.Error()
			}
			return (len(s) > 0) == firing, fmt.Sprintf("%s: %v", q, s)
		})
		t.Logf("alerts: %s", what)
	}

	// An agent stuck: its process stopped, its pod Running. Shorter than the liveness probe's
	// failures (3 × 20 s) allow, so the kubelet does not restart it.
	pid := startUsage(t, pod).pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	down := fmt.Sprintf(`ALERTS{alertname="ReconscopeAgentDown",alertstate="firing",pod=%q}`, pod.Name)
	alert("ReconscopeAgentDown fires for "+pod.Name+", its process stopped", down, true)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	alert("ReconscopeAgentDown clears, the agent running again", `ALERTS{alertname="ReconscopeAgentDown"}`, false)

	// No agent at all: the DaemonSet scheduled nowhere, its pod deleted.
	ds, err := cs.AppsV1().DaemonSets(helmNamespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(ds.Items) != 1 {
		t.Fatalf("the chart's DaemonSet: %v (%d)", err, len(ds.Items))
	}
	name := ds.Items[0].Name
	kubectl(t, env, "-n", helmNamespace, "patch", "daemonset", name, "--type", "merge", "-p", `{"spec":{"template":{"spec":{"nodeSelector":{"reconscope.test/nowhere":"true"}}}}}`)
	waitGonePod(t, cs, pod)
	alert("ReconscopeAgentsAbsent fires, no agent scheduled", `ALERTS{alertname="ReconscopeAgentsAbsent",alertstate="firing"}`, true)
	kubectl(t, env, "-n", helmNamespace, "patch", "daemonset", name, "--type", "json", "-p", `[{"op":"remove","path":"/spec/template/spec/nodeSelector/reconscope.test~1nowhere"}]`)
	back := waitDaemonSetPod(t, cs, helmNamespace, pod.Name, 120*time.Second)
	waitScraped(t, prom, back)
	alert("ReconscopeAgentsAbsent clears, the agent's pod back", `ALERTS{alertname="ReconscopeAgentsAbsent"}`, false)
	if s, err := promQuery(prom, `ALERTS{alertname="ReconscopeAgentNotTracing"}`); err != nil || len(s) > 0 {
		t.Errorf("ReconscopeAgentNotTracing: %v %v, want none (the agent traced throughout)", s, err)
	}
	return back
}

// checkAgentOOM gives the agent's DaemonSet a memory limit far below what the agent needs
// (24Mi: it runs at 55-60 MiB on this node), as a user who sets limits.memory too low does:
// the kernel OOM-kills the agent, the kubelet reports it (last state OOMKilled) and restarts
// it, to be killed again. Meanwhile no uprobe link is left once a killed agent is gone, and the
// traced processes are unharmed (same PIDs, no restart). With the limit restored, the
// DaemonSet's next pod traces the fixture again. It returns that pod.
func checkAgentOOM(t *testing.T, env *testenv.Env, cs *kubernetes.Clientset, node *testenv.Node, src spanSource, fixturePod, agent *corev1.Pod, traced []*corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	ds, err := cs.AppsV1().DaemonSets(agent.Namespace).Get(ctx, "reconscope-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restore, err := json.Marshal(ds.Spec.Template.Spec.Containers[0].Resources)
	if err != nil {
		t.Fatal(err)
	}
	pidsBefore, restartsBefore := podPIDs(traced...), podRestarts(t, cs, traced...)
	linked := checkLinks(t, tracedExes)
	setResources := func(v string) {
		kubectl(t, env, "-n", agent.Namespace, "patch", "daemonset", ds.Name, "--type", "json",
			"-p", `[{"op":"replace","path":"/spec/template/spec/containers/0/resources","value":`+v+`}]`)
	}
	setResources(`{"requests":{"memory":"24Mi"},"limits":{"memory":"24Mi"}}`)
	restored := false
	defer func() {
		if !restored {
			setResources(string(restore))
		}
	}()

	// The DaemonSet's new pod: killed, reported OOMKilled, restarted by the kubelet, then in
	// CrashLoopBackOff's wait (its process gone) at some point.
	var oomPod *corev1.Pod
	testkit.WaitFor(t, "the agent's pod under a 24Mi limit OOM-killed, restarted and waiting to start again", 240*time.Second, func() (bool, string) {
		pods, err := cs.CoreV1().Pods(agent.Namespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name == agent.Name || len(p.Status.ContainerStatuses) == 0 {
				states = append(states, p.Name+" "+podState(p))
				continue
			}
			c := p.Status.ContainerStatuses[0]
			last := c.LastTerminationState.Terminated
			states = append(states, fmt.Sprintf("%s restarts %d, last %+v, now %+v", p.Name, c.RestartCount, last, c.State))
			if last != nil && last.Reason == "OOMKilled" && c.RestartCount >= 1 && c.State.Waiting != nil {
				oomPod = p
				return true, ""
			}
		}
		return false, strings.Join(states, "; ")
	})
	c := oomPod.Status.ContainerStatuses[0]
	t.Logf("agent pod %s under a 24Mi limit: %d restarts, last state %s (exit code %d), now waiting (%s)",
		oomPod.Name, c.RestartCount, c.LastTerminationState.Terminated.Reason, c.LastTerminationState.Terminated.ExitCode, c.State.Waiting.Reason)
	checkNoLinks(t, tracedExes)
	if pids := podPIDs(traced...); !reflect.DeepEqual(pids, pidsBefore) {
		t.Errorf("traced processes before the agent's OOM kills %v, after %v: want the same", pidsBefore, pids)
	}
	if r := podRestarts(t, cs, traced...); !reflect.DeepEqual(r, restartsBefore) {
		t.Errorf("restarts of the traced pods' containers before the agent's OOM kills %v, after %v: want the same", restartsBefore, r)
	}

	// The limit restored: the DaemonSet rolls its pod, and the new one traces again.
	setResources(string(restore))
	restored = true
	back := waitDaemonSetPod(t, cs, agent.Namespace, oomPod.Name, 180*time.Second)
	fixturePID := 0
	for _, pid := range pidsBefore[fixturePod.Name] {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "/scripted-controller") {
			fixturePID = pid
		}
	}
	waitAgentTracing(t, node.PodLogsDir, back, fixturePID)
	checkRelinked(t, tracedExes, linked, "before the agent's OOM kills", "with the limit restored")
	before := len(fixtureRoots(src, fixturePod))
	createUntil(t, cs, "the agent's pod with its limit restored traces the fixture's reconciles", "after-oom", func(int) (bool, string) {
		n := len(fixtureRoots(src, fixturePod))
		return n > before, fmt.Sprintf("%d spans of the fixture, %d before", n, before)
	})
	return back
}
