//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/lifeline"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestCausalityAcrossNodes is issue 15's causal chain between two controllers, on one node and
// across two, read back from a real trace backend. Two processes of the scripted fixture split
// the work by label: "writer" reconciles the ConfigMaps labelled role=writer, whose script
// patches the ConfigMap "target"; "reader" reconciles "target" (role=reader). Each patch makes a
// version of "target" that triggers a reader reconcile. A reader reconcile lasts 300 ms, so the
// versions written meanwhile are read by a reconcile that starts well after the writer's
// reconcile that wrote them ended (with 30 ms, on a loaded machine, both reader reconciles of a
// CI run began within the 5 ms the test allows two clocks, and none counted as after).
//
//   - One node: one agent traces both. A reader reconcile of a version the writer made names
//     the writer (trigger_controller) and the lag from the write's return to its start, and
//     its read_version link leads, in Jaeger, to that version's lifeline span.
//   - Two nodes: two agents in run mode, one per process, share nothing but the backend. The
//     reader's agent never saw the write (its trigger is unknown), yet the link it derived from
//     the object's UID and the version it read is the span the writer's agent derived from
//     the UID and the version the write returned: the graph connects in Jaeger.
//
// A writer that patches and a reader that only reads do not fight: no fight is reported.
func TestCausalityAcrossNodes(t *testing.T) {
	bpftest.Require(t)
	usePrivateControlPlane(t)
	agentBin := testkit.Build(t, "./cmd/agent")
	fixtureBin := testkit.Build(t, "./test/fixtures/scripted-controller")
	env := testenv.Start(t, testenv.Options{})
	jaeger := testenv.StartJaeger(t)
	const cns = "causality"
	c, ctx := env.Client, context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cns}}); err != nil {
		t.Fatal(err)
	}

	// One executable each, so that each "node"'s agent can be told to trace one of them.
	proc := map[string]*testenv.Process{}
	exe := map[string]string{}
	truth := map[string]string{} // role → its ground truth: what each reconcile read and wrote, and when
	for _, role := range []string{"writer", "reader"} {
		exe[role] = filepath.Join(t.TempDir(), role, "scripted-controller")
		if err := os.MkdirAll(filepath.Dir(exe[role]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := testkit.CopyFile(fixtureBin, exe[role]); err != nil {
			t.Fatal(err)
		}
		truth[role] = filepath.Join(filepath.Dir(exe[role]), "truth.jsonl")
		proc[role] = testenv.StartProcess(t, role, exec.Command(exe[role], "--kubeconfig", env.Kubeconfig,
			"--namespace", cns, "--controller-name", role, "--selector", "role="+role, "--ground-truth", truth[role]))
	}
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cns, Name: "target",
		Labels: map[string]string{"role": "reader"}, Annotations: map[string]string{scriptAnnotation: "sleep:300ms"}}}
	if err := c.Create(ctx, target); err != nil {
		t.Fatal(err)
	}
	uid := string(target.UID)

	// writeTarget has the writer patch "target" three times (one patch per reconcile of a new
	// writer ConfigMap, each reconcile lasting 50 ms after its patch: the reader's first
	// reconcile, 300 ms long, then begins before the writer's reconcile ends, and the later
	// patches come while it runs, so that its next reconcile begins after the writer's last has
	// ended; without the 50 ms, on a fast machine all three patches came before the reader's
	// first reconcile, which began within the writer's last) and returns once, by the
	// fixtures' own records, the reader has reconciled the last version written and every
	// reader reconcile since from has its span in the agents' output: the writes (versions and
	// times from the writer's ground truth), the reader's reconciles since from (its ground
	// truth), and the agents' spans.
	writeTarget := func(name string, from time.Time, agents ...*testenv.Process) (writes []targetWrite, reads []groundtruth.Record, spans []exporter.JSONSpan) {
		t.Helper()
		w := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cns, Name: name,
			Labels: map[string]string{"role": "writer"}, Annotations: map[string]string{scriptAnnotation: "repeat:3;patch:configmap/target;sleep:50ms"}}}
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, "the reader reconciles the last version of target the writer made from "+name, 60*time.Second, func() (bool, string) {
			spans = nil
			for _, a := range agents {
				mustRun(t, a, "reconscope-agent")
				spans = append(spans, readSpans(t, a.StdoutPath(), false)...)
			}
			writes = truthWrites(t, truth["writer"], name, uid)
			if len(writes) < 3 {
				return false, fmt.Sprintf("%d patches of target in the writer's ground truth", len(writes))
			}
			reads = truthReads(t, truth["reader"], uid, from)
			last := writes[len(writes)-1].rv
			if !slices.ContainsFunc(reads, func(r groundtruth.Record) bool { return r.ResourceVersion == last }) {
				return false, "no reader reconcile of version " + last + " in the reader's ground truth"
			}
			ids := map[string]bool{}
			for _, s := range byPID(spans, proc["reader"].PID()) {
				ids[s.ReconcileID] = true
			}
			for _, r := range reads {
				if !ids[r.ReconcileID] {
					return false, fmt.Sprintf("reader reconcile %s of target@%s: no span yet", r.ReconcileID, r.ResourceVersion)
				}
			}
			return true, ""
		})
		return writes, reads, spans
	}

	// One node: one agent traces both processes.
	began := time.Now()
	one, _ := startRunAgent(t, agentBin, env.Kubeconfig, "node-1", jaeger.OTLPAddr, exe["writer"], exe["reader"])
	waitTracing(t, one, map[int]string{proc["writer"].PID(): "writer", proc["reader"].PID(): "reader"})
	writes, reads, spans := writeTarget("write-1", time.Now(), one)
	lagged := 0
	for _, p := range readerSpans(t, "one node", reads, writes, byPID(spans, proc["reader"].PID())) {
		r, w, s := p.read, p.write, p.span
		// The agent's lag runs from the patch's return to the reconcile's start. By the
		// fixtures' records, the patch returned within the writer's reconcile [w.start,
		// w.end] and the reader's reconcile began at r.Start: the lag lies in [r.Start-w.end,
		// r.Start-w.start], give or take 5ms for two clocks (the probe's and the fixture's).
		lo, hi := r.Start.Sub(w.end)-clockSlack, r.Start.Sub(w.start)+clockSlack
		lag := time.Duration(s.TriggerLagNS)
		switch {
		case lo > 0 && (s.TriggerController != "writer" || lag < lo || lag > hi):
			t.Errorf("one node: reader reconcile %s of target@%s began %v after the writer's reconcile that patched it ended: trigger %q, lag %v, want writer, a lag in [%v, %v]",
				r.ReconcileID, r.ResourceVersion, r.Start.Sub(w.end), s.TriggerController, lag, lo, hi)
		case lo <= 0 && lag == 0 && s.TriggerController != "writer" && s.TriggerController != span.TriggerUnknown:
			t.Errorf("one node: reader reconcile %s of target@%s: trigger %q, lag 0", r.ReconcileID, r.ResourceVersion, s.TriggerController)
		case lo <= 0 && lag != 0 && (s.TriggerController != "writer" || lag < 0 || lag > hi):
			// The watch can deliver the version before the writer has its response: the writer
			// is known only if the reconcile was still running when the response came.
			t.Errorf("one node: reader reconcile %s of target@%s began %v before the writer's reconcile ended: trigger %q, lag %v, want 0 or writer with a lag in [0, %v]",
				r.ReconcileID, r.ResourceVersion, -r.Start.Sub(w.end), s.TriggerController, lag, hi)
		default:
			if lo > 0 {
				lagged++
			}
			t.Logf("one node: reader reconcile %s of target@%s: trigger %s, lag %v (the fixtures' records bound it to [%v, %v])", r.ReconcileID, r.ResourceVersion, s.TriggerController, lag, lo, hi)
		}
	}
	if lagged == 0 {
		t.Errorf("one node: of %d reader reconciles, none began after the writer's reconcile that made its version ended", len(reads))
	}
	checkNoFights(t, spans)
	if err := one.Stop(); err != nil { // flushes its spans to Jaeger
		t.Errorf("agent node-1: %v", err)
	}
	checkLinkedInJaeger(t, jaeger, began, proc["reader"].PID(), uid, writes, reads, "node-1", "node-1")

	// Two nodes: an agent each, sharing nothing.
	began = time.Now()
	a, _ := startRunAgent(t, agentBin, env.Kubeconfig, "node-a", jaeger.OTLPAddr, exe["writer"])
	b, _ := startRunAgent(t, agentBin, env.Kubeconfig, "node-b", jaeger.OTLPAddr, exe["reader"])
	waitTracing(t, a, map[int]string{proc["writer"].PID(): "writer"})
	waitTracing(t, b, map[int]string{proc["reader"].PID(): "reader"})
	writes, reads, spans = writeTarget("write-2", time.Now(), a, b)
	for _, p := range readerSpans(t, "two nodes", reads, writes, readSpans(t, b.StdoutPath(), false)) {
		if s := p.span; s.TriggerController != span.TriggerUnknown || s.TriggerLagNS != 0 {
			t.Errorf("two nodes: reader reconcile %s of target@%s: trigger %q, lag %d; the writer is on the other node: want unknown, 0", s.ReconcileID, s.ResourceVersion, s.TriggerController, s.TriggerLagNS)
		}
	}
	checkNoFights(t, spans)
	for name, p := range map[string]*testenv.Process{"node-a": a, "node-b": b} {
		if err := p.Stop(); err != nil {
			t.Errorf("agent %s: %v", name, err)
		}
	}
	checkLinkedInJaeger(t, jaeger, began, proc["reader"].PID(), uid, writes, reads, "node-a", "node-b")
}

