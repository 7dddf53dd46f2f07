package exporter

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/reconscope/reconscope/pkg/ktime"
)

// jsonStrings are the strings a filled JSONSpan takes: plain, empty, and every character
// encoding/json escapes (quotes, backslash, control characters, HTML's <, > and &, invalid
// UTF-8, U+2028 and U+2029) beside multi-byte runes it keeps.
var jsonStrings = []string{
	"replicaset", "", `a"b\c`, "line\nbreak\ttab\rcr\bbs\fff", "\x00\x01\x1f\x7f", "<script>&amp;</script>",
	"bad \xff utf-8 \xc3", "sep\u2028para\u2029end", "héllo, 世界 🙂", "kube-system/kube-controller-manager-node-1",
}

// fillJSON sets every field of v (a JSONSpan or a part of it) from r: strings from
// jsonStrings, numbers (negative ones too), booleans, times, and slices of 0 to 2 items or nil.
func fillJSON(v reflect.Value, r *rand.Rand) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(jsonStrings[r.IntN(len(jsonStrings))])
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(r.Int64N(1<<40) - 1<<39)
	case reflect.Uint32, reflect.Uint64, reflect.Uint:
		v.SetUint(r.Uint64() >> uint(r.IntN(64)))
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Slice:
		n := r.IntN(4) - 1 // -1: nil
		if n < 0 {
			v.SetZero()
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fillJSON(v.Index(i), r)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(time.FixedZone("", r.IntN(3)*3600)).UTC()))
			if r.IntN(3) == 0 {
				v.Set(reflect.ValueOf(time.Unix(r.Int64N(4e9), 0).UTC()))
			}
			return
		}
		for i := range v.NumField() {
			if r.IntN(5) == 0 {
				continue // leave some fields zero: omitempty
			}
			fillJSON(v.Field(i), r)
		}
	default:
		panic("fillJSON: a field of kind " + v.Kind().String() + ": teach AppendJSON and this test")
	}
}

// TestAppendJSONMatchesEncodingJSON: AppendJSON writes what encoding/json's Encoder writes,
// byte for byte, for the zero span, a span from ToJSON, and spans with every field set at
// random (a field added to JSONSpan and not to AppendJSON fails here).
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	spans := []JSONSpan{{}, ToJSON(benchSpans()["calls"], ktime.ClockAt(time.Unix(1_700_000_000, 0)))}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var j JSONSpan
		fillJSON(reflect.ValueOf(&j).Elem(), r)
		spans = append(spans, j)
	}
	for i := range spans {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(spans[i]); err != nil {
			t.Fatal(err)
		}
		if got := AppendJSON(nil, &spans[i]); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("span %d:\n got %s\nwant %s", i, got, want.Bytes())
		}
	}
}

// TestAppendStringEveryByte: every single byte and every rune escaped by encoding/json, alone
// and between others, is written as encoding/json writes it.
func TestAppendStringEveryByte(t *testing.T) {
	for c := range 256 {
		for _, s := range []string{string(rune(c)), string([]byte{byte(c)}), "a" + string([]byte{byte(c)}) + "z"} {
			want, err := json.Marshal(s) // Marshal escapes HTML as the Encoder does by default
			if err != nil {
				t.Fatal(err)
			}
			if got := appendString(nil, s); !bytes.Equal(got, want) {
				t.Errorf("%q: got %s, want %s", s, got, want)
			}
		}
	}
}
