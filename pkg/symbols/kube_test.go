package symbols

import (
	"errors"
	"regexp"
	"testing"
)

// TestKubeTypes builds a small controller-runtime + client-go program (plain and -s -w) and
// checks, for every offsets-table entry of the module versions it links, that the table
// agrees with the program's DWARF, and that the stripped build is answered from the table.
func TestKubeTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a controller-runtime program")
	}
	plain := openFixture(t, "kube")
	stripped := openFixture(t, "kube-stripped")

	for _, m := range []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "k8s.io/apimachinery"} {
		if v := stripped.Modules[m]; v == "" || v != plain.Modules[m] {
			t.Errorf("stripped build: %s version %q, the plain build says %q", m, v, plain.Modules[m])
		}
	}

	table, err := offsetsTable()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, entries := range table {
		for _, e := range entries {
			if e.Module == "std" || plain.Modules[e.Module] != e.Version {
				continue
			}
			d, err := plain.FieldOffset(e.Type, e.Field)
			if err != nil || d.Source != "dwarf" {
				t.Errorf("DWARF %s.%s: %+v, %v", e.Type, e.Field, d, err)
				continue
			}
			if d.Value != e.Offset {
				t.Errorf("%s.%s: DWARF says %d, the table (%s %s) says %d", e.Type, e.Field, d.Value, e.Module, e.Version, e.Offset)
			}
			s, err := stripped.FieldOffset(e.Type, e.Field)
			if err != nil || s.Source != "table" || s.Value != d.Value {
				t.Errorf("stripped %s.%s: %+v, %v; want %d from the table", e.Type, e.Field, s, err, d.Value)
			}
			checked++
		}
	}
	t.Logf("%d table entries agree with the DWARF of a build against %v", checked, plain.Modules)
	if checked < 10 {
		t.Errorf("only %d table entries match this program's module versions %v", checked, plain.Modules)
	}

	for _, b := range []*Binary{plain, stripped} {
		// The generic controller's Reconcile: a shape instantiation.
		re := regexp.MustCompile(`^sigs\.k8s\.io/controller-runtime/pkg/internal/controller\.\(\*Controller\[.*\]\)\.Reconcile$`)
		fs, err := b.Match(re)
		if err != nil || len(fs) == 0 {
			t.Fatalf("Match(Controller.Reconcile): %v, %v", fs, err)
		}
		for _, f := range fs {
			if _, err := b.EntrySite(f); err != nil {
				t.Error(err)
			}
			if rets, err := b.ReturnSites(f); err != nil || len(rets) == 0 {
				t.Errorf("ReturnSites(%s) = %v, %v", f.Name, rets, err)
			}
		}
		if _, err := b.Lookup("k8s.io/apimachinery/pkg/api/errors.NewNotFound"); err != nil {
			t.Error(err)
		}
		itabs, err := b.Itabs()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, name := range itabs {
			found = found || name == "*errors.StatusError"
		}
		if !found {
			t.Error("no itab for *errors.StatusError")
		}
		// A field the version does not have.
		if _, err := b.FieldOffset("k8s.io/client-go/rest.Request", "noSuchField"); !errors.Is(err, ErrOffsetUnknown) {
			t.Errorf("missing field: %v", err)
		}
	}
}
