package collector

import (
	"errors"
	"testing"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/probes"
)

// TestSiteConfig: a site's kernel record carries its probe's slots and the plan's resolved
// offsets (plus the field's Add); a string or value whose offset is unknown is left out.
func TestSiteConfig(t *testing.T) {
	uid := probes.FieldRef{Type: "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta", Path: "UID", Add: 16}
	rv := probes.FieldRef{Type: "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta", Path: "ResourceVersion", Add: 16}
	status := probes.FieldRef{Type: "net/http.Response", Path: "StatusCode"}
	none := probes.StringArg{Ptr: probes.None, Len: probes.None, Base: probes.None}
	l := probes.Layout{Ctx: probes.None, Err: 2, Save: 1, Itab: probes.None}
	for i := range l.Strings {
		l.Strings[i] = none
	}
	for i := range l.Values {
		l.Values[i] = probes.ValueArg{Base: probes.None}
	}
	l.Strings[0] = probes.StringArg{Ptr: 3, Len: 4, Base: probes.None}
	l.Strings[1] = probes.StringArg{Ptr: probes.None, Len: probes.None, Base: probes.Saved, Field: uid}
	l.Strings[2] = probes.StringArg{Ptr: probes.None, Len: probes.None, Base: probes.Saved, Field: rv}
	l.Values[0] = probes.ValueArg{Base: 0, Field: status}
	pr := &probes.Probe{ID: "test", Role: probes.RoleCall, Return: l}
	plan := &probes.Plan{GoidOffset: 152, Offsets: []probes.OffsetUse{
		{FieldRef: probes.FieldRef{Type: uid.Type, Path: uid.Path}, Value: 24, Source: "dwarf"},
		{FieldRef: probes.FieldRef{Type: rv.Type, Path: rv.Path}, Err: errors.New("unknown")},
		{FieldRef: status, Value: 16, Source: "table"},
	}}
	c := siteConfig(plan, &probes.Site{Probe: pr, Kind: probes.SiteReturn})
	const noSlot, savedSlot = int8(probes.None), int8(probes.Saved) // as the kernel's record holds them

	if c.Kind != uint8(rbpf.TraceSiteKindSITE_RETURN) || c.Role != uint8(rbpf.TraceSiteRoleROLE_CALL) ||
		c.ErrSlot != 2 || c.SaveSlot != 1 || c.CtxSlot != noSlot || c.GoidOff != 152 {
		t.Errorf("head: %+v", c)
	}
	want := []rbpf.TraceStrSpec{
		{PtrSlot: 3, LenSlot: 4, BaseSlot: noSlot},
		{PtrSlot: noSlot, LenSlot: noSlot, BaseSlot: savedSlot, Off: 24 + 16},
		{PtrSlot: noSlot, LenSlot: noSlot, BaseSlot: noSlot}, // offset unknown: left out
	}
	for i, w := range want {
		if c.Str[i] != w {
			t.Errorf("string %d: %+v, want %+v", i, c.Str[i], w)
		}
	}
	if w := (rbpf.TraceValSpec{BaseSlot: 0, Off: 16}); c.Val[0] != w {
		t.Errorf("value 0: %+v, want %+v", c.Val[0], w)
	}
	if c.Val[1].BaseSlot != noSlot {
		t.Errorf("value 1: %+v, want none", c.Val[1])
	}
}

// TestDeferredSite: only a deferred read's entry site is marked deferred in its kernel record,
// and a record of kind EVENT_DEFERRED decodes as a deferred read (Raw.Deferred), not an entry.
func TestDeferredSite(t *testing.T) {
	var deferred *probes.Probe
	for _, p := range probes.ReconcileReads {
		if p.DeferredRead {
			deferred = p
		}
	}
	if deferred == nil {
		t.Fatal("no deferred read in probes.ReconcileReads")
	}
	plan := &probes.Plan{}
	if c := siteConfig(plan, &probes.Site{Probe: deferred, Kind: probes.SiteEntry}); c.Deferred != 1 || c.SaveSlot != int8(deferred.Entry.Save) {
		t.Errorf("deferred read's entry: deferred %d, save slot %d", c.Deferred, c.SaveSlot)
	}
	for _, p := range probes.Catalog() {
		if c := siteConfig(plan, &probes.Site{Probe: p, Kind: probes.SiteEntry}); c.Deferred != 0 {
			t.Errorf("%s: entry marked deferred", p.ID)
		}
	}
	for kind, want := range map[rbpf.TraceEventKind][2]bool{
		rbpf.TraceEventKindEVENT_ENTRY:    {true, false},
		rbpf.TraceEventKindEVENT_RETURN:   {false, false},
		rbpf.TraceEventKindEVENT_DEFERRED: {false, true},
	} {
		rec := make([]byte, headSize)
		rec[0] = uint8(kind)
		var raw probes.Raw
		if !DecodeEvent(rec, &raw) || raw.Entry != want[0] || raw.Deferred != want[1] {
			t.Errorf("kind %d: entry %v, deferred %v; want %v", kind, raw.Entry, raw.Deferred, want)
		}
	}
}
