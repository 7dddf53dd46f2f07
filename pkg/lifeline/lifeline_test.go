package lifeline

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestDerivation recomputes the documented derivation independently (as another tool would,
// from docs/lifelines.md) and checks the IDs against it.
func TestDerivation(t *testing.T) {
	const uid = "0c1680f0-7819-471a-ba2b-7406fbd29909"
	tsum := sha256.Sum256([]byte("reconscope.lifeline.v1\x00" + uid))
	if got, want := TraceID(uid).String(), hex.EncodeToString(tsum[:16]); got != want {
		t.Errorf("TraceID = %s, want %s", got, want)
	}
	ssum := sha256.Sum256([]byte("reconscope.version.v1\x00" + uid + "\x00" + "235"))
	if got, want := SpanID(uid, "235").String(), hex.EncodeToString(ssum[:8]); got != want {
		t.Errorf("SpanID = %s, want %s", got, want)
	}
	v := Version(uid, "235")
	if v.TraceID() != TraceID(uid) || v.SpanID() != SpanID(uid, "235") || !v.IsSampled() || !v.IsRemote() || !v.IsValid() {
		t.Errorf("Version = %+v", v)
	}
	if SpanID(uid, "235") == SpanID(uid, "236") || SpanID(uid, "2") == SpanID(uid+"\x002", "") || TraceID(uid) == TraceID(uid[:35]+"a") {
		t.Error("distinct inputs gave one ID")
	}
}