// clockSlack is the error allowed between a time the agent measured (a probe's) and one the
// fixture wrote down (Go's clock inside Reconcile).
const clockSlack = 5 * time.Millisecond

// targetWrite is a version of the target the writer's patch made, and the writer's reconcile
// that made it: the patch returned between start and end.
type targetWrite struct {
	rv         string
	start, end time.Time
}

// truthWrites returns, from the writer's ground truth at path, the versions of object uid its
// reconciles of name patched, in order.
func truthWrites(t *testing.T, path, name, uid string) []targetWrite {
	t.Helper()
	recs, err := groundtruth.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []targetWrite
	for _, r := range recs {
		if r.Name != name {
			continue
		}
		for _, cl := range r.Calls {
			if cl.Verb == "patch" && cl.UID == uid && cl.ResourceVersion != "" {
				out = append(out, targetWrite{cl.ResourceVersion, r.Start, r.End})
			}
		}
	}
	return out
}

// truthReads returns the reader's reconciles of object uid that began after from, from its
// ground truth at path.
func truthReads(t *testing.T, path, uid string, from time.Time) []groundtruth.Record {
	t.Helper()
	return truthOf(t, path, func(r groundtruth.Record) bool { return r.UID == uid && r.Start.After(from) })
}

// readerSpan is a reader reconcile of the ground truth, the write that made the version it
// read, and its span.
type readerSpan struct {
	read  groundtruth.Record
	write targetWrite
	span  exporter.JSONSpan
}

