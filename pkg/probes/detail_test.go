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
	for _, p := range DetailReconcile.Catalog(Catalog) {
		kept[p] = true
	}
	for _, p := range Catalog {
		if want := p.Role == RoleSpan || p.Role == RoleMark || p.ItemResult; kept[p] != want {
			t.Errorf("%s (%s, %s): kept %v at detail reconcile, want %v", p.ID, p.Role, p.Symbol, kept[p], want)
		}
	}
	// ... and, in place of controller-runtime's cache Get, its deferred read: entry-only,
	// the object's metadata read through the pointer its entry keeps.
	for _, p := range DeferredReads {
		if !kept[p] {
			t.Errorf("deferred read %s not kept at detail reconcile", p.ID)
		}
		if !p.EntryOnly || !p.DeferredRead || p.Entry.Save == None {
			t.Errorf("deferred read %s: entry only %v, deferred %v, save %d", p.ID, p.EntryOnly, p.DeferredRead, p.Entry.Save)
		}
		for _, s := range p.Entry.Strings {
			if s.Base != None && s.Base != Saved {
				t.Errorf("deferred read %s reads a string from slot %d, not through the kept pointer", p.ID, s.Base)
			}
		}
	}
	if n, want := len(DetailReconcile.Catalog(Catalog)), len(kept); n != want {
		t.Errorf("detail reconcile keeps %d probes, %d distinct", n, want)
	}
	if n := len(DetailCalls.Catalog(Catalog)); n != len(Catalog) {
		t.Errorf("detail calls keeps %d of %d probes", n, len(Catalog))
	}
}
