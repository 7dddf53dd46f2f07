//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// settleWindow is how long before a cut a reconcile must have ended (by the ground truth's own
// End) for its span to be required: one that ended later may still be on its way through the
// agent, the collector and Jaeger.
const settleWindow = 5 * time.Second

// truthProblems compares reconcile spans with the fixture's ground truth by reconcile ID:
// every record of required has exactly one span with its ID, and that span names the same
// namespace, object and UID and has the result controller-runtime counts for it; every span
// has a record in all (the whole ground truth, read after the spans) with the same fields, and
// no reconcile has two spans. It returns one line per problem.
func truthProblems(required, all []groundtruth.Record, spans []recvSpan) []string {
	byID := map[string]groundtruth.Record{}
	for _, r := range all {
		byID[r.ReconcileID] = r
	}
	seen := map[string]int{}
	var out []string
	for _, s := range spans {
		a := attrMap(s.Span.GetAttributes())
		id := attrStr(a, "reconscope.reconcile_id")
		seen[id]++
		r, ok := byID[id]
		if !ok {
			out = append(out, fmt.Sprintf("span of %s/%s (reconcile ID %q, result %s) has no reconcile in the ground truth",
				attrStr(a, "k8s.object.namespace"), attrStr(a, "k8s.object.name"), id, attrStr(a, "reconscope.result")))
			continue
		}
		for _, f := range [][3]string{
			{"namespace", attrStr(a, "k8s.object.namespace"), r.Namespace},
			{"object", attrStr(a, "k8s.object.name"), r.Name},
			{"uid", attrStr(a, "k8s.object.uid"), r.UID},
			{"result", attrStr(a, "reconscope.result"), r.MetricResult()},
		} {
			if f[1] != f[2] {
				out = append(out, fmt.Sprintf("reconcile %s of %s/%s (%s): span's %s %q, ground truth's %q", id, r.Namespace, r.Name, r.Outcome, f[0], f[1], f[2]))
			}
		}
	}
	for _, r := range required {
		if n := seen[r.ReconcileID]; n != 1 {
			out = append(out, fmt.Sprintf("reconcile %s of %s/%s (%s, ended %s): %d spans, want 1",
				r.ReconcileID, r.Namespace, r.Name, r.Outcome, r.End.Format("15:04:05.000"), n))
		}
	}
	for id, n := range seen {
		if _, ok := byID[id]; ok && n > 1 && !slices.ContainsFunc(required, func(r groundtruth.Record) bool { return r.ReconcileID == id }) {
			out = append(out, fmt.Sprintf("reconcile %s: %d spans, want at most 1", id, n))
		}
	}
	sort.Strings(out)
	return out
}

// checkTruth waits up to timeout for truthProblems(required, truth read anew, spans()) to be
// empty, then reports each problem left as an error. spans is read before the ground truth,
// so that every span's reconcile is already written down.
func checkTruth(t *testing.T, what string, required []groundtruth.Record, truthPath string, spans func() []recvSpan, timeout time.Duration) {
	t.Helper()
	var got []recvSpan
	var problems []string
	settled := testkit.Poll(timeout, func() bool {
		got = spans()
		all, err := groundtruth.ReadFile(truthPath)
		if err != nil {
			t.Fatal(err)
		}
		problems = truthProblems(required, all, got)
		return len(problems) == 0
	})
	if settled {
		t.Logf("%s: each of the %d reconciles of the window has exactly one span with its reconcile ID, object, UID and result; each of the %d spans has its reconcile",
			what, len(required), len(got))
		return
	}
	t.Errorf("%s: %d reconciles required, %d spans; after %s, %d problems:\n  %s", what, len(required), len(got), timeout, len(problems), strings.Join(problems, "\n  "))
}

