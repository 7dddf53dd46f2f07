//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// nodeFixture is the scripted fixture's pod on one node of the two, and its ground truth.
type nodeFixture struct {
	node  *testenv.Node
	pod   *corev1.Pod
	truth string // its ground truth file
}

// TestDaemonSetTwoNodes runs the DaemonSet on two kubelet nodes of one kernel and one PID
// namespace, as a kind cluster's nodes share a kernel: each node has its own containerd, kubelet
// folders, cgroup root and pod network, and runs the scripted fixture (the same image, one
// Deployment pinned to each node, reconciling the same ConfigMaps); kube-controller-manager runs
// on node A only. Each agent sees every process of the machine in /proc and must trace only its
// own node's pods: every reconcile of each fixture (its ground truth) is exactly one span, which
// names the fixture's node and pod; no agent logs "tracing" for a process of the other node's
// pods. Then node A's agent pod is deleted: node B's agent keeps every uprobe link it held
// (same link IDs) and goes on tracing B's fixture exactly.
func TestDaemonSetTwoNodes(t *testing.T) {
	began := time.Now()
	ctx := context.Background()
	bins := beginNodeTest(t)
	agentTar, fixtureTar := agentImageOf(t, stageAgent(t)), fixtureImageTar(t)
	env := testenv.Start(t, testenv.Options{Node: true})
	nodeA := testenv.StartNode(t, env, testenv.NodeOptions{
		Name:       "e2e-node-a",
		Images:     []string{agentTar, fixtureTar, controllerManagerImage(t, bins)},
		StaticPods: map[string][]byte{"kube-controller-manager.yaml": controllerManagerPod(env)},
	})
	nodeB := testenv.StartNode(t, env, testenv.NodeOptions{Name: "e2e-node-b", Images: []string{agentTar, fixtureTar}})
	nodes := []*testenv.Node{nodeA, nodeB}
	for _, n := range nodes {
		logAgentsOnFailure(t, n)
	}
	t.Logf("two nodes on one kernel: %s (pods on %s) and %s (pods on %s)", nodeA.Name, nodeA.PodCIDR, nodeB.Name, nodeB.PodCIDR)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	kcm := waitPodReady(t, cs, "kube-system", "kube-controller-manager-"+nodeA.Name, 120*time.Second)

	jaeger := testenv.StartJaeger(t)
	startExampleCollector(t, jaeger)
	src := jaegerSpans{t: t, j: jaeger, from: began}
	// One kustomization for both nodes: the collector's name resolves to node A's address,
	// which pods of either node reach through their own gateway.
	kubectl(t, env, "apply", "-k", writeOverlay(t, nodeA.IP))
	agents := map[string]*corev1.Pod{}
	for _, n := range nodes {
		agents[n.Name] = waitNodeAgent(t, cs, n.Name, "")
	}

	createOperatorNamespace(t, cs)
	var fixtures []nodeFixture
	for _, n := range nodes {
		dir := t.TempDir()
		pod := runFixture(t, cs, "scripted-"+strings.TrimPrefix(n.Name, "e2e-node-"), n.Name, dir)
		if pod.Spec.NodeName != n.Name {
			t.Fatalf("fixture pod %s runs on %s, want %s", pod.Name, pod.Spec.NodeName, n.Name)
		}
		fixtures = append(fixtures, nodeFixture{node: n, pod: pod, truth: filepath.Join(dir, "truth.jsonl")})
	}
	// The Deployments and the DaemonSet go before the nodes do: node B's drain would otherwise
	// race kube-controller-manager on node A, which makes their pods again.
	t.Cleanup(func() { deleteWorkloads(t, cs) })
	// Both agents attach after their /proc scan and the inspection of the fixture's binary:
	// warm-up objects until a span names each fixture's pod and container.
	createUntil(t, cs, "each node's agent traces its node's fixture", "warm-up", func(int) (bool, string) {
		var waiting []string
		for _, f := range fixtures {
			if !slices.ContainsFunc(fixtureRoots(src, f.pod), func(s recvSpan) bool { return attrStr(s.Resource, "k8s.container.name") != "" }) {
				waiting = append(waiting, f.pod.Name)
			}
		}
		return len(waiting) == 0, fmt.Sprintf("no span naming the pod and container of %v yet", waiting)
	})

	// Both fixtures reconcile every ConfigMap of a flow: each reconcile of each is one span,
	// from its own node's agent.
	isBoth := func(name string) bool { return strings.HasPrefix(name, "both-") }
	flow := startFlow(cs, "both", 300*time.Millisecond)
	time.Sleep(6 * time.Second)
	created := flow.end(t)
	for _, f := range fixtures {
		recs := waitTruthSettled(t, f.truth, f.node.Name+"'s fixture: the flow's reconciles", isBoth)
		checkTruth(t, f.node.Name+"'s fixture, both agents running", recs, f.truth, func() []recvSpan { return spansOfObjects(src, f.pod, isBoth) }, 60*time.Second)
	}
	checkSpanNodes(t, src, fixtures)
	checkOwnNodeOnly(t, nodes, agents, append(fixtures, nodeFixture{node: nodeA, pod: kcm}))
	t.Logf("%d ConfigMaps created while both agents ran", created)

	// Delete node A's agent: node B's agent keeps every link it holds, and traces on.
	agentB := startUsage(t, agents[nodeB.Name])
	held := heldLinks(t, agentB.pid)
	if !slices.ContainsFunc(held, func(l bpftest.ProbeLink) bool {
		return strings.HasSuffix(l.File, "/scripted-controller") && l.Count > 0
	}) {
		t.Fatalf("node B's agent (pid %d) holds no uprobe link on the fixture's executable: %+v", agentB.pid, held)
	}
	var grace int64 = 30
	oldA := agents[nodeA.Name]
	if err := cs.CoreV1().Pods(oldA.Namespace).Delete(ctx, oldA.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitGonePod(t, cs, oldA)
	goneAt := time.Now()
	// Every link it held is still its own, with as many sites. (It may hold more: the
	// machine's other Go programs outside pods come and go, and every agent traces those.)
	after := heldLinks(t, agentB.pid)
	var lost []bpftest.ProbeLink
	for _, l := range held {
		if !slices.Contains(after, l) {
			lost = append(lost, l)
		}
	}
	if len(lost) > 0 {
		t.Errorf("node B's agent held %d links (%d sites) before node A's agent pod was deleted, %d (%d sites) after; gone or changed: %+v", len(held), sites(held), len(after), sites(after), lost)
	} else {
		t.Logf("node B's agent (pid %d) holds all its %d uprobe links (%d sites) after node A's agent pod %s is gone (%d links now)", agentB.pid, len(held), sites(held), oldA.Name, len(after))
	}
	isAfter := func(name string) bool { return strings.HasPrefix(name, "after-") }
	flow = startFlow(cs, "after", 300*time.Millisecond)
	time.Sleep(5 * time.Second)
	created = flow.end(t)
	b := fixtures[1]
	recs := waitTruthSettled(t, b.truth, b.node.Name+"'s fixture: the reconciles after node A's agent went", isAfter)
	var sinceGone int
	for _, r := range recs {
		if r.Start.After(goneAt) {
			sinceGone++
		}
	}
	if sinceGone == 0 {
		t.Errorf("%s's fixture: no reconcile began after node A's agent was gone (%d records)", b.node.Name, len(recs))
	}
	checkTruth(t, b.node.Name+"'s fixture, node A's agent deleted", recs, b.truth, func() []recvSpan { return spansOfObjects(src, b.pod, isAfter) }, 60*time.Second)
	// Node A's fixture ran on meanwhile, under the DaemonSet's next agent or none: still no
	// reconcile of it is a span of node B's, nor two spans.
	checkSpanNodes(t, src, fixtures)
	agentB.report(t, "tracing its node's fixture beside another node's")
	t.Logf("%d ConfigMaps created after node A's agent pod was deleted; two-node test took %s", created, time.Since(began).Round(time.Millisecond))
}

// logAgentsOnFailure shows, when t fails, the tail of the log of every agent pod of node (the
// kubelet's pod log folder: the test bed's API server does not proxy logs).
func logAgentsOnFailure(t *testing.T, node *testenv.Node) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(node.PodLogsDir, "reconscope_*", "*", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 16<<10 {
				b = b[len(b)-16<<10:]
			}
			t.Logf("log of %s on %s:\n%s", strings.TrimPrefix(l, node.PodLogsDir), node.Name, b)
		}
	})
}

