package detail

import (
	"errors"
	"slices"
	"strings"
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

// TestSetLevels: levels reloaded at a time apply to the reconciles begun from then on; one
// begun before keeps the level it began with; the policy is mixed from the start when it may be
// reloaded; a bad pattern changes nothing.
func TestSetLevels(t *testing.T) {
	p, err := New(Options{Default: probes.DetailReconcile, Reload: true})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Mixed() || p.CallsAhead() {
		t.Errorf("reloadable, all at reconcile: Mixed %v, CallsAhead %v; want mixed, not ahead", p.Mixed(), p.CallsAhead())
	}
	t0 := time.Now()
	reload := t0.Add(time.Minute)
	if err := p.SetLevels(probes.DetailReconcile, []Rule{{"deploy*", probes.DetailCalls}}, reload); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		controller string
		at         time.Time
		want       probes.Detail
	}{
		{"deployment", t0, probes.DetailReconcile}, // began before the reload
		{"deployment", reload, probes.DetailCalls},
		{"job", reload, probes.DetailReconcile},
	} {
		if got := p.Detail(tt.controller, tt.at); got != tt.want {
			t.Errorf("%s at %s: %s, want %s", tt.controller, tt.at.Sub(t0), got, tt.want)
		}
	}
	if !p.CallsAhead() || p.Static("deployment") != probes.DetailCalls {
		t.Errorf("after the reload: CallsAhead %v, deployment %s; want ahead, calls", p.CallsAhead(), p.Static("deployment"))
	}
	if err := p.SetLevels(probes.DetailCalls, []Rule{{"[x", probes.DetailCalls}}, reload.Add(time.Minute)); err == nil {
		t.Error("a bad pattern: no error")
	}
	if p.Static("job") != probes.DetailReconcile {
		t.Errorf("a refused reload changed the levels: job at %s", p.Static("job"))
	}
}

// TestConfig: the config file's detail section over the flags: a field it sets wins, one it
// does not set is the flag's; bad levels, globs and unknown fields are errors naming the field.
func TestConfig(t *testing.T) {
	flagRules := []Rule{{"job", probes.DetailCalls}}
	for _, tt := range []struct {
		in    string
		def   probes.Detail
		rules []Rule
		bad   string
	}{
		{in: `{}`, def: probes.DetailReconcile, rules: flagRules},
		{in: `{"default":"calls"}`, def: probes.DetailCalls, rules: flagRules},
		{in: `{"controllers":[{"controller":"deploy*","detail":"calls"},{"controller":"*","detail":"reconcile"}]}`, def: probes.DetailReconcile,
			rules: []Rule{{"deploy*", probes.DetailCalls}, {"*", probes.DetailReconcile}}},
		{in: `{"controllers":[]}`, def: probes.DetailReconcile, rules: []Rule{}},
		{in: `{"default":"all"}`, bad: "detail.default"},
		{in: `{"controllers":[{"controller":"x","detail":"everything"}]}`, bad: "detail.controllers[0].detail"},
		{in: `{"controllers":[{"controller":"[x","detail":"calls"}]}`, bad: "detail.controllers[0].controller"},
		{in: `{"level":"calls"}`, bad: "unknown field"},
	} {
		c, err := ParseConfig([]byte(tt.in))
		if tt.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tt.bad) {
				t.Errorf("%s: error %v, want one naming %s", tt.in, err, tt.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		def, rules, err := c.Levels(probes.DetailReconcile, flagRules)
		if err != nil || def != tt.def || !slices.Equal(rules, tt.rules) {
			t.Errorf("%s over --detail reconcile --detail-for job=calls: %s %v %v; want %s %v", tt.in, def, rules, err, tt.def, tt.rules)
		}
	}
}

// TestSwitchWhenP99: with SwitchWhenP99 one slow reconcile among a controller's last 100 does not
// switch it, a second one within them does; p99 is not taken before 100 reconciles.
func TestSwitchWhenP99(t *testing.T) {
	var got []string
	p, err := New(Options{Default: probes.DetailReconcile, Switches: true, SwitchWhen: SwitchWhenP99, SlowThreshold: 100 * time.Millisecond,
		Logger: testkit.Quiet(), OnSwitch: func(c string, to probes.Detail, _ string) { got = append(got, c+"="+to.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	fast, slow := time.Millisecond, 150*time.Millisecond
	p.Observe("a", slow, now)
	p.Observe("a", slow, now) // two slow among fewer than 100: p99 not taken yet
	for range P99Window - 3 {
		p.Observe("a", fast, now)
	}
	if len(got) != 0 {
		t.Fatalf("switched before 100 reconciles: %v", got)
	}
	p.Observe("a", fast, now) // 100 held, two slow: the second largest is slow
	if !slices.Equal(got, []string{"a=calls"}) {
		t.Fatalf("switches %v, want a=calls once 100 reconciles held two slow ones", got)
	}

	got = nil
	for range P99Window {
		p.Observe("b", fast, now)
	}
	p.Observe("b", slow, now) // one slow in the last 100
	for range P99Window - 1 {
		p.Observe("b", fast, now)
	}
	p.Observe("b", slow, now) // the first slow one just left the window: one slow again
	if len(got) != 0 {
		t.Fatalf("one slow reconcile in the last 100 switched: %v", got)
	}
	p.Observe("b", slow, now)
	if !slices.Equal(got, []string{"b=calls"}) {
		t.Errorf("switches %v, want b=calls at the second slow reconcile within 100", got)
	}
}
