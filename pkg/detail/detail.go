// Package detail decides, per controller, how much of each reconcile the agent probes
// (probes.Detail): a default level, per-controller overrides by glob (--detail-for, the
// config's detail.controllers), and bounded, time-limited switches of one controller to
// detail calls, made automatically when one of its reconciles is slow or on demand. It is
// pure: the tracer asks it each span's level and applies the answer in the kernel.
package detail

import (
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
	// for SwitchFor when one of its reconciles lasts at least this long (--slow-threshold).
	SlowThreshold time.Duration
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
}

// Policy is the per-controller detail. Its methods are safe for concurrent use.
type Policy struct {
	opts Options

	mu       sync.Mutex
	switched map[string]window // controller -> its switch to detail calls
	ended    map[string]window // controller -> its last switch that ended, for reconciles begun in it
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
	return &Policy{opts: opts, switched: map[string]window{}, ended: map[string]window{}}, nil
}

// Static is the controller's level by Default and Rules, switches aside.
func (p *Policy) Static(controller string) probes.Detail {
	for _, r := range p.opts.Rules {
		if ok, _ := path.Match(r.Pattern, controller); ok {
			return r.Detail
		}
	}
	return p.opts.Default
}

// Detail is the controller's level at t: DetailCalls while a switch lasts (or lasted: t may be
// the start of a reconcile that ended since, and a reconcile has the level it began with),
// else Static.
func (p *Policy) Detail(controller string, t time.Time) probes.Detail {
	p.mu.Lock()
	w, ok := p.switched[controller]
	e, eok := p.ended[controller]
	p.mu.Unlock()
	if (ok && w.holds(t)) || (eok && e.holds(t)) {
		return probes.DetailCalls
	}
	return p.Static(controller)
}

// Mixed reports whether controllers may have different levels: a rule names a level other
// than Default, or switches are allowed. Only then are the calls probes attached gated.
func (p *Policy) Mixed() bool {
	if p.opts.Switches && p.opts.Default == probes.DetailReconcile {
		return true
	}
	return slices.ContainsFunc(p.opts.Rules, func(r Rule) bool { return r.Detail != p.opts.Default })
}

// CallsAhead reports whether a controller not known yet may be at detail calls from its
// first reconcile: Default is calls, or a rule says calls. The kernel then records the calls
// of controller instances it was not told of (their spans are stripped for the others).
func (p *Policy) CallsAhead() bool {
	return p.opts.Default == probes.DetailCalls || slices.ContainsFunc(p.opts.Rules, func(r Rule) bool { return r.Detail == probes.DetailCalls })
}

// Observe is told of each finished reconcile of controller: a reconcile of at least
// SlowThreshold switches a controller at detail reconcile to detail calls (when fewer than
// MaxSwitched are).
func (p *Policy) Observe(controller string, d time.Duration, now time.Time) {
	if !p.opts.Switches || p.opts.SlowThreshold <= 0 || d < p.opts.SlowThreshold {
		return
	}
	if p.Detail(controller, now) == probes.DetailCalls {
		return
	}
	if err := p.Switch(controller, 0, fmt.Sprintf("a reconcile took %s (slow threshold %s)", d.Round(time.Microsecond), p.opts.SlowThreshold), now); err != nil {
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
