// Package detail decides, per controller, how much of each reconcile the agent probes
// (probes.Detail): a default level, per-controller overrides by glob (--detail-for, the
// config file's detail.controllers, reloaded at run time), and bounded, time-limited switches
// of one controller to detail calls, made automatically when one of its reconciles is slow
// (or its p99 over its last reconciles is) or on demand. It is pure: the tracer asks it each
// span's level and applies the answer in the kernel.
package detail

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reconscope/reconscope/pkg/probes"
)

// DefaultSwitchFor is Options.SwitchFor's default: long enough to see a slow spell's calls,
// short enough that the probes' cost does not stay.
const DefaultSwitchFor = 5 * time.Minute

// DefaultMaxSwitched is Options.MaxSwitched's default.
const DefaultMaxSwitched = 2

// ErrTooManySwitched means MaxSwitched controllers are switched to detail calls already.
var ErrTooManySwitched = errors.New("too many controllers switched to detail calls: wait for a switch to end, or raise --detail-switch-max")

// Rule gives the controllers whose name matches Pattern (a glob, as --controller's) a level.
type Rule struct {
	Pattern string
	Detail  probes.Detail
}

// ParseRule parses --detail-for's value, 'GLOB=LEVEL' ('deployment=calls').
func ParseRule(s string) (Rule, error) {
	pat, lvl, ok := strings.Cut(s, "=")
	if !ok {
		return Rule{}, fmt.Errorf("detail rule %q: want GLOB=LEVEL, e.g. 'deployment=calls'", s)
	}
	r := Rule{Pattern: pat}
	if err := r.Detail.Set(lvl); err != nil {
		return Rule{}, fmt.Errorf("detail rule %q: %w", s, err)
	}
	if err := checkPattern(pat); err != nil {
		return Rule{}, fmt.Errorf("detail rule %q: %w", s, err)
	}
	return r, nil
}

func checkPattern(p string) error {
	if p == "" {
		return errors.New("empty pattern (a controller name or a glob such as \"replica*\")")
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("pattern %q: %w", p, err)
	}
	return nil
}

// Options configures a Policy.
type Options struct {
	// Default is the level of controllers no rule names (--detail).
	Default probes.Detail
	// Rules override Default; the first whose pattern matches a controller's name wins.
	Rules []Rule
	// SlowThreshold, when positive, switches a controller at detail reconcile to detail calls
	// for SwitchFor when one of its reconciles lasts at least this long (--slow-threshold), or,
	// with SwitchWhen SwitchWhenP99, when its p99 over its last P99Window reconciles does.
	SlowThreshold time.Duration
	// SwitchWhen says what of a controller's reconciles SlowThreshold is held to: one reconcile
	// (SwitchWhenReconcile, the default) or their p99 (SwitchWhenP99).
	SwitchWhen SwitchWhen
	// Switches allows switches at all (automatic or on demand, Policy.Switch). SlowThreshold
	// needs it.
	Switches bool
	// SwitchFor is how long a switch lasts; zero means DefaultSwitchFor.
	SwitchFor time.Duration
	// MaxSwitched bounds the controllers switched at once; zero means DefaultMaxSwitched.
	MaxSwitched int
	// Logger receives one line per switch and per switch back.
	Logger *slog.Logger
	// OnSwitch, when set, is told of each switch (to DetailCalls) and switch back (to
	// DetailReconcile): the agent counts them (reconscope_detail_switches_total).
	OnSwitch func(controller string, to probes.Detail, why string)
	// Reload says that Default and Rules may change at run time (Policy.SetLevels, the config
	// file's detail section): the policy is Mixed from the start, so that the tracer can put any
	// controller at either level later.
	Reload bool
}

// SwitchWhen is what --slow-threshold is held to for an automatic switch (--detail-switch-when).
type SwitchWhen uint8

const (
	// SwitchWhenReconcile switches a controller when one of its reconciles lasts SlowThreshold.
	SwitchWhenReconcile SwitchWhen = iota
	// SwitchWhenP99 switches a controller when the p99 of its last P99Window reconciles' durations
	// reaches SlowThreshold: one outlier (a GC pause, one slow API answer) does not switch it,
	// a slow spell does.
	SwitchWhenP99
)

