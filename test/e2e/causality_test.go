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
	"github.com/reconscope/reconscope/test/testenv"
)

// TestCausalityAcrossNodes is issue 15's causal chain between two controllers, on one node and
// across two, read back from a real trace backend. Two processes of the scripted fixture split
// the work by label: "writer" reconciles the ConfigMaps labelled role=writer, whose script
// patches the ConfigMap "target"; "reader" reconciles "target" (role=reader). Each patch makes a
// version of "target" that triggers a reader reconcile. A reader reconcile lasts 30 ms, so the
// versions written meanwhile are read by a reconcile that starts after their write returned.
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
	for _, role := range []string{"writer", "reader"} {
		exe[role] = filepath.Join(t.TempDir(), role, "scripted-controller")
		if err := os.MkdirAll(filepath.Dir(exe[role]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(fixtureBin, exe[role]); err != nil {
			t.Fatal(err)
		}
		proc[role] = testenv.StartProcess(t, role, exec.Command(exe[role], "--kubeconfig", env.Kubeconfig,
			"--namespace", cns, "--controller-name", role, "--selector", "role="+role))
	}
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cns, Name: "target",
		Labels: map[string]string{"role": "reader"}, Annotations: map[string]string{scriptAnnotation: "sleep:30ms"}}}
	if err := c.Create(ctx, target); err != nil {
		t.Fatal(err)
	}
	uid := string(target.UID)

	// writeTarget has the writer patch "target" three times (one patch per reconcile of a new
	// writer ConfigMap) and returns once the reader has reconciled the last version written,
	// with every span the agents wrote by then.
	writeTarget := func(name string, agents ...*testenv.Process) (writes []targetWrite, spans []exporter.JSONSpan) {
		t.Helper()
		w := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cns, Name: name,
			Labels: map[string]string{"role": "writer"}, Annotations: map[string]string{scriptAnnotation: "repeat:3;patch:configmap/target"}}}
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, "the reader reconciles the last version of target the writer made from "+name, 60*time.Second, func() (bool, string) {
			spans = nil
			for _, a := range agents {
				mustRun(t, a, "reconscope-agent")
				spans = append(spans, readSpans(t, a.StdoutPath(), false)...)
			}
			writes = targetWrites(spans, proc["writer"].PID(), name, uid)
			if len(writes) < 3 {
				return false, fmt.Sprintf("%d patches of target traced", len(writes))
			}
			last := writes[len(writes)-1].rv
			for _, s := range byPID(spans, proc["reader"].PID()) {
				if s.UID == uid && s.ResourceVersion == last {
					return true, ""
				}
			}
			return false, "no reader reconcile of version " + last
		})
		return writes, spans
	}

	// One node: one agent traces both processes.
	began := time.Now()
	one, _ := startRunAgent(t, agentBin, env.Kubeconfig, "node-1", jaeger.OTLPAddr, exe["writer"], exe["reader"])
	waitTracing(t, one, map[int]string{proc["writer"].PID(): "writer", proc["reader"].PID(): "reader"})
	writes, spans := writeTarget("write-1", one)
	read, lagged := 0, 0
	for _, s := range byPID(spans, proc["reader"].PID()) {
		w, ok := writeOf(writes, s.ResourceVersion)
		if !ok {
			continue
		}
		read++
		switch lag := s.Start.Sub(w.end); {
		case lag >= 0 && s.TriggerController != "writer":
			t.Errorf("one node: reader reconcile of target@%s began %v after the writer's patch of it returned: trigger_controller %q", s.ResourceVersion, lag, s.TriggerController)
		case lag >= 0 && (s.TriggerLagNS <= 0 || absDuration(time.Duration(s.TriggerLagNS)-lag) > time.Microsecond):
			t.Errorf("one node: reader reconcile of target@%s began %v after the write returned: trigger_lag_ns %d", s.ResourceVersion, lag, s.TriggerLagNS)
		case lag < 0 && (s.TriggerLagNS != 0 || (s.TriggerController != "writer" && s.TriggerController != span.TriggerUnknown)):
			// The watch can deliver the version before the writer has its response: the writer
			// is known only if the reconcile was still running when the response came.
			t.Errorf("one node: reader reconcile of target@%s began %v before the write returned, yet trigger %q, trigger_lag_ns %d", s.ResourceVersion, -lag, s.TriggerController, s.TriggerLagNS)
		default:
			if lag >= 0 {
				lagged++
			}
			t.Logf("one node: reader reconcile of target@%s: trigger %s, lag %v (start minus write end %v)", s.ResourceVersion, s.TriggerController, time.Duration(s.TriggerLagNS), lag)
		}
	}
	if read == 0 || lagged == 0 {
		t.Errorf("one node: %d reader reconciles read a version the writer wrote, %d of them with a known lag", read, lagged)
	}
	checkNoFights(t, spans)
	if err := one.Stop(); err != nil { // flushes its spans to Jaeger
		t.Errorf("agent node-1: %v", err)
	}
	checkLinkedInJaeger(t, jaeger, began, proc["reader"].PID(), uid, writes, "node-1", "node-1")

	// Two nodes: an agent each, sharing nothing.
	began = time.Now()
	a, _ := startRunAgent(t, agentBin, env.Kubeconfig, "node-a", jaeger.OTLPAddr, exe["writer"])
	b, _ := startRunAgent(t, agentBin, env.Kubeconfig, "node-b", jaeger.OTLPAddr, exe["reader"])
	waitTracing(t, a, map[int]string{proc["writer"].PID(): "writer"})
	waitTracing(t, b, map[int]string{proc["reader"].PID(): "reader"})
	writes, spans = writeTarget("write-2", a, b)
	read = 0
	for _, s := range readSpans(t, b.StdoutPath(), false) {
		if _, ok := writeOf(writes, s.ResourceVersion); !ok {
			continue
		}
		read++
		if s.TriggerController != span.TriggerUnknown || s.TriggerLagNS != 0 {
			t.Errorf("two nodes: reader reconcile of target@%s: trigger %q, lag %d; the writer is on the other node: want unknown, 0", s.ResourceVersion, s.TriggerController, s.TriggerLagNS)
		}
	}
	if read == 0 {
		t.Errorf("two nodes: no reader reconcile read a version the writer wrote")
	}
	checkNoFights(t, spans)
	for name, p := range map[string]*testenv.Process{"node-a": a, "node-b": b} {
		if err := p.Stop(); err != nil {
			t.Errorf("agent %s: %v", name, err)
		}
	}
	checkLinkedInJaeger(t, jaeger, began, proc["reader"].PID(), uid, writes, "node-a", "node-b")
}

