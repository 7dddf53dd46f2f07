package probes

import "testing"

func TestDetail(t *testing.T) {
	var d Detail
	if d.String() != "calls" {
		t.Errorf("default detail %q, want calls", d)
	}
	if err := d.Set("reconcile"); err != nil || d != DetailReconcile {
		t.Errorf("Set(reconcile): %v, %v", d, err)
	}
	if err := d.Set("everything"); err == nil {
		t.Error("Set(everything): no error")
	}
	kept := map[*Probe]bool{}
	for _, p := range DetailReconcile.Catalog(Catalog()) {
		kept[p] = true
	}
	for _, p := range Catalog() {
		if p.Enriches != "" {
			// a sync handler: its reconcile form, left out where the work queue's item is the span
			q := reconcileForm(p)
			if !kept[q] || kept[p] || q.SupersededBy != p.Enriches || q.ID != p.ID {
				t.Errorf("%s (%s): kept %v, its reconcile form kept %v superseded by %q; want the form, superseded by %s", p.ID, p.Symbol, kept[p], kept[q], q.SupersededBy, p.Enriches)
			}
			continue
		}
		if want := p.Role == RoleSpan || p.Role == RoleMark || p.ItemResult; kept[p] != want {
			t.Errorf("%s (%s, %s): kept %v at detail reconcile, want %v", p.ID, p.Role, p.Symbol, kept[p], want)
		}
	}
	deployment := func() *Probe {
		for _, p := range DetailReconcile.Catalog(Catalog()) {
			if p.ID == "sync/deployment" {
				return p
			}
		}
		return nil
	}
	if a, b := deployment(), deployment(); a == nil || a != b {
		t.Errorf("two catalogs at detail reconcile hold sync/deployment as %p and %p, want one probe", a, b)
	}
	// ... and, in place of controller-runtime's cache Get, its one-hit forms: entry-only, the
	// deferred read's strings read through the pointer its entry keeps.
	for _, p := range ReconcileReads {
		if !kept[p] {
			t.Errorf("%s (%s) not kept at detail reconcile", p.ID, p.Symbol)
		}
		if !p.EntryOnly {
			t.Errorf("%s (%s) has a return site", p.ID, p.Symbol)
		}
		for _, s := range p.Entry.Strings {
			if p.DeferredRead && s.Base != None && s.Base != Saved {
				t.Errorf("deferred read %s reads a string from slot %d, not through the kept pointer", p.ID, s.Base)
			}
		}
	}
	if n, want := len(DetailReconcile.Catalog(Catalog())), len(kept); n != want {
		t.Errorf("detail reconcile keeps %d probes, %d distinct", n, want)
	}
	if n := len(DetailCalls.Catalog(Catalog())); n != len(Catalog()) {
		t.Errorf("detail calls keeps %d of %d probes", n, len(Catalog()))
	}
}

// TestCallProbes: the probes a per-controller detail attaches gated are exactly those detail
// calls has and detail reconcile has not, so the two plans of an executable never hold one
// probe twice and together hold every probe of detail calls.
func TestCallProbes(t *testing.T) {
	calls := CallProbes(Catalog())
	base := DetailReconcile.Catalog(Catalog())
	in := func(list []*Probe, p *Probe) bool {
		for _, q := range list {
			if q == p {
				return true
			}
		}
		return false
	}
	for _, p := range calls {
		if in(base, p) {
			t.Errorf("%s (%s): in both plans", p.ID, p.Symbol)
		}
		if (p.Role == RoleSpan && p.Enriches == "") || p.Role == RoleMark || p.ItemResult {
			t.Errorf("%s (%s, %s): a span, mark or item-result probe among the call probes", p.ID, p.Role, p.Symbol)
		}
	}
	for _, p := range DetailCalls.Catalog(Catalog()) {
		if p.Enriches != "" && !in(calls, p) {
			t.Errorf("%s (%s): a sync handler not among the call probes", p.ID, p.Symbol)
		}
		if !in(base, p) && !in(calls, p) {
			t.Errorf("%s (%s): in neither plan", p.ID, p.Symbol)
		}
	}
	if len(calls) == 0 {
		t.Fatal("no call probe")
	}
}