var switchWhenNames = []string{SwitchWhenReconcile: "reconcile", SwitchWhenP99: "p99"}

// String is the flag's value.
func (w SwitchWhen) String() string {
	if int(w) < len(switchWhenNames) {
		return switchWhenNames[w]
	}
	return fmt.Sprintf("SwitchWhen(%d)", uint8(w))
}

// Set parses the flag's value.
func (w *SwitchWhen) Set(s string) error {
	n := slices.Index(switchWhenNames, s)
	if n < 0 {
		return fmt.Errorf("want reconcile or p99, not %q", s)
	}
	*w = SwitchWhen(n)
	return nil
}

// Type names the flag's value in --help (pflag.Value).
func (w *SwitchWhen) Type() string { return "when" }

// P99Window is how many of a controller's last reconciles its p99 is taken over
// (SwitchWhenP99): the fewest whose p99 is not their maximum (nearest rank: the second largest of
// 100), so one slow reconcile never decides alone; a count and not a time, so that the figure is
// a p99 whatever the controller's rate (a minute holds five reconciles of a quiet controller and
// thousands of a busy one), in 800 bytes per controller. A controller's p99 is taken once it
// has had P99Window reconciles.
const P99Window = 100

// levels are a policy's Default and Rules, since a time (SetLevels).
type levels struct {
	def   probes.Detail
	rules []Rule
	since time.Time
}

func (l *levels) static(controller string) probes.Detail {
	for _, r := range l.rules {
		if ok, _ := path.Match(r.Pattern, controller); ok {
			return r.Detail
		}
	}
	return l.def
}

// Policy is the per-controller detail. Its methods are safe for concurrent use.
type Policy struct {
	opts Options

	mu       sync.Mutex
	switched map[string]window // controller -> its switch to detail calls
	ended    map[string]window // controller -> its last switch that ended, for reconciles begun in it
	// now and before are the levels (Default, Rules) since the last SetLevels, and those
	// before it, for the reconciles begun before it.
	now, before levels
	recent      map[string]*durations // controller -> its last reconciles (SwitchWhenP99)
}

// durations are a controller's last P99Window reconcile durations, a ring.
type durations struct {
	d    [P99Window]time.Duration
	n    int // held, up to P99Window
	next int
}

func (r *durations) add(d time.Duration) {
	r.d[r.next] = d
	r.next = (r.next + 1) % P99Window
	r.n = min(r.n+1, P99Window)
}

// p99 is the nearest-rank 99th percentile of the durations held (all P99Window): the
// second largest.
func (r *durations) p99() time.Duration {
	var first, second time.Duration
	for _, d := range r.d[:r.n] {
		switch {
		case d >= first:
			first, second = d, first
		case d > second:
			second = d
		}
	}
	return second
}

// window is a switch's time: from its start to its end, excluded.
type window struct{ from, until time.Time }

func (w window) holds(t time.Time) bool { return !t.Before(w.from) && t.Before(w.until) }

