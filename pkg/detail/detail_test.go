package detail

import (
	"errors"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/probes"
)

func TestParseRule(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Rule
		bad  bool
	}{
		{in: "deployment=calls", want: Rule{"deployment", probes.DetailCalls}},
		{in: "replica*=reconcile", want: Rule{"replica*", probes.DetailReconcile}},
		{in: "deployment", bad: true},
		{in: "=calls", bad: true},
		{in: "deployment=all", bad: true},
		{in: "[a=calls", bad: true},
	} {
		got, err := ParseRule(tt.in)
		if (err != nil) != tt.bad || (!tt.bad && got != tt.want) {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func TestStaticRules(t *testing.T) {
	p, err := New(Options{Default: probes.DetailReconcile, Rules: []Rule{{"deployment", probes.DetailCalls}, {"replica*", probes.DetailReconcile}, {"*", probes.DetailCalls}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for c, want := range map[string]probes.Detail{"deployment": probes.DetailCalls, "replicaset": probes.DetailReconcile, "job": probes.DetailCalls} {
		if got := p.Detail(c, now); got != want {
			t.Errorf("%s: %s, want %s (the first rule that matches)", c, got, want)
		}
	}
	if !p.Mixed() || !p.CallsAhead() {
		t.Errorf("Mixed %v, CallsAhead %v: want both", p.Mixed(), p.CallsAhead())
	}
	same, _ := New(Options{Default: probes.DetailCalls, Rules: []Rule{{"x", probes.DetailCalls}}})
	if same.Mixed() {
		t.Errorf("a rule that names the default level: mixed")
	}
}

// TestSwitches: a slow reconcile switches its controller for SwitchFor, at most MaxSwitched
// at once; a reconcile begun during a switch keeps detail calls after it ended; each switch
// and its end are reported once.
func TestSwitches(t *testing.T) {
	var got []string
	p, err := New(Options{Default: probes.DetailReconcile, Switches: true, SlowThreshold: time.Second, SwitchFor: time.Minute, MaxSwitched: 1,
		Logger: testkit.Quiet(), OnSwitch: func(c string, to probes.Detail, _ string) { got = append(got, c+"="+to.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	p.Observe("a", 999*time.Millisecond, t0)
	if p.Detail("a", t0) != probes.DetailReconcile {
		t.Fatalf("a reconcile under the threshold switched")
	}
	p.Observe("a", time.Second, t0)
	if p.Detail("a", t0.Add(time.Second)) != probes.DetailCalls || p.Detail("a", t0.Add(-time.Second)) != probes.DetailReconcile {
		t.Errorf("a slow reconcile: no switch from its time on")
	}
	p.Observe("b", 2*time.Second, t0)
	if p.Detail("b", t0) != probes.DetailReconcile {
		t.Errorf("b switched past MaxSwitched 1")
	}
	if err := p.Switch("b", 0, "test", t0); !errors.Is(err, ErrTooManySwitched) {
		t.Errorf("Switch past MaxSwitched: %v", err)
	}
	p.Observe("a", 5*time.Second, t0.Add(time.Second)) // switched already: no second report
	p.Expire(t0.Add(59 * time.Second))
	p.Expire(t0.Add(time.Minute))
	if p.Detail("a", t0.Add(time.Minute)) != probes.DetailReconcile {
		t.Errorf("a still at calls after its switch")
	}
	if p.Detail("a", t0.Add(30*time.Second)) != probes.DetailCalls {
		t.Errorf("a reconcile begun during the switch lost its detail once it ended")
	}
	if err := p.Switch("b", time.Second, "test", t0.Add(time.Minute)); err != nil {
		t.Errorf("Switch once a is back: %v", err)
	}
	want := []string{"a=calls", "a=reconcile", "b=calls"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("switches reported %v, want %v", got, want)
	}
	off, _ := New(Options{Default: probes.DetailReconcile, SlowThreshold: time.Second})
	off.Observe("a", time.Hour, t0)
	if off.Detail("a", t0) != probes.DetailReconcile || off.Switch("a", 0, "test", t0) == nil || off.Mixed() {
		t.Errorf("switches off: a switch happened, or the policy is mixed")
	}
}
