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
	if n := len(DetailCalls.Catalog(Catalog)); n != len(Catalog) {
		t.Errorf("detail calls keeps %d of %d probes", n, len(Catalog))
	}
}