// New checks opts' patterns and returns the policy.
func New(opts Options) (*Policy, error) {
	for _, r := range opts.Rules {
		if err := checkPattern(r.Pattern); err != nil {
			return nil, err
		}
	}
	if opts.SwitchFor <= 0 {
		opts.SwitchFor = DefaultSwitchFor
	}
	if opts.MaxSwitched <= 0 {
		opts.MaxSwitched = DefaultMaxSwitched
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	lv := levels{def: opts.Default, rules: opts.Rules}
	return &Policy{opts: opts, switched: map[string]window{}, ended: map[string]window{}, now: lv, before: lv, recent: map[string]*durations{}}, nil
}

// SetLevels replaces Default and Rules from now on (the config file's detail section, reloaded):
// a reconcile begun before keeps the level it began with (Detail), one begun after has the
// new one; the tracer brings the kernel to it at its next housekeeping. It fails, changing
// nothing, on a bad pattern.
func (p *Policy) SetLevels(def probes.Detail, rules []Rule, now time.Time) error {
	for _, r := range rules {
		if err := checkPattern(r.Pattern); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.before = p.now
	p.now = levels{def: def, rules: slices.Clone(rules), since: now}
	p.mu.Unlock()
	return nil
}

// Static is the controller's level by Default and Rules, switches aside.
func (p *Policy) Static(controller string) probes.Detail {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now.static(controller)
}

// staticAt is the controller's level by the Default and Rules of time t: those before the last
// SetLevels for a t before it.
func (p *Policy) staticAt(controller string, t time.Time) probes.Detail {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.Before(p.now.since) {
		return p.before.static(controller)
	}
	return p.now.static(controller)
}

// Detail is the controller's level at t: DetailCalls while a switch lasts (or lasted: t may be
// the start of a reconcile that ended since, and a reconcile has the level it began with),
// else its level by the Default and Rules of time t.
func (p *Policy) Detail(controller string, t time.Time) probes.Detail {
	p.mu.Lock()
	w, ok := p.switched[controller]
	e, eok := p.ended[controller]
	p.mu.Unlock()
	if (ok && w.holds(t)) || (eok && e.holds(t)) {
		return probes.DetailCalls
	}
	return p.staticAt(controller, t)
}

// Mixed reports whether controllers may have different levels: a rule names a level other
// than Default, switches are allowed, or the levels may be reloaded. Only then are the calls
// probes attached gated.
func (p *Policy) Mixed() bool {
	if p.opts.Reload {
		return true
	}
	p.mu.Lock()
	lv := p.now
	p.mu.Unlock()
	if p.opts.Switches && lv.def == probes.DetailReconcile {
		return true
	}
	return slices.ContainsFunc(lv.rules, func(r Rule) bool { return r.Detail != lv.def })
}

// CallsAhead reports whether a controller not known yet may be at detail calls from its
// first reconcile: Default is calls, or a rule says calls. The kernel then records the calls
// of controller instances it was not told of (their spans are stripped for the others).
func (p *Policy) CallsAhead() bool {
	p.mu.Lock()
	lv := p.now
	p.mu.Unlock()
	return lv.def == probes.DetailCalls || slices.ContainsFunc(lv.rules, func(r Rule) bool { return r.Detail == probes.DetailCalls })
}

// Observe is told of each finished reconcile of controller: a reconcile of at least
// SlowThreshold (with SwitchWhenP99: the p99 of its last P99Window reconciles reaching it)
// switches a controller at detail reconcile to detail calls (when fewer than MaxSwitched are).
func (p *Policy) Observe(controller string, d time.Duration, now time.Time) {
	if !p.opts.Switches || p.opts.SlowThreshold <= 0 {
		return
	}
	why := fmt.Sprintf("a reconcile took %s (slow threshold %s)", d.Round(time.Microsecond), p.opts.SlowThreshold)
	if p.opts.SwitchWhen == SwitchWhenP99 {
		p.mu.Lock()
		r := p.recent[controller]
		if r == nil {
			r = &durations{}
			p.recent[controller] = r
		}
		r.add(d)
		var p99 time.Duration
		if r.n == P99Window {
			p99 = r.p99()
		}
		p.mu.Unlock()
		d = p99
		why = fmt.Sprintf("the p99 of its last %d reconciles is %s (slow threshold %s)", P99Window, p99.Round(time.Microsecond), p.opts.SlowThreshold)
	}
	if d < p.opts.SlowThreshold {
		return
	}
	if p.Detail(controller, now) == probes.DetailCalls {
		return
	}
	if err := p.Switch(controller, 0, why, now); err != nil {
		p.opts.Logger.Debug("no detail switch", "controller", controller, "err", err)
	}
}

// Switch puts controller at detail calls for d (zero: SwitchFor) from now, for why. A switch
// of a controller already switched extends it. It fails with ErrTooManySwitched when
// MaxSwitched other controllers are switched.
func (p *Policy) Switch(controller string, d time.Duration, why string, now time.Time) error {
	if !p.opts.Switches {
		return errors.New("detail switches are off (--detail-switch-max 0)")
	}
	if controller == "" {
		return errors.New("no controller named")
	}
	if d <= 0 {
		d = p.opts.SwitchFor
	}
	d = min(d, time.Hour)
	p.mu.Lock()
	p.expireLocked(now)
	w, already := p.switched[controller]
	if !already && len(p.switched) >= p.opts.MaxSwitched {
		p.mu.Unlock()
		return fmt.Errorf("switch %s: %w (%d)", controller, ErrTooManySwitched, p.opts.MaxSwitched)
	}
	if !already {
		w.from = now
	}
	w.until = now.Add(d)
	p.switched[controller] = w
	p.mu.Unlock()
	if !already {
		p.opts.Logger.Info("detail switch", "controller", controller, "to", probes.DetailCalls.String(), "for", d, "why", why)
		if p.opts.OnSwitch != nil {
			p.opts.OnSwitch(controller, probes.DetailCalls, why)
		}
	}
	return nil
}

// Expire ends the switches whose time is over at now (each logged and counted).
func (p *Policy) Expire(now time.Time) {
	p.mu.Lock()
	ended := p.expireLocked(now)
	p.mu.Unlock()
	for _, c := range ended {
		p.opts.Logger.Info("detail switch", "controller", c, "to", p.Static(c).String(), "why", "its time is over")
		if p.opts.OnSwitch != nil {
			p.opts.OnSwitch(c, p.Static(c), "its time is over")
		}
	}
}

func (p *Policy) expireLocked(now time.Time) []string {
	var ended []string
	for c, w := range p.switched {
		if !now.Before(w.until) {
			delete(p.switched, c)
			p.ended[c] = w
			ended = append(ended, c)
		}
	}
	slices.Sort(ended)
	return ended
}

// Switched returns the controllers switched to detail calls at now, and until when.
func (p *Policy) Switched() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]time.Time, len(p.switched))
	for c, w := range p.switched {
		out[c] = w.until
	}
	return out
}