// deleteWorkloads deletes the fixtures' Deployments and the agent's DaemonSet, and waits (30 s at
// most) until the garbage collector has deleted their ReplicaSets: no controller makes their
// pods again while the nodes are drained.
func deleteWorkloads(t *testing.T, cs *kubernetes.Clientset) {
	ctx := context.Background()
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("list Deployments: %v", err)
		return
	}
	for _, d := range deps.Items {
		if err := cs.AppsV1().Deployments(ns).Delete(ctx, d.Name, opts); err != nil {
			t.Errorf("delete Deployment %s: %v", d.Name, err)
		}
	}
	if err := cs.AppsV1().DaemonSets("reconscope").Delete(ctx, "reconscope-agent", opts); err != nil {
		t.Errorf("delete the agent's DaemonSet: %v", err)
	}
	gone := testkit.Poll(30*time.Second, func() bool {
		rs, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(rs.Items) == 0
	})
	if !gone {
		t.Logf("the fixtures' ReplicaSets are still there 30 s after their Deployments were deleted")
	}
}

// waitNodeAgent waits for a Running and Ready agent pod on node, other than not.
func waitNodeAgent(t *testing.T, cs *kubernetes.Clientset, node, not string) *corev1.Pod {
	t.Helper()
	return waitReadyPod(t, cs, "reconscope", metav1.ListOptions{LabelSelector: agentSelector,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()}, not, 120*time.Second)
}

