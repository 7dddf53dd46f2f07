package probes

import (
	"testing"

	"github.com/reconscope/reconscope/pkg/span"
)

func TestParseSyncProbe(t *testing.T) {
	tests := []struct {
		spec       string
		controller string
		keySlot    int
		errSlot    int
		wantErr    bool
	}{
		{"example.com/op/ctl.(*C).sync=controller:widgets", "widgets", 3, 0, false},
		{"example.com/op/ctl.(*C).sync=controller:w,key:4,err:1", "w", 4, 1, false},
		{"example.com/op/ctl.(*C).sync", "", 0, 0, true},
		{"=controller:x", "", 0, 0, true},
		{"f=key:3", "", 0, 0, true},
		{"f=controller:x,key:9", "", 0, 0, true},
		{"f=controller:x,color:red", "", 0, 0, true},
	}
	for _, tc := range tests {
		p, err := ParseSyncProbe(tc.spec)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err %v, want error %v", tc.spec, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if p.Entry.Strings[0].Ptr != tc.keySlot || p.Entry.Strings[0].Len != tc.keySlot+1 || p.Return.Err != tc.errSlot || p.Role != RoleSpan {
			t.Errorf("%q: layout %+v / %+v", tc.spec, p.Entry, p.Return)
		}
		if !p.Symbol.MatchString("example.com/op/ctl.(*C).sync") || p.Symbol.MatchString("example.com/op/ctl.(*C).syncAll") {
			t.Errorf("%q: symbol pattern %s", tc.spec, p.Symbol)
		}
		e := p.DecodeEntry(&Raw{Str: [6]string{"ns/obj"}, Goid: 5})
		if e.Kind != span.SpanStart || e.Controller != tc.controller || e.Namespace != "ns" || e.Name != "obj" {
			t.Errorf("%q: decoded entry %+v", tc.spec, e)
		}
	}
}

func TestDecodeReconcileReturn(t *testing.T) {
	dec := decodeReconcileReturn(0, 1)
	tests := []struct {
		name string
		raw  Raw
		want span.Result
	}{
		{"success", Raw{}, span.ResultSuccess},
		{"requeue", Raw{Args: [9]uint64{1}}, span.ResultRequeue},
		{"requeue bool is one byte", Raw{Args: [9]uint64{0xff00}}, span.ResultSuccess},
		{"requeue after wins over requeue", Raw{Args: [9]uint64{1, 5e6}}, span.ResultRequeueAfter},
		{"error wins", Raw{Args: [9]uint64{1, 5e6}, ErrorType: "*errors.errorString"}, span.ResultError},
	}
	for _, tc := range tests {
		if got := dec(&tc.raw); got.Result != tc.want || got.Kind != span.SpanEnd {
			t.Errorf("%s: %s, want %s", tc.name, got.Result, tc.want)
		}
	}
}