// Config is the detail section of the agent's config file (run --config; docs/daemonset.md),
// the file's form of --detail and --detail-for:
//
//	detail:
//	  default: reconcile        # --detail
//	  controllers:              # --detail-for, in order: the first that matches wins
//	    - controller: deployment
//	      detail: calls
//
// A field the file sets wins over its flag (Config.Levels): the file is what the agent
// reloads while it runs, the flags are fixed for its life.
type Config struct {
	// Default is the level of the controllers no rule names: reconcile or calls.
	Default string `json:"default,omitempty"`
	// Controllers are per-controller levels, the first whose glob matches wins. Set (even
	// empty), they replace --detail-for.
	Controllers []ConfigRule `json:"controllers,omitempty"`
}

// ConfigRule is one of Config.Controllers: the controllers a glob names (as --controller and
// the config's controllers), at a level.
type ConfigRule struct {
	Controller string `json:"controller"`
	Detail     string `json:"detail"`
}

// ParseConfig reads a config file's detail section (JSON, as sigs.k8s.io/yaml turns YAML into)
// and checks it: a level other than reconcile or calls, a bad glob or an unknown field is an
// error naming it.
func ParseConfig(raw []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("detail: %w", err)
	}
	if _, _, err := c.Levels(probes.DetailReconcile, nil); err != nil {
		return nil, err
	}
	return &c, nil
}

// Levels returns the default level and the rules of c over those of the flags (def, rules):
// c's Default when set, else def; c's Controllers when set, else rules.
func (c *Config) Levels(def probes.Detail, rules []Rule) (probes.Detail, []Rule, error) {
	if c.Default != "" {
		if err := def.Set(c.Default); err != nil {
			return 0, nil, fmt.Errorf("detail.default: %w", err)
		}
	}
	if c.Controllers != nil {
		rules = make([]Rule, 0, len(c.Controllers))
		for i, cr := range c.Controllers {
			r := Rule{Pattern: cr.Controller}
			if err := r.Detail.Set(cr.Detail); err != nil {
				return 0, nil, fmt.Errorf("detail.controllers[%d].detail: %w", i, err)
			}
			if err := checkPattern(r.Pattern); err != nil {
				return 0, nil, fmt.Errorf("detail.controllers[%d].controller: %w", i, err)
			}
			rules = append(rules, r)
		}
	}
	return def, rules, nil
}
