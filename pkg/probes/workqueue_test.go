package probes

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/reconscope/reconscope/pkg/symbols"
)

func TestShapeOf(t *testing.T) {
	for _, tt := range []struct{ fn, want string }{
		{"k8s.io/client-go/util/workqueue.(*Typed[go.shape.*k8s.io/kubernetes/pkg/controller/garbagecollector.event]).Get", "*garbagecollector.event"},
		{"k8s.io/client-go/util/workqueue.(*Typed[go.shape.*main.ev]).Done", "*main.ev"},
		{"k8s.io/client-go/util/workqueue.(*Typed[go.shape.int]).Done", "int"},
		{"k8s.io/client-go/util/workqueue.(*Typed[go.shape.struct { A int; B string }]).Done", "struct { A int; B string }"},
		{"k8s.io/client-go/util/workqueue.(*Typed[go.shape.*uint8]).Done", ""},
		{"main.main", ""},
	} {
		if got := shapeOf(tt.fn); got != tt.want {
			t.Errorf("shapeOf(%q) = %q, want %q", tt.fn, got, tt.want)
		}
	}
}

// workQueueShapes are the Get shape bodies of the fixture's queues, by the probe layout that
// must claim each.
var workQueueShapes = map[string]string{
	"go.shape.string": "string",
	"go.shape.struct { Namespace string; Name string }": "struct { Namespace string; Name string }",
	"go.shape.*main.event":                              "*main.event",
}

// TestWorkQueuePlan: in a program of client-go work queues (string, NamespacedName and pointer
// items), plain and stripped, each queue shape gets its two sites, both at instructions the
// kernel emulates: Get's one direct call of a runtime map insert, Done's entry; and the
// queue's name and the requeues are probed.
func TestWorkQueuePlan(t *testing.T) {
	for _, ld := range []string{"", "-s -w"} {
		plan := planOf(t, buildWith(t, "local", "github.com/reconscope/reconscope/test/fixtures/workqueue-controller", ld))
		found := map[string]int{}
		for _, s := range plan.Sites {
			if s.Probe.ID != "client-go/workqueue" {
				continue
			}
			shape := strings.TrimSuffix(strings.TrimPrefix(s.Function.Name, "k8s.io/client-go/util/workqueue.(*Typed["), "]).Get")
			if _, ok := workQueueShapes[shape]; !ok {
				continue
			}
			found[shape]++
			switch s.Kind {
			case SiteEntry:
				if !strings.HasPrefix(s.Insn, "CALL runtime.mapassign") || s.In.Name != "" {
					t.Errorf("%q: entry site %s `%s`, want Get's call of runtime.mapassign…", shape, s.Where(), s.Insn)
				}
			case SiteReturn:
				if s.Insn != "PUSHQ BP" || !strings.HasSuffix(s.In.Name, "]).Done") {
					t.Errorf("%q: return site %s `%s`, want Done's entry PUSHQ BP", shape, s.Where(), s.Insn)
				}
			}
		}
		for shape := range workQueueShapes {
			if found[shape] != 2 {
				t.Errorf("ldflags %q: %d sites for queue shape %s, want 2 (plan: %s; missing: %v)", ld, found[shape], shape, plan, plan.Missing)
			}
		}
		for _, id := range []string{"client-go/workqueue-name", "client-go/workqueue-requeue"} {
			if !strings.Contains(plan.String(), id) {
				t.Errorf("ldflags %q: no %s site: %s", ld, id, plan)
			}
		}
	}
}

// TestWorkQueueLayoutUnknown: where Get's code does not have the shape the bracket needs, the
// plan says "queue layout unknown" and attaches neither of its sites.
func TestWorkQueueLayoutUnknown(t *testing.T) {
	var catalog []*Probe
	for _, p := range Catalog() {
		if p.Bracket != nil {
			c := *p
			c.Bracket = &Bracket{Call: regexp.MustCompile(`^runtime\.noSuchFunction$`), End: p.Bracket.End}
			p = &c
		}
		catalog = append(catalog, p)
	}
	bin, err := symbols.Open(buildWith(t, "local", "github.com/reconscope/reconscope/test/fixtures/workqueue-controller", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	// The fixture has nothing else to trace.
	plan, err := NewPlan(bin, catalog)
	if !errors.Is(err, ErrNothingToTrace) {
		t.Errorf("plan: %v, want %v", err, ErrNothingToTrace)
	}
	for _, s := range plan.Sites {
		if s.Probe.ID == "client-go/workqueue" {
			t.Errorf("site %s of %s attached", s.Where(), s.Probe.ID)
		}
	}
	said := false
	for _, m := range plan.Missing {
		said = said || m.ProbeID == "client-go/workqueue" && strings.Contains(m.Reason, "queue layout unknown")
	}
	if !said || plan.QueueLayoutUnknown() == "" {
		t.Errorf("no \"queue layout unknown\" among the missing: %+v", plan.Missing)
	}
}