func TestResourceOf(t *testing.T) {
	for in, want := range map[string]string{
		"*v1.ConfigMap":                  "configmaps",
		"*v1.PodList":                    "pods",
		"*v1.Ingress":                    "ingresses",
		"*v1.NetworkPolicy":              "networkpolicies",
		"*v1.Gateway":                    "gateways",
		"*unstructured.Unstructured":     "",
		"*unstructured.UnstructuredList": "",
		"unknown":                        "",
	} {
		if got := resourceOf(in); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDecodeObject(t *testing.T) {
	const uid = "0c1680f0-7819-471a-ba2b-7406fbd29909"
	obj := [6]string{"ns", "web", uid, "235"}
	tests := []struct {
		name string
		dec  Decoder
		raw  Raw
		want span.Event
	}{
		{"lister read", decodeObjectReturn, Raw{Str: obj},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{Namespace: "ns", Name: "web", UID: uid, ResourceVersion: "235", Outcome: span.OutcomeHit}}},
		{"lister read failed (not found)", decodeObjectReturn, Raw{Str: obj, ErrorType: "*errors.StatusError", ErrorMsg: `deployments.apps "web" not found`},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{Error: "*errors.StatusError", Outcome: span.OutcomeNotFound}}},
		{"lister read failed (message unread)", decodeObjectReturn, Raw{Str: obj, ErrorType: "*errors.StatusError"},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{Error: "*errors.StatusError", Outcome: span.OutcomeError}}},
		{"no object behind the pointer: no UUID, nothing read", decodeObjectReturn, Raw{Str: [6]string{"x", "y", "\x01\x02garbage", "1"}},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{Outcome: span.OutcomeHit}}},
		{"response object", decodeResultObject, Raw{Str: obj},
			span.Event{Kind: span.CallObject, Call: span.CallInfo{Namespace: "ns", Name: "web", UID: uid, ResourceVersion: "235"}}},
		{"response object of a failed call: no event", decodeResultObject, Raw{Str: obj, ErrorType: "*errors.StatusError"}, span.Event{}},
		{"response decoded into something that is not an object: no event", decodeResultObject, Raw{Str: [6]string{"", "", "", ""}}, span.Event{}},
		{"cache read", decodeCallReturn, Raw{Str: [6]string{uid, "9"}},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{UID: uid, ResourceVersion: "9"}}},
		{"cache read into an Unstructured: garbage dropped", decodeCallReturn, Raw{Str: [6]string{"abc", "9"}},
			span.Event{Kind: span.CallEnd}},
		{"cache get: hit", decodeCacheGetReturn, Raw{Str: [6]string{uid, "9"}},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{UID: uid, ResourceVersion: "9", Outcome: span.OutcomeHit}}},
		{"cache get: not found", decodeCacheGetReturn, Raw{ErrorType: "*errors.StatusError", ErrorMsg: `configmaps "gone" not found`},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{Error: "*errors.StatusError", Outcome: span.OutcomeNotFound}}},
		{"cache get: informer not synced", decodeCacheGetReturn, Raw{ErrorType: "*errors.StatusError", ErrorMsg: "failed waiting for *v1.ConfigMap Informer to sync"},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{Error: "*errors.StatusError", Outcome: span.OutcomeError}}},
		{"deferred cache read (detail reconcile)", decodeObjectRead, Raw{Deferred: true, Str: obj},
			span.Event{Kind: span.ObjectRead, Call: span.CallInfo{Namespace: "ns", Name: "web", UID: uid, ResourceVersion: "235"}}},
		{"deferred cache read of an object the call did not fill: its hit, no object", decodeObjectRead, Raw{Deferred: true},
			span.Event{Kind: span.ObjectRead}},
		{"cache get: other error", decodeCacheGetReturn, Raw{ErrorType: "*fmt.wrapError", ErrorMsg: "not found"},
			span.Event{Kind: span.CallEnd, Call: span.CallInfo{Error: "*fmt.wrapError", Outcome: span.OutcomeError}}},
	}
	for _, tc := range tests {
		if got := tc.dec(&tc.raw); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestIsUID(t *testing.T) {
	for in, want := range map[string]bool{
		"0c1680f0-7819-471a-ba2b-7406fbd29909": true,
		"0C1680F0-7819-471A-BA2B-7406FBD29909": true,
		"0c1680f0-7819-471a-ba2b-7406fbd2990":  false,
		"0c1680f0x7819-471a-ba2b-7406fbd29909": false,
		"0c1680f0-7819-471a-ba2b-7406fbd2990g": false,
		"":                                     false,
	} {
		if got := IsUID(in); got != want {
			t.Errorf("IsUID(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestFieldUsesMatchFieldsRead: every field the catalog reads says what spans lack without it
// (fieldUses), and fieldUses names no field the catalog does not read.
func TestFieldUsesMatchFieldsRead(t *testing.T) {
	read := map[string]bool{}
	for _, f := range FieldsRead(Catalog()) {
		k := f.Type + " " + f.Path
		read[k] = true
		if fieldUses[k] == "" {
			t.Errorf("%s: no line in fieldUses", k)
		}
	}
	for k := range fieldUses {
		if !read[k] {
			t.Errorf("fieldUses names %s, which no probe reads", k)
		}
	}
}

// TestDecodeWatchEvent: a handler's entry is the watch event it delivers: what happened, and
// the object's kind (from its Go type), namespace, name, UID and resourceVersion; an update of
// one version is a resync; a value that is not a typed object keeps its type alone.
func TestDecodeWatchEvent(t *testing.T) {
	const uid = "0b6f3c1e-8a5f-4c5e-9a43-1f0c7e4d2a10"
	tests := []struct {
		name  string
		watch string
		raw   Raw
		want  span.Event
	}{
		{"add of a pod", span.WatchAdd, Raw{ObjectType: "*v1.Pod", Str: [6]string{"ns", "web-1", uid, "812"}},
			span.Event{Kind: span.WatchEvent, Watch: span.WatchAdd, Object: span.ObjectRef{Kind: "Pod", Namespace: "ns", Name: "web-1", UID: uid, ResourceVersion: "812"}}},
		{"update", span.WatchUpdate, Raw{ObjectType: "*v1.ConfigMap", Str: [6]string{"ns", "cm", uid, "9", "8"}},
			span.Event{Kind: span.WatchEvent, Watch: span.WatchUpdate, Object: span.ObjectRef{Kind: "ConfigMap", Namespace: "ns", Name: "cm", UID: uid, ResourceVersion: "9"}}},
		{"resync: one version", span.WatchUpdate, Raw{ObjectType: "*v1.ConfigMap", Str: [6]string{"ns", "cm", uid, "9", "9"}},
			span.Event{Kind: span.WatchEvent, Watch: span.WatchResync, Object: span.ObjectRef{Kind: "ConfigMap", Namespace: "ns", Name: "cm", UID: uid, ResourceVersion: "9"}}},
		{"a delete the watch missed", span.WatchDelete, Raw{ObjectType: "cache.DeletedFinalStateUnknown", Str: [6]string{"x", "y", "z"}},
			span.Event{Kind: span.WatchEvent, Watch: span.WatchDelete, Object: span.ObjectRef{Kind: "DeletedFinalStateUnknown"}}},
		{"unstructured", span.WatchAdd, Raw{ObjectType: "*unstructured.Unstructured", Str: [6]string{"ns", "n", uid, "1"}},
			span.Event{Kind: span.WatchEvent, Watch: span.WatchAdd, Object: span.ObjectRef{Kind: "Unstructured"}}},
	}
	for _, tc := range tests {
		if got := decodeWatchEvent(tc.watch)(&tc.raw); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