// readerSpans pairs every reader reconcile of reads with the write of the version it read
// (every one must have read a version the writer made: nothing else writes the target) and
// its one span of spans (by reconcile ID, with the same UID, version and result).
func readerSpans(t *testing.T, where string, reads []groundtruth.Record, writes []targetWrite, spans []exporter.JSONSpan) []readerSpan {
	t.Helper()
	var out []readerSpan
	for _, r := range reads {
		w, ok := writeOf(writes, r.ResourceVersion)
		if !ok {
			t.Errorf("%s: reader reconcile %s read target@%s, a version none of the writer's patches made (%v)", where, r.ReconcileID, r.ResourceVersion, writes)
			continue
		}
		var found []exporter.JSONSpan
		for _, s := range spans {
			if s.ReconcileID == r.ReconcileID {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			t.Errorf("%s: reader reconcile %s of target@%s: %d spans, want 1", where, r.ReconcileID, r.ResourceVersion, len(found))
			continue
		}
		s := found[0]
		if s.UID != r.UID || s.ResourceVersion != r.ResourceVersion || string(s.Result) != r.MetricResult() {
			t.Errorf("%s: reader reconcile %s: span of %s@%s (%s), the reader's record %s@%s (%s)", where, r.ReconcileID, s.UID, s.ResourceVersion, s.Result, r.UID, r.ResourceVersion, r.MetricResult())
			continue
		}
		out = append(out, readerSpan{r, w, s})
	}
	t.Logf("%s: %d reader reconciles of the writer's %d versions in the fixtures' records, %d with their span", where, len(reads), len(writes), len(out))
	if len(reads) == 0 {
		t.Errorf("%s: no reader reconcile in the reader's ground truth", where)
	}
	return out
}

// writeOf returns the write that made version rv.
func writeOf(writes []targetWrite, rv string) (targetWrite, bool) {
	for _, w := range writes {
		if w.rv == rv {
			return w, true
		}
	}
	return targetWrite{}, false
}

// checkNoFights fails on any fight reported in spans.
func checkNoFights(t *testing.T, spans []exporter.JSONSpan) {
	t.Helper()
	for _, s := range spans {
		for _, f := range s.Fights {
			b, _ := json.Marshal(f)
			t.Errorf("%s reconcile of %s: fight %s, where one controller writes and one reads", s.Controller, s.Name, b)
		}
	}
}

// checkLinkedInJaeger reads back from Jaeger the reader's reconciles of the object uid since
// began and checks that every reader reconcile of reads (the reader's ground truth) is there,
// once, and that each of its read_version links is the pair of IDs derived from uid and the
// version it read, and resolves in Jaeger to the lifeline span of that version written by
// "writer", exported from writerNode, with the version the writer's ground truth says its
// patch made; the reconciles come from readerNode.
func checkLinkedInJaeger(t *testing.T, j *testenv.Jaeger, began time.Time, readerPID int, uid string, writes []targetWrite, reads []groundtruth.Record, writerNode, readerNode string) {
	t.Helper()
	traceID := lifeline.TraceID(uid)
	var lines, problems []string
	var links int
	testkit.WaitFor(t, fmt.Sprintf("Jaeger links each of the %d reader reconciles to the writer's lifeline span (%s → %s)", len(reads), writerNode, readerNode), 60*time.Second, func() (bool, string) {
		all, _ := jaegerSpans{t, j, began}.all()
		lifelines := map[string]recvSpan{} // span ID → lifeline span of uid
		byID := map[string][]recvSpan{}    // reconcile ID → the reader's reconcile spans
		for _, s := range all {
			a := attrMap(s.Span.GetAttributes())
			if bytes.Equal(s.Span.GetTraceId(), traceID[:]) && s.Span.GetKind() == tracepb.Span_SPAN_KIND_PRODUCER {
				lifelines[hex.EncodeToString(s.Span.GetSpanId())] = s
			}
			if attrInt(s.Resource, "process.pid") == int64(readerPID) && s.Span.GetName() == "reconcile reader" {
				id := attrStr(a, "reconscope.reconcile_id")
				byID[id] = append(byID[id], s)
			}
		}
		lines, problems, links = lines[:0], problems[:0], 0
		for _, r := range reads {
			rv := r.ResourceVersion
			found := byID[r.ReconcileID]
			if len(found) != 1 {
				problems = append(problems, fmt.Sprintf("reader reconcile %s of target@%s: %d spans in Jaeger, want 1", r.ReconcileID, rv, len(found)))
				continue
			}
			s := found[0]
			a := attrMap(s.Span.GetAttributes())
			if got := attrStr(a, "k8s.object.uid") + "@" + attrStr(a, "k8s.object.resource_version"); got != uid+"@"+rv {
				problems = append(problems, fmt.Sprintf("reader reconcile %s: span in Jaeger of %s, the reader read %s@%s", r.ReconcileID, got, uid, rv))
			}
			if node := attrStr(s.Resource, "k8s.node.name"); node != readerNode {
				problems = append(problems, fmt.Sprintf("reader reconcile %s of target@%s from node %q, want %q", r.ReconcileID, rv, node, readerNode))
			}
			want := lifeline.SpanID(uid, rv)
			read := 0
			for _, l := range s.Span.GetLinks() {
				if attrStr(attrMap(l.GetAttributes()), "reconscope.link.type") != "read_version" {
					continue
				}
				read++
				if !bytes.Equal(l.GetTraceId(), traceID[:]) || !bytes.Equal(l.GetSpanId(), want[:]) {
					problems = append(problems, fmt.Sprintf("reader reconcile %s of target@%s links to %x/%x, want the IDs derived from its UID and version %s/%s", r.ReconcileID, rv, l.GetTraceId(), l.GetSpanId(), traceID, want))
					continue
				}
				ls, ok := lifelines[want.String()]
				if !ok {
					problems = append(problems, fmt.Sprintf("reader reconcile %s of target@%s: link to %s, no such span in Jaeger", r.ReconcileID, rv, want))
					continue
				}
				la := attrMap(ls.Span.GetAttributes())
				writer, wnode := attrStr(la, "reconscope.lifeline.writer"), attrStr(ls.Resource, "k8s.node.name")
				if _, made := writeOf(writes, attrStr(la, "k8s.object.resource_version")); writer != "writer" || wnode != writerNode || attrStr(la, "k8s.object.resource_version") != rv || !made {
					problems = append(problems, fmt.Sprintf("the lifeline span target@%s links to was written by %q on %q (version %s), want writer on %s, a version of the writer's ground truth", rv, writer, wnode, attrStr(la, "k8s.object.resource_version"), writerNode))
					continue
				}
				links++
				lines = append(lines, fmt.Sprintf("target@%s: reader reconcile %s on %s → lifeline span %s by %s on %s", rv, r.ReconcileID, readerNode, want, writer, wnode))
			}
			if read == 0 {
				problems = append(problems, fmt.Sprintf("reader reconcile %s of target@%s: no read_version link", r.ReconcileID, rv))
			}
		}
		return len(reads) > 0 && len(problems) == 0, strings.Join(problems, "; ")
	})
	t.Logf("Jaeger (%s → %s): %d reader reconciles, %d read_version links, each resolved: %s", writerNode, readerNode, len(reads), links, strings.Join(lines, "; "))
}
