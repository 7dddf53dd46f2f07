package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// tee writes each span to every writer.
type tee []exporter.Writer

func (w tee) Write(s *span.Span) error {
	for _, x := range w {
		if err := x.Write(s); err != nil {
			return err
		}
	}
	return nil
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return m
}

// The documented derivation (docs/lifelines.md), computed here independently of pkg/lifeline.
func lifelineTraceID(uid string) string {
	sum := sha256.Sum256([]byte("reconscope.lifeline.v1\x00" + uid))
	return hex.EncodeToString(sum[:16])
}

func versionSpanID(uid, rv string) string {
	sum := sha256.Sum256([]byte("reconscope.version.v1\x00" + uid + "\x00" + rv))
	return hex.EncodeToString(sum[:8])
}

// TestLifelinesAcrossControllers traces a stripped kube-controller-manager exporting over OTLP
// to a real gRPC receiver while a Deployment is created: the deployment controller's create of
// the ReplicaSet is a span in the ReplicaSet's lifeline trace (IDs derived from the API
// server's UID and the version the create made), and the replicaset controller's reconcile
// that read that version links to it: one causal graph across two controllers, joined by
// derived IDs only.
func TestLifelinesAcrossControllers(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	env := testenv.Start(t, testenv.Options{ControllerManager: []string{"replicaset", "deployment"}, StrippedControllerManager: true})
	lt := startLifelineTracer(t, env.ControllerManagerPID)
	recv, s := lt.recv, lt.sink
	const ns = "lifelines"
	c, bg := env.Client, context.Background()
	if err := c.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	seen := watchVersions(t, env, ns)
	dep := createWeb(t, c, ns)
	time.Sleep(1500 * time.Millisecond)
	lt.stop(t)
	versions := seen()
	var rsList appsv1.ReplicaSetList
	if err := c.List(bg, &rsList, client.InNamespace(ns)); err != nil || len(rsList.Items) != 1 {
		t.Fatalf("replicasets: %v (%d)", err, len(rsList.Items))
	}
	rsUID := string(rsList.Items[0].UID)

	got := recv.Spans()
	byID := map[string]*tracepb.Span{}
	for _, sp := range got {
		byID[hex.EncodeToString(sp.GetSpanId())] = sp
	}
	var lines []string
	var rsCreate *tracepb.Span
	lifelines := 0
	for _, sp := range got {
		a := attrs(sp.GetAttributes())
		if sp.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER {
			continue
		}
		lifelines++
		uid, rv := a["k8s.object.uid"], a["k8s.object.resource_version"]
		lines = append(lines, fmt.Sprintf("lifeline %s by %s: %s@%s trace %x span %x", sp.GetName(), a["reconscope.lifeline.writer"], uid, rv, sp.GetTraceId(), sp.GetSpanId()))
		// Every lifeline span is a version the API server had, under the derived IDs.
		if !versions[objectVersion{uid, rv}] {
			t.Errorf("lifeline span %s: %s@%s is no version the API server had", sp.GetName(), uid, rv)
		}
		if hex.EncodeToString(sp.GetTraceId()) != lifelineTraceID(uid) || hex.EncodeToString(sp.GetSpanId()) != versionSpanID(uid, rv) {
			t.Errorf("lifeline span %s of %s@%s: IDs %x/%x, want the derived %s/%s", sp.GetName(), uid, rv, sp.GetTraceId(), sp.GetSpanId(), lifelineTraceID(uid), versionSpanID(uid, rv))
		}
		// ... linked to the call span that wrote it.
		w := linksOfType(sp, "writer")
		if len(w) != 1 || byID[hex.EncodeToString(w[0].GetSpanId())] == nil || byID[hex.EncodeToString(w[0].GetSpanId())].GetName() != sp.GetName() {
			t.Errorf("lifeline span %s of %s@%s: writer links %v", sp.GetName(), uid, rv, w)
		}
		if uid == rsUID && sp.GetName() == "POST replicasets" && a["reconscope.lifeline.writer"] == "deployment" {
			rsCreate = sp
		}
	}
	if rsCreate == nil {
		t.Fatalf("no lifeline span of the deployment controller's create of ReplicaSet %s among %d:\n%s", rsUID, lifelines, strings.Join(lines, "\n"))
	}
	// The replicaset controller's reconcile of the version the create made links to it.
	triggered := 0
	for _, sp := range got {
		a := attrs(sp.GetAttributes())
		if sp.GetName() != "reconcile replicaset" {
			continue
		}
		if a["k8s.object.uid"] == "" && sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR && len(childrenOf(got, sp)) == 0 {
			continue // failed before reading its object (see TestKubeControllerManager)
		}
		if a["k8s.object.uid"] != rsUID {
			t.Errorf("replicaset reconcile with uid %q, the API server's is %q", a["k8s.object.uid"], rsUID)
		}
		for _, l := range linksOfType(sp, "read_version") {
			lines = append(lines, fmt.Sprintf("reconcile replicaset read %s@%s", attrs(l.GetAttributes())["k8s.object.uid"], attrs(l.GetAttributes())["k8s.object.resource_version"]))
			if string(l.GetTraceId()) == string(rsCreate.GetTraceId()) && string(l.GetSpanId()) == string(rsCreate.GetSpanId()) {
				triggered++
			}
		}
	}
	if triggered == 0 {
		t.Errorf("no replicaset reconcile links to the deployment controller's create (%x/%x)", rsCreate.GetTraceId(), rsCreate.GetSpanId())
	}

	// Writers, on the spans themselves: each reconcile that read a version a traced write made
	// names that write's controller as its read version writer; a version no traced write made
	// (this test's own create) is unknown. Its trigger controller is the writer of the most
	// recent watch event among its triggers, with the lag from that write's return to its start
	// when it began after it (the watch may deliver a version before its writer has the
	// response: no lag then). The replicaset reconcile triggered by the deployment controller's
	// create of the ReplicaSet names deployment.
	type write struct {
		controller string
		end        uint64
	}
	writes := map[objectVersion]write{}
	for _, sp := range s.Snapshot() {
		for _, cl := range sp.Calls {
			if cl.Kind == span.CallAPI && cl.IsWrite() && cl.UID != "" && cl.Status < 300 &&
				!(cl.UID == sp.UID && cl.ResourceVersion == sp.ResourceVersion) {
				writes[objectVersion{cl.UID, cl.ResourceVersion}] = write{sp.Controller, cl.Start + uint64(cl.Duration)}
			}
		}
	}
	byDeployment, lagged, unknown := 0, 0, 0
	for _, sp := range s.Snapshot() {
		lines = append(lines, fmt.Sprintf("%s %s@%s read version writer %q trigger %q lag %v (known %v) triggers %+v", sp.Controller, sp.UID, sp.ResourceVersion, sp.ReadVersionWriter, sp.TriggerController, sp.TriggerLag, sp.TriggerLagKnown, sp.Triggers))
		// read_version_writer: the writer of the version read.
		if sp.UID != "" && sp.ResourceVersion != "" {
			w, ok := writes[objectVersion{sp.UID, sp.ResourceVersion}]
			switch {
			case !ok:
				if sp.ReadVersionWriter != span.TriggerUnknown {
					t.Errorf("%s reconcile of %s@%s, a version no traced write made: read version writer %q, want unknown", sp.Controller, sp.UID, sp.ResourceVersion, sp.ReadVersionWriter)
				}
				if sp.UID == string(dep.UID) && sp.ResourceVersion == dep.ResourceVersion {
					unknown++
				}
			case sp.ReadVersionWriter != w.controller:
				t.Errorf("%s reconcile of %s@%s: read version writer %q, the version was written by %s", sp.Controller, sp.UID, sp.ResourceVersion, sp.ReadVersionWriter, w.controller)
			}
		}
		// trigger_controller: the writer of the most recent watch event among the triggers.
		var last *span.Trigger
		for i := range sp.Triggers {
			if sp.Triggers[i].Event != "" {
				last = &sp.Triggers[i]
			}
		}
		if last == nil {
			if sp.TriggerController != "" && sp.TriggersDropped == 0 {
				t.Errorf("%s reconcile of %s without a watch event among its triggers: trigger %q", sp.Controller, sp.Name, sp.TriggerController)
			}
			continue
		}
		w, ok := writes[objectVersion{last.Object.UID, last.Object.ResourceVersion}]
		end := sp.Start + uint64(sp.Duration)
		switch {
		case !ok || (w.end > end && sp.TriggerController == span.TriggerUnknown): // not written here, or not yet when it ended
			if sp.TriggerController != span.TriggerUnknown || sp.TriggerLagKnown {
				t.Errorf("%s reconcile of %s, triggered by %s@%s no traced write made: trigger %q (lag known %v), want unknown", sp.Controller, sp.Name, last.Object.UID, last.Object.ResourceVersion, sp.TriggerController, sp.TriggerLagKnown)
			}
		case sp.TriggerController != w.controller:
			t.Errorf("%s reconcile of %s: trigger %q, its last event's version %s@%s was written by %s", sp.Controller, sp.Name, sp.TriggerController, last.Object.UID, last.Object.ResourceVersion, w.controller)
		case sp.Start >= w.end && (!sp.TriggerLagKnown || sp.TriggerLag != time.Duration(sp.Start-w.end) || sp.TriggerLag > 10*time.Second):
			t.Errorf("%s reconcile of %s: lag %v (known %v), want %v", sp.Controller, sp.Name, sp.TriggerLag, sp.TriggerLagKnown, time.Duration(sp.Start-w.end))
		case sp.Start < w.end && sp.TriggerLagKnown:
			t.Errorf("%s reconcile of %s began before its trigger's write returned, yet has lag %v", sp.Controller, sp.Name, sp.TriggerLag)
		}
		if ok && sp.TriggerLagKnown {
			lagged++
		}
		if sp.Controller == "replicaset" && sp.UID == rsUID && sp.TriggerController == "deployment" {
			byDeployment++
		}
	}
	if byDeployment == 0 || lagged == 0 || unknown == 0 {
		t.Errorf("%d replicaset reconciles triggered by the deployment controller, %d reconciles with a lag, %d deployment reconciles of the test's own version", byDeployment, lagged, unknown)
	}
	for _, sp := range got {
		a := attrs(sp.GetAttributes())
		if sp.GetName() != "reconcile replicaset" || a["k8s.object.uid"] != rsUID {
			continue
		}
		if a["reconscope.read_version.writer"] == "" {
			t.Errorf("OTLP replicaset reconcile without reconscope.read_version.writer: %v", a)
		}
		// A reconcile with a watch event among its triggers (not only a retry) names its writer.
		if strings.Contains(a["reconscope.triggers"], " by ") && a["reconscope.trigger.controller"] == "" {
			t.Errorf("OTLP replicaset reconcile triggered by %q without reconscope.trigger.controller", a["reconscope.triggers"])
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("%d spans received:\n%s", len(got), strings.Join(lines, "\n"))
	}
}

// childrenOf returns the spans whose parent is sp.
func childrenOf(all []*tracepb.Span, sp *tracepb.Span) []*tracepb.Span {
	var out []*tracepb.Span
	for _, c := range all {
		if string(c.GetParentSpanId()) == string(sp.GetSpanId()) && string(c.GetTraceId()) == string(sp.GetTraceId()) {
			out = append(out, c)
		}
	}
	return out
}

// lifelineTracer is a tracer of the given processes exporting over OTLP to a real gRPC receiver,
// its spans also kept in a sink.
type lifelineTracer struct {
	recv *testkit.OTLPReceiver
	sink *testkit.Sink
	stop func(t *testing.T) // stops tracing and flushes OTLP
}

func startLifelineTracer(t *testing.T, pids ...int) lifelineTracer {
	t.Helper()
	recv := testkit.StartOTLPReceiver(t)
	addr := recv.Addr
	s := &testkit.Sink{}
	var w tee
	quiet := testkit.Quiet()
	tr, err := tracer.New(tracer.Options{Writer: &w, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	otlp, err := exporter.NewOTLP(context.Background(), exporter.OTLPOptions{Endpoint: addr, Protocol: exporter.ProtocolGRPC,
		Insecure: true, Clock: tr.Clock(), BatchTimeout: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w = tee{s, otlp}
	for _, pid := range pids {
		if _, err := tr.TracePID(pid); err != nil {
			t.Fatalf("trace pid %d: %v", pid, err)
		}
	}
	stop := testkit.Go(t, tr.Run)
	return lifelineTracer{recv: recv, sink: s, stop: func(t *testing.T) {
		t.Helper()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := otlp.Shutdown(sctx); err != nil {
			t.Fatalf("flush OTLP: %v", err)
		}
	}}
}

// linksOfType returns sp's links of reconscope.link.type typ.
func linksOfType(sp *tracepb.Span, typ string) []*tracepb.Span_Link {
	var ls []*tracepb.Span_Link
	for _, l := range sp.GetLinks() {
		if attrs(l.GetAttributes())["reconscope.link.type"] == typ {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestLifelineFromOperatorToControllerManager: the scripted fixture (a controller-runtime
// operator) creates a Deployment; kube-controller-manager's deployment controller reconciles
// it. The fixture's create is a lifeline span in the Deployment's lifeline trace (IDs derived
// from the API server's UID and the version the create returned), written by "scripted", and the
// deployment reconcile that read that version links to it: the causal chain from an operator
// to kube-controller-manager, through derived IDs only. Its UID is the API server's.
func TestLifelineFromOperatorToControllerManager(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	const ns = "operator-lifeline"
	env, truth, lt := startOperatorAndControllerManager(t, ns)
	c, bg := env.Client, context.Background()
	if err := c.Create(bg, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "maker",
		Annotations: map[string]string{"scripted.reconscope.io/script": "times:1;create:deployment/made"}}}); err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	testkit.WaitFor(t, "a Deployment made with its ReplicaSet", 60*time.Second, func() (bool, string) {
		var rs appsv1.ReplicaSetList
		err := c.Get(bg, client.ObjectKey{Namespace: ns, Name: "made"}, &dep)
		return err == nil && c.List(bg, &rs, client.InNamespace(ns)) == nil && len(rs.Items) > 0, fmt.Sprintf("the Deployment's get: %v", err)
	})
	time.Sleep(1500 * time.Millisecond)
	lt.stop(t)

	// The version the fixture's create made, from its own record (the API server's response),
	// not from the agent's spans.
	recs, err := groundtruth.ReadFile(truth)
	if err != nil {
		t.Fatal(err)
	}
	var created string
	for _, r := range recs {
		for _, c := range r.Calls {
			if c.Verb == "create" && c.Kind == "deployment" && c.Name == "made" && c.ResourceVersion != "" {
				if c.UID != string(dep.UID) {
					t.Errorf("the fixture's record of its create of deployments/made: uid %q, the API server's is %q", c.UID, dep.UID)
				}
				created = c.ResourceVersion
			}
		}
	}
	if created == "" {
		t.Fatalf("the fixture's ground truth (%d reconciles) has no successful create of deployments/made", len(recs))
	}
	// The agent saw that create: its span's call names the same UID and version.
	traced := false
	for _, sp := range lt.sink.Snapshot() {
		for _, cl := range sp.Calls {
			if sp.Controller == "scripted" && cl.Kind == span.CallAPI && cl.Verb == "POST" && cl.Resource == "deployments" && cl.Status == 201 {
				if cl.UID != string(dep.UID) || cl.ResourceVersion != created {
					t.Errorf("the traced create of deployments/made: %s@%s, the fixture's record says %s@%s", cl.UID, cl.ResourceVersion, dep.UID, created)
				}
				traced = true
			}
		}
	}
	if !traced {
		t.Fatalf("no traced create of deployments/made by the fixture")
	}
	recv := lt.recv
	got := recv.Spans()
	// The IDs by the documented derivation, computed here, not by pkg/lifeline (the code under
	// test): an agent that derives them otherwise fails here.
	wantTrace, wantSpan := lifelineTraceID(string(dep.UID)), versionSpanID(string(dep.UID), created)
	var lifelineSpan *tracepb.Span
	for _, sp := range got {
		if sp.GetKind() == tracepb.Span_SPAN_KIND_PRODUCER && hex.EncodeToString(sp.GetTraceId()) == wantTrace && hex.EncodeToString(sp.GetSpanId()) == wantSpan {
			lifelineSpan = sp
		}
	}
	if lifelineSpan == nil {
		t.Fatalf("no lifeline span %s/%s (docs/lifelines.md's derivation) for the fixture's create of Deployment %s@%s", wantTrace, wantSpan, dep.UID, created)
	}
	if w := attrs(lifelineSpan.GetAttributes())["reconscope.lifeline.writer"]; w != "scripted" {
		t.Errorf("the lifeline span of the create names writer %q, want scripted", w)
	}
	var lines []string
	linked := 0
	for _, sp := range got {
		a := attrs(sp.GetAttributes())
		if sp.GetName() != "reconcile deployment" || a["k8s.object.name"] != "made" {
			continue
		}
		if a["k8s.object.uid"] != string(dep.UID) {
			t.Errorf("deployment reconcile of made with uid %q, the API server's is %q", a["k8s.object.uid"], dep.UID)
		}
		for _, l := range linksOfType(sp, "read_version") {
			la := attrs(l.GetAttributes())
			lines = append(lines, fmt.Sprintf("deployment reconcile read %s@%s (trigger %s)", la["k8s.object.uid"], la["k8s.object.resource_version"], a["reconscope.trigger.controller"]))
			if bytes.Equal(l.GetTraceId(), lifelineSpan.GetTraceId()) && bytes.Equal(l.GetSpanId(), lifelineSpan.GetSpanId()) {
				linked++
			}
		}
	}
	if linked == 0 {
		t.Errorf("no deployment reconcile of made links to the fixture's create (version %s):\n%s", created, strings.Join(lines, "\n"))
	}
	// Why kube-controller-manager's deployment controller ran: the watch event of the fixture's
	// create, linked as a trigger to the fixture's lifeline span, named with its writer.
	triggered := 0
	for _, sp := range got {
		if sp.GetName() != "reconcile deployment" || attrs(sp.GetAttributes())["k8s.object.name"] != "made" {
			continue
		}
		for _, l := range linksOfType(sp, "trigger") {
			la := attrs(l.GetAttributes())
			if bytes.Equal(l.GetTraceId(), lifelineSpan.GetTraceId()) && bytes.Equal(l.GetSpanId(), lifelineSpan.GetSpanId()) &&
				la["reconscope.trigger.kind"] == "event" && la["reconscope.trigger.event"] == "add" && la["reconscope.trigger.writer"] == "scripted" &&
				la["k8s.object.kind"] == "Deployment" {
				triggered++
			}
		}
	}
	if triggered == 0 {
		t.Errorf("no deployment reconcile of made has a trigger link to the fixture's create (version %s)", created)
	}
	t.Logf("the fixture created Deployment made (uid %s) at version %s; %d deployment reconciles link to its lifeline span: %s", dep.UID, created, linked, strings.Join(lines, "; "))
}