// checkSpanNodes checks every reconcile span in Jaeger whose reconcile ID one of the fixtures'
// ground truths holds: it is the only span of that reconcile, and its resource names the
// fixture's node and pod. (Spans of reconciles no ground truth holds are other processes'.)
func checkSpanNodes(t *testing.T, src spanSource, fixtures []nodeFixture) {
	t.Helper()
	owner := map[string]nodeFixture{}
	for _, f := range fixtures {
		recs, err := groundtruth.ReadFile(f.truth)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			owner[r.ReconcileID] = f
		}
	}
	all, _ := src.all()
	perID, perNode := map[string]int{}, map[string]int{}
	for _, s := range all {
		if len(s.Span.GetParentSpanId()) != 0 || !strings.HasPrefix(s.Span.GetName(), "reconcile ") {
			continue
		}
		id := attrStr(attrMap(s.Span.GetAttributes()), "reconscope.reconcile_id")
		f, ok := owner[id]
		if !ok {
			continue
		}
		perID[id]++
		perNode[f.node.Name]++
		if n, p := attrStr(s.Resource, "k8s.node.name"), attrStr(s.Resource, "k8s.pod.name"); n != f.node.Name || p != f.pod.Name {
			t.Errorf("reconcile %s of %s's fixture: span names node %q pod %q, want %q %q", id, f.node.Name, n, p, f.node.Name, f.pod.Name)
		}
	}
	for id, n := range perID {
		if n > 1 {
			t.Errorf("reconcile %s of %s's fixture: %d spans, want 1", id, owner[id].node.Name, n)
		}
	}
	t.Logf("reconcile spans in Jaeger of the %d reconciles of the fixtures' ground truths, by node: %v", len(owner), perNode)
}

// checkOwnNodeOnly checks, in each agent's log, that it never logged "tracing" for a process of
// a pod of the other node (the fixtures', kube-controller-manager's), and did for its own
// node's.
func checkOwnNodeOnly(t *testing.T, nodes []*testenv.Node, agents map[string]*corev1.Pod, pods []nodeFixture) {
	t.Helper()
	// hits are the processes of pod f the agent of node logged "tracing" for.
	hits := func(node *testenv.Node, f nodeFixture) (hits, pids []int) {
		traced := tracedPIDs(node.PodLogsDir, agents[node.Name])
		pids = podPIDs(f.pod)[f.pod.Name]
		for _, pid := range pids {
			if traced[pid] {
				hits = append(hits, pid)
			}
		}
		return hits, pids
	}
	for _, node := range nodes {
		agent := agents[node.Name]
		for _, f := range pods {
			if f.node == node {
				// kube-controller-manager's inspection may still run: wait for its line.
				testkit.WaitFor(t, fmt.Sprintf("agent %s logs \"tracing\" for pod %s", agent.Name, f.pod.Name), 90*time.Second, func() (bool, string) {
					h, pids := hits(node, f)
					return len(h) > 0, fmt.Sprintf("none of its processes %v", pids)
				})
			} else if h, _ := hits(node, f); len(h) > 0 {
				t.Errorf("agent %s of %s traces processes %v of pod %s on %s", agent.Name, node.Name, h, f.pod.Name, f.node.Name)
			}
		}
		t.Logf("agent %s of %s: \"tracing\" logged for %d processes of the machine", agent.Name, node.Name, len(tracedPIDs(node.PodLogsDir, agent)))
	}
}

// tracedPIDs returns the PIDs an agent pod logged "tracing" for, from its log in its node's pod
// log folder logs (the kubelet's CRI log lines, each holding one line of the agent's JSON log).
func tracedPIDs(logs string, agent *corev1.Pod) map[int]bool {
	files, _ := filepath.Glob(filepath.Join(logs, agent.Namespace+"_"+agent.Name+"_"+string(agent.UID), "*", "*.log"))
	out := map[int]bool{}
	for _, f := range files {
		for _, line := range completeLines(f) {
			i := strings.IndexByte(line, '{')
			var l agentLog
			if i < 0 || json.Unmarshal([]byte(line[i:]), &l) != nil || l.msg() != "tracing" {
				continue
			}
			out[int(l.int("pid"))] = true
		}
	}
	return out
}

// heldLinks returns the uprobe links process pid holds.
func heldLinks(t *testing.T, pid int) []bpftest.ProbeLink {
	t.Helper()
	l, err := bpftest.LinksHeldBy(pid)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func sites(ls []bpftest.ProbeLink) int {
	n := 0
	for _, l := range ls {
		n += l.Count
	}
	return n
}