// targetWrite is a version of the target the writer's patch made, and when the patch returned.
type targetWrite struct {
	rv  string
	end time.Time
}

// targetWrites returns the successful writes of object uid by the reconciles of name in pid's
// spans, in order.
func targetWrites(spans []exporter.JSONSpan, pid int, name, uid string) []targetWrite {
	var out []targetWrite
	for _, s := range byPID(spans, pid) {
		if s.Name != name {
			continue
		}
		for _, cl := range s.Calls {
			if cl.UID == uid && cl.Verb == "PATCH" && cl.Status >= 200 && cl.Status < 300 && cl.ResourceVersion != "" {
				out = append(out, targetWrite{cl.ResourceVersion, cl.Start.Add(time.Duration(cl.DurationNS))})
			}
		}
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

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
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
// began and checks that each that read a version in writes links (read_version) to the
// span IDs derived from uid and that version, and that Jaeger holds that lifeline span as
// the writer's, exported from writerNode; the reconciles come from readerNode.
func checkLinkedInJaeger(t *testing.T, j *testenv.Jaeger, began time.Time, readerPID int, uid string, writes []targetWrite, writerNode, readerNode string) {
	t.Helper()
	traceID := lifeline.TraceID(uid)
	var lines []string
	testkit.WaitFor(t, "Jaeger links a reader reconcile to the writer's lifeline span ("+writerNode+" → "+readerNode+")", 60*time.Second, func() (bool, string) {
		all, _ := jaegerSpans{t, j, began}.all()
		lifelines := map[string]recvSpan{} // span ID → lifeline span of uid
		for _, s := range all {
			if bytes.Equal(s.span.GetTraceId(), traceID[:]) && s.span.GetKind() == tracepb.Span_SPAN_KIND_PRODUCER {
				lifelines[hex.EncodeToString(s.span.GetSpanId())] = s
			}
		}
		lines = lines[:0]
		linked := 0
		for _, s := range all {
			a := attrMap(s.span.GetAttributes())
			if attrInt(s.resource, "process.pid") != int64(readerPID) || attrStr(a, "k8s.object.uid") != uid || s.span.GetName() != "reconcile reader" {
				continue
			}
			rv := attrStr(a, "k8s.object.resource_version")
			if _, ok := writeOf(writes, rv); !ok {
				continue
			}
			if node := attrStr(s.resource, "k8s.node.name"); node != readerNode {
				t.Fatalf("reader reconcile of target@%s from node %q, want %q", rv, node, readerNode)
			}
			for _, l := range s.span.GetLinks() {
				if attrStr(attrMap(l.GetAttributes()), "reconscope.link.type") != "read_version" {
					continue
				}
				want := lifeline.SpanID(uid, rv)
				if !bytes.Equal(l.GetTraceId(), traceID[:]) || !bytes.Equal(l.GetSpanId(), want[:]) {
					t.Fatalf("reader reconcile of target@%s links to %x/%x, want the IDs derived from its UID and version %s/%s", rv, l.GetTraceId(), l.GetSpanId(), traceID, want)
				}
				ls, ok := lifelines[want.String()]
				if !ok {
					lines = append(lines, fmt.Sprintf("target@%s: link to %s, no such span in Jaeger", rv, want))
					continue
				}
				la := attrMap(ls.span.GetAttributes())
				writer, wnode := attrStr(la, "reconscope.lifeline.writer"), attrStr(ls.resource, "k8s.node.name")
				lines = append(lines, fmt.Sprintf("target@%s: reader on %s → lifeline span %s by %s on %s", rv, readerNode, want, writer, wnode))
				if writer != "writer" || wnode != writerNode || attrStr(la, "k8s.object.resource_version") != rv {
					t.Fatalf("the lifeline span target@%s links to was written by %q on %q (version %s), want writer on %s", rv, writer, wnode, attrStr(la, "k8s.object.resource_version"), writerNode)
				}
				linked++
			}
		}
		return linked > 0, strings.Join(lines, "; ")
	})
	t.Logf("Jaeger (%s → %s): %s", writerNode, readerNode, strings.Join(lines, "; "))
}