// truthOf returns the records of the ground truth at path that keep accepts.
func truthOf(t *testing.T, path string, keep func(groundtruth.Record) bool) []groundtruth.Record {
	t.Helper()
	all, err := groundtruth.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []groundtruth.Record
	for _, r := range all {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// waitTruthSettled waits until the records keep accepts exist and none has been added, nor
// ended, for settleWindow: by the ground truth's own times, every reconcile they caused is over.
func waitTruthSettled(t *testing.T, path, what string, keep func(string) bool) []groundtruth.Record {
	t.Helper()
	var recs []groundtruth.Record
	n, since := -1, time.Now()
	testkit.WaitFor(t, what+" settled in the ground truth", 120*time.Second, func() (bool, string) {
		recs = truthOf(t, path, func(r groundtruth.Record) bool { return keep(r.Name) })
		if len(recs) != n {
			n, since = len(recs), time.Now()
		}
		var last time.Time
		for _, r := range recs {
			if r.End.After(last) {
				last = r.End
			}
		}
		return len(recs) > 0 && time.Since(since) >= settleWindow && time.Since(last) >= settleWindow,
			fmt.Sprintf("%d records, the last ended %s ago", len(recs), time.Since(last).Round(time.Millisecond))
	})
	return recs
}

// spansOfObjects returns the operator pod's reconcile spans of the objects keep accepts.
func spansOfObjects(src spanSource, pod *corev1.Pod, keep func(string) bool) []recvSpan {
	var out []recvSpan
	for _, s := range fixtureRoots(src, pod) {
		if keep(attrStr(attrMap(s.Span.GetAttributes()), "k8s.object.name")) {
			out = append(out, s)
		}
	}
	return out
}

// flowScripts are the scripts of the ConfigMaps a reconcile flow creates in turn: a success,
// an error then a success (the backoff's requeue), a requeue after 200ms then a success.
var flowScripts = []string{"success", "times:1;error", "times:1;requeue-after:200ms"}

// reconcileFlow keeps the fixture reconciling: it creates a scripted ConfigMap prefix-N every
// interval until stopped.
type reconcileFlow struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	created int
	errs    []error
}

// startFlow starts a reconcileFlow in namespace ns.
func startFlow(cs *kubernetes.Clientset, prefix string, interval time.Duration) *reconcileFlow {
	f := &reconcileFlow{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 1; ; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: ns,
				Annotations: map[string]string{scriptAnnotation: flowScripts[i%len(flowScripts)]}}}
			_, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{})
			f.mu.Lock()
			if err != nil {
				f.errs = append(f.errs, err)
			} else {
				f.created++
			}
			f.mu.Unlock()
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return f
}

// end stops the flow and fails t if an object could not be created; it returns how many were.
func (f *reconcileFlow) end(t *testing.T) int {
	t.Helper()
	close(f.stop)
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, err := range f.errs {
		t.Errorf("reconcile flow: %v", err)
	}
	return f.created
}

// podPIDs returns, for each pod, the PIDs of the processes in its cgroups (its containers'
// and its sandbox's), sorted: the node's own processes of the pod, not another test's of the
// same executable. A static pod's cgroup is named by the kubelet's UID of it (its mirror's
// kubernetes.io/config.mirror annotation), not by the mirror pod's UID.
func podPIDs(pods ...*corev1.Pod) map[string][]int {
	out := map[string][]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cg, err := os.ReadFile(filepath.Join(d, "cgroup"))
		if err != nil {
			continue
		}
		for _, p := range pods {
			uid := string(p.UID)
			if m := p.Annotations["kubernetes.io/config.mirror"]; m != "" {
				uid = m
			}
			if strings.Contains(string(cg), uid) || strings.Contains(string(cg), strings.ReplaceAll(uid, "-", "_")) {
				var pid int
				fmt.Sscan(filepath.Base(d), &pid)
				out[p.Name] = append(out[p.Name], pid)
			}
		}
	}
	for _, pids := range out {
		sort.Ints(pids)
	}
	return out
}

// podRestarts returns the restart count of every container of the pods, by pod/container.
func podRestarts(t *testing.T, cs *kubernetes.Clientset, pods ...*corev1.Pod) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for _, p := range pods {
		cur, err := cs.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s/%s: %v", p.Namespace, p.Name, err)
			continue
		}
		for _, c := range cur.Status.ContainerStatuses {
			out[cur.Name+"/"+c.Name] = c.RestartCount
		}
	}
	return out
}

var logTime = regexp.MustCompile(`"?time"?[=:]"?([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9:]+))`)

// waitAgentTracing waits until the agent pod has logged "tracing" for pid and returns the time
// of that line: the agent's log as the kubelet keeps it in the node's pod log folder logs
// (the test bed's API server does not proxy logs).
func waitAgentTracing(t *testing.T, logs string, agent *corev1.Pod, pid int) time.Time {
	t.Helper()
	var at time.Time
	pidText := []*regexp.Regexp{regexp.MustCompile(fmt.Sprintf(`\bpid=%d\b`, pid)), regexp.MustCompile(fmt.Sprintf(`"pid":%d\b`, pid))}
	testkit.WaitFor(t, fmt.Sprintf("agent pod %s logs \"tracing\" for pid %d", agent.Name, pid), 90*time.Second, func() (bool, string) {
		files, _ := filepath.Glob(filepath.Join(logs, agent.Namespace+"_"+agent.Name+"_"+string(agent.UID), "*", "*.log"))
		var b []byte
		for _, f := range files {
			c, err := os.ReadFile(f)
			if err != nil {
				return false, err.Error()
			}
			b = append(b, c...)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.Contains(l, "msg=tracing ") && !strings.Contains(l, `"msg":"tracing"`) {
				continue
			}
			if !pidText[0].MatchString(l) && !pidText[1].MatchString(l) {
				continue
			}
			m := logTime.FindStringSubmatch(l)
			if m == nil {
				return false, "no time in " + l
			}
			var err error
			at, err = time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				return false, err.Error()
			}
			return true, ""
		}
		return false, fmt.Sprintf("%d bytes of log, no \"tracing\" line for pid %d", len(b), pid)
	})
	return at
}
