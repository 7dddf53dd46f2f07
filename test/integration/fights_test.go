package integration

import (
	"context"
	"log/slog"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestControllerFight: two fixture processes, controllers alpha and beta, each claim one
// ConfigMap's data.owner for itself whenever it changes: a fight, which one tracer on the
// "node" detects with the right pair, within the default window (4 alternations in 60s), in
// spans of both writers, one log line and the fights counter. Meanwhile alpha alone creates a
// ConfigMap, then patches it and updates a Service's status again and again: not a fight,
// and nothing else is reported.
func TestControllerFight(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	env := testenv.Start(t, testenv.Options{})
	bin := testkit.Build(t, fixturePkg)
	dir := t.TempDir()
	alpha := testenv.StartProcess(t, "alpha", exec.Command(bin, "--kubeconfig", env.Kubeconfig,
		"--controller-name", "alpha", "--ground-truth", filepath.Join(dir, "alpha.jsonl")))
	beta := testenv.StartProcess(t, "beta", exec.Command(bin, "--kubeconfig", env.Kubeconfig,
		"--controller-name", "beta", "--namespace", "fight", "--ground-truth", filepath.Join(dir, "beta.jsonl")))

	s := &testkit.Sink{}
	logs := &testkit.LogBuffer{}
	tr, err := tracer.New(tracer.Options{Writer: s, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*testenv.Process{alpha, beta} {
		if _, err := tr.TracePID(p.PID()); err != nil {
			tr.Close()
			t.Fatalf("trace %d: %v", p.PID(), err)
		}
	}
	clock := tr.Clock()
	stopRun := testkit.Go(t, tr.Run)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if err := stopRun(); err != nil {
			t.Errorf("tracer: %v", err)
		}
		tr.Close()
	}
	t.Cleanup(stop)

	bg := context.Background()
	createScripted(t, env, "calm", nil)
	if err := env.Client.Create(bg, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "calm", Name: "calm-svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(bg, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "calm", Name: "calm",
		Annotations: map[string]string{"scripted.reconscope.io/script": "times:4;create:configmap/calm-child;patch:configmap/calm-child;status:service/calm-svc"}}}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	createScripted(t, env, "fight", map[string]string{"arena": "times:8;claim:configmap/arena"})
	for i := range 3 {
		time.Sleep(300 * time.Millisecond)
		touch(t, env.Client, "calm", "calm", string(rune('a'+i)))
	}
	arena := &corev1.ConfigMap{}
	// Without a fight the test goes on: the checks below say what is missing.
	testkit.Poll(60*time.Second, func() bool {
		for _, sp := range s.Snapshot() {
			for _, f := range sp.Fights {
				if f.Start {
					return true
				}
			}
		}
		return false
	})
	time.Sleep(3 * time.Second) // the fight runs out (times:8); let the last events drain
	if err := env.Client.Get(bg, client.ObjectKey{Namespace: "fight", Name: "arena"}, arena); err != nil {
		t.Fatal(err)
	}
	stop()
	spans := s.Snapshot()

	writes := map[string]int{}
	starts := 0
	fought := map[string]bool{}
	for _, sp := range spans {
		for _, c := range sp.Calls {
			if c.UID == string(arena.UID) && c.IsWrite() {
				writes[sp.Controller]++
			}
		}
		for _, f := range sp.Fights {
			if f.UID != string(arena.UID) {
				t.Errorf("%s's reconcile of %s/%s reported a fight over %s/%s (%s): %+v", sp.Controller, sp.Namespace, sp.Name, f.Namespace, f.Name, f.UID, f)
				continue
			}
			fought[sp.Controller] = true
			if !slices.Equal(f.Writers, []string{"alpha", "beta"}) || f.Resource != "configmaps" || f.Subresource != "" ||
				f.Namespace != "fight" || f.Name != "arena" || f.Alternations < 4 {
				t.Errorf("fight %+v: want alpha against beta over configmaps fight/arena, at least 4 alternations", f)
			}
			if opp := f.Opponents(sp.Controller); len(opp) != 1 || opp[0] == sp.Controller {
				t.Errorf("%s's fight: opponents %v", sp.Controller, opp)
			}
			if f.Start {
				starts++
				at := clock.Wall(f.At)
				t.Logf("fight detected %v after arena was created, by %s's write; %d alternations since %v before", at.Sub(created).Round(time.Millisecond), sp.Controller, f.Alternations, time.Duration(f.At-f.Since))
				if at.Sub(created) > span.DefaultFightWindow {
					t.Errorf("fight detected %v after the object was created: not within the window", at.Sub(created))
				}
			}
		}
	}
	t.Logf("writes of arena: %v; %d spans", writes, len(spans))
	// The calm case really happened: alpha created calm-child, then patched it and the
	// Service's status on every reconcile.
	calm := map[string]int{}
	for _, sp := range spans {
		for _, c := range sp.Calls {
			if sp.Controller == "alpha" && c.IsWrite() && c.Namespace == "calm" && c.UID != "" {
				calm[c.Verb+" "+c.Resource+"/"+c.Subresource]++
			}
		}
	}
	t.Logf("alpha's writes in calm: %v", calm)
	if calm["POST configmaps/"] != 1 || calm["PATCH configmaps/"] < 3 || calm["PATCH services/status"] < 3 {
		t.Errorf("alpha's writes in calm: %v, want a create, then at least 3 patches and 3 status updates", calm)
	}
	if starts != 1 {
		t.Errorf("%d fight episodes reported for arena, want 1", starts)
	}
	if !fought["alpha"] || !fought["beta"] {
		t.Errorf("fight events on the reconciles of %v, want both alpha's and beta's", fought)
	}

	// One structured log line per episode, naming the object, the writers and the subresource.
	lines := logLines(logs, "controller fight")
	if len(lines) != 1 || !strings.Contains(lines[0], `"name":"arena"`) || !strings.Contains(lines[0], `"writers":["alpha","beta"]`) ||
		!strings.Contains(lines[0], `"subresource":""`) || !strings.Contains(lines[0], `"uid":"`+string(arena.UID)+`"`) {
		t.Errorf("fight log lines: %q", lines)
	}

	// The counter, per writer and opponent.
	got := counters(t, spans, "reconscope_controller_fights_total")
	want := map[string]float64{"controller=alpha,opponent=beta,resource=configmaps": 1, "controller=beta,opponent=alpha,resource=configmaps": 1}
	if !maps.Equal(got, want) {
		t.Errorf("reconscope_controller_fights_total: %v, want %v", got, want)
	}
}
