package span

import (
	"reflect"
	"testing"
	"time"
)

// TestStaleRead: a read of a version older than one a traced write made and returned before
// the read began is stale, named with both versions, the newer one's writer and the age; a
// read of the newest version, a read that began before the newer write returned, and versions
// that are not numbers are not.
func TestStaleRead(t *testing.T) {
	const uid = "44444444-4444-4444-4444-444444444444"
	r := objectRig{name: "obj", uid: uid, readResource: "configmaps", writeResource: "configmaps"}
	reconcile := func(goid int64, ctl string, start, end uint64, between ...[]Event) []Event {
		return r.reconcile(goid, ctl, start, end, ResultSuccess, between...)
	}
	read := r.read
	write := func(tm uint64, rv string) []Event { return r.write(tm, 200, rv) }
	objectRead := func(tm uint64, rv string) []Event {
		return []Event{{Kind: ObjectRead, Time: tm, Call: CallInfo{Namespace: "ns", Name: "obj", UID: uid, ResourceVersion: rv}}}
	}
	stale := func(res, rv, newer, writer string, at, age uint64) StaleRead {
		return StaleRead{Namespace: "ns", Name: "obj", UID: uid, Resource: res, ResourceVersion: rv, NewerVersion: newer,
			NewerWriter: writer, Age: time.Duration(age), At: at}
	}
	tests := []struct {
		name   string
		events [][]Event
		want   []StaleRead
	}{
		{"a read after another controller's newer write returned", [][]Event{
			reconcile(20, "writer", 100, 200, write(150, "216")),
			reconcile(21, "reader", 300, 400, read(310, "213"))}, // write returned at 160
			[]StaleRead{stale("configmaps", "213", "216", "writer", 310, 150)}},
		{"the reconciled object's one-hit read (detail reconcile)", [][]Event{
			reconcile(20, "writer", 100, 200, write(150, "216")),
			reconcile(21, "reader", 300, 400, objectRead(305, "213"))},
			[]StaleRead{stale("", "213", "216", "writer", 305, 145)}},
		{"its own write, then a read of the version before it", [][]Event{
			reconcile(21, "reader", 300, 400, read(301, "213"), write(310, "216"), read(330, "213"))},
			[]StaleRead{stale("configmaps", "213", "216", "reader", 330, 10)}},
		{"the newest write returned after the read began, the one before it did not", [][]Event{
			reconcile(20, "writer", 100, 200, write(150, "216")),
			reconcile(22, "other", 250, 500, write(300, "220")),
			reconcile(21, "reader", 305, 400, read(305, "213"))},
			[]StaleRead{stale("configmaps", "213", "216", "writer", 305, 145)}},
		{"a read of the newest version", [][]Event{
			reconcile(20, "writer", 100, 200, write(150, "216")),
			reconcile(21, "reader", 300, 400, read(310, "216"))}, nil},
		{"a read that began before the newer write returned", [][]Event{
			reconcile(20, "writer", 100, 200, write(150, "216")),
			reconcile(21, "reader", 90, 400, read(155, "213"))}, nil},
		{"a read newer than the newest traced write (an untraced writer)", [][]Event{
			reconcile(20, "writer", 100, 200, write(150, "216")),
			reconcile(21, "reader", 300, 400, read(310, "230"))}, nil},
		{"versions that are not numbers", [][]Event{
			reconcile(20, "writer", 100, 200, write(150, "b")),
			reconcile(21, "reader", 300, 400, read(310, "a"))}, nil},
		{"no traced write", [][]Event{
			reconcile(21, "reader", 300, 400, read(310, "213"))}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := assemble(tc.events)
			for _, s := range got {
				want := tc.want
				if s.Controller != "reader" {
					want = nil
				}
				if !reflect.DeepEqual(s.StaleReads, want) {
					t.Errorf("%s's stale reads\n got %+v\nwant %+v", s.Controller, s.StaleReads, want)
				}
			}
		})
	}
}
