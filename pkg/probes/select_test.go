package probes

import (
	"slices"
	"strings"
	"testing"
)

func TestSelectSyncHandlers(t *testing.T) {
	custom, err := ParseSyncProbe("example.com/op.(*C).sync=controller:widgets")
	if err != nil {
		t.Fatal(err)
	}
	catalog := append(Catalog(), custom)
	selects := func(c string) bool { return c == "deployment" || strings.HasPrefix(c, "wid") }
	kept, left := SelectSyncHandlers(catalog, selects)
	if len(kept)+len(left) != len(catalog) {
		t.Fatalf("%d kept + %d left, want %d", len(kept), len(left), len(catalog))
	}
	for _, p := range kept {
		if name, ok := strings.CutPrefix(p.ID, "sync/"); ok && !selects(name) {
			t.Errorf("kept %s", p.ID)
		}
	}
	for _, id := range []string{"sync/deployment", "sync/widgets", "controller-runtime/reconcile", "client-go/workqueue"} {
		if !slices.ContainsFunc(kept, func(p *Probe) bool { return p.ID == id }) {
			t.Errorf("%s left out", id)
		}
	}
	for _, id := range []string{"sync/replicaset", "sync/endpointslice"} {
		if !slices.Contains(left, id) {
			t.Errorf("%s kept", id)
		}
	}
}

// TestSpanEntriesName their controller instance: the key the kernel's exclusion looks up is
// the work queue's processing set at Get's map insert (slot 1) and the receiver of
// controller-runtime's Reconcile and of kube-controller-manager's sync handlers (slot 0).
func TestSpanEntriesNameTheirKey(t *testing.T) {
	for _, p := range Catalog() {
		want := None
		switch {
		case p.ID == "client-go/workqueue":
			want = 1
		case p.ID == "controller-runtime/reconcile", p.Module == kubernetes && strings.HasPrefix(p.ID, "sync/"):
			want = 0
		}
		if p.Entry.Key != want {
			t.Errorf("%s (%s): entry key slot %d, want %d", p.ID, p.Symbol, p.Entry.Key, want)
		}
		if p.Return.Key != None {
			t.Errorf("%s: return key slot %d, want none", p.ID, p.Return.Key)
		}
	}
}
