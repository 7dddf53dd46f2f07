package probes

import (
	"fmt"
	"slices"
	"sync"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// Detail says how much of a reconcile the agent probes: which probes of a catalog a plan keeps.
// It is the agent's --detail (a flag.Value). Fewer probes are fewer traps in the traced
// process: what a span holds at each level is in docs/probes.md ("Detail levels").
type Detail uint8

const (
	// DetailCalls keeps every probe: the reconcile, its API calls, cache and lister reads (with
	// the reconciled object's UID and resourceVersion, the trigger and the phases they give),
	// and the goroutine probes that put calls made on goroutines the reconcile starts in it.
	DetailCalls Detail = iota
	// DetailReconcile keeps the probes that make the span itself: the reconcile's (or work-queue
	// item's) entry and return, what its worker did with the item (Probe.ItemResult), the
	// queue adds that give its queue wait, and, in place of controller-runtime's cache read
	// probe, its one-hit form (ReconcileReads): the reconciled object's UID and resourceVersion,
	// and the trigger they give. No other call probe and no goroutine probe: a span has no
	// calls or phases. A sync handler inside a work-queue item (Probe.Enriches) is left out
	// where the item's probe attaches: the item is the span.
	DetailReconcile
)

var detailNames = []string{DetailCalls: "calls", DetailReconcile: "reconcile"}

// String is the flag's value.
func (d Detail) String() string {
	if int(d) < len(detailNames) {
		return detailNames[d]
	}
	return fmt.Sprintf("Detail(%d)", uint8(d))
}

// Set parses the flag's value.
func (d *Detail) Set(s string) error {
	n := slices.Index(detailNames, s)
	if n < 0 {
		return fmt.Errorf("want calls or reconcile, not %q", s)
	}
	*d = Detail(n)
	return nil
}

// Type names the flag's value in its help (pflag.Value).
func (d *Detail) Type() string { return "level" }

// Catalog returns catalog with the probes d keeps. catalog itself is not changed.
func (d Detail) Catalog(catalog []*Probe) []*Probe {
	if d == DetailCalls {
		return slices.Clone(catalog)
	}
	var out []*Probe
	replaced := map[string]bool{}
	for _, p := range catalog {
		if p.Role == RoleSpawn || p.Role == RoleExit || (p.Role == RoleCall && !p.ItemResult && !slices.Contains(ReconcileReads, p)) {
			if !replaced[p.ID] {
				replaced[p.ID] = true
				for _, q := range ReconcileReads {
					if q.ID == p.ID {
						out = append(out, q)
					}
				}
			}
			continue
		}
		if p.Enriches != "" {
			p = reconcileForm(p)
		}
		out = append(out, p)
	}
	return out
}

// reconcileForms holds the DetailReconcile form of each probe with Enriches (reconcileForm),
// made once so that every catalog at that detail holds the same one.
var reconcileForms sync.Map // *Probe -> *Probe

// reconcileForm returns p as DetailReconcile keeps it: superseded by the span probe it enriches
// (Probe.Enriches), so that the plan leaves it out where that probe has sites.
func reconcileForm(p *Probe) *Probe {
	if q, ok := reconcileForms.Load(p); ok {
		return q.(*Probe)
	}
	q := *p
	q.SupersededBy = p.Enriches
	v, _ := reconcileForms.LoadOrStore(p, &q)
	return v.(*Probe)
}

// CallProbes returns the probes of catalog that DetailCalls keeps and DetailReconcile does not:
// what an executable planned at DetailReconcile needs besides to trace some of its controllers
// at DetailCalls (the API call, cache and lister read probes, the goroutine probes, and the
// span probes that enrich another's spans, Probe.Enriches, where that one attaches).
// catalog itself is not changed.
func CallProbes(catalog []*Probe) []*Probe {
	kept := DetailReconcile.Catalog(catalog)
	var out []*Probe
	for _, p := range DetailCalls.Catalog(catalog) {
		if !slices.Contains(kept, p) {
			out = append(out, p)
		}
	}
	return out
}

// NewCallsPlan plans for bin the sites of catalog's CallProbes: the plan of
// DetailCalls.Catalog(catalog) (the call probes serve spans, so they are planned with them)
// without the sites of the probes DetailReconcile keeps. The agent attaches it next to the
// executable's plan at DetailReconcile, gated per controller instance
// (collector.Collector.AttachCalls). ErrNothingToTrace when no call probe applies.
func NewCallsPlan(bin *symbols.Binary, catalog []*Probe) (*Plan, error) {
	plan, err := NewPlan(bin, DetailCalls.Catalog(catalog))
	if err != nil {
		return plan, err
	}
	calls := CallProbes(catalog)
	// A probe that enriches the spans of one with no site here stays in the plan at
	// DetailReconcile (reconcileForm is not superseded): not twice.
	ids := plan.Probes()
	calls = slices.DeleteFunc(calls, func(p *Probe) bool { return p.Enriches != "" && !slices.Contains(ids, p.Enriches) })
	plan.Sites = slices.DeleteFunc(plan.Sites, func(s Site) bool { return !slices.Contains(calls, s.Probe) })
	plan.Choices = slices.DeleteFunc(plan.Choices, func(c Choice) bool { return !slices.Contains(plan.Probes(), c.ProbeID) })
	if len(plan.Sites) == 0 {
		return plan, ErrNothingToTrace
	}
	return plan, nil
}
