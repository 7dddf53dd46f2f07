package probes

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reconscope/reconscope/pkg/span"
)

// FuzzParseSyncProbe: any --probe value gives a probe or an error, never a panic (the agent
// parses it from its command line), and a probe it gives matches its own symbol exactly and
// reads registers the kernel program accepts.
func FuzzParseSyncProbe(f *testing.F) {
	for _, s := range []string{
		"example.com/op/ctl.(*C).sync=controller:widgets",
		"example.com/op/ctl.(*C).sync=controller:w,key:4,err:1",
		"main.(*Controller[go.shape.struct { main.NamespacedName }]).Reconcile=controller:fake,key:6,err:3",
		// the fake controller's, as the reliability tests pass it to the agent
		"github.com/reconscope/reconscope/test/fakectl/controller.(*Controller[go.shape.struct { github.com/reconscope/reconscope/test/fakectl/controller.NamespacedName }]).Reconcile=controller:fake,key:6,err:3",
		"f=controller:x,key:7",
		"f=controller:x,key:9",
		"=controller:x",
		"f=controller:",
		"f=controller:x,,",
		"\xff=controller:x",
		"a.b(c)[d]=controller:x,err:-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := ParseSyncProbe(spec)
		if err != nil {
			if p != nil {
				t.Fatalf("%q: a probe and an error", spec)
			}
			return
		}
		symbol, opts, _ := strings.Cut(spec, "=")
		symbol = strings.TrimSpace(symbol)
		if !p.Symbol.MatchString(symbol) {
			t.Fatalf("%q: probe symbol %s does not match %q", spec, p.Symbol, symbol)
		}
		if p.Symbol.MatchString(symbol+"x") || p.Symbol.MatchString("x"+symbol) {
			t.Fatalf("%q: probe symbol %s matches more than %q", spec, p.Symbol, symbol)
		}
		if !strings.HasPrefix(p.ID, "sync/") || p.ID == "sync/" || !strings.Contains(opts, "controller:"+strings.TrimPrefix(p.ID, "sync/")) {
			t.Fatalf("%q: probe ID %q", spec, p.ID)
		}
		key := p.Entry.Strings[0]
		if key.Ptr < 0 || key.Ptr > 7 || key.Len != key.Ptr+1 || key.Base != None {
			t.Fatalf("%q: key read from %+v", spec, key)
		}
		if p.Return.Err < 0 || p.Return.Err > 7 || p.Role != RoleSpan {
			t.Fatalf("%q: error slot %d, role %d", spec, p.Return.Err, p.Role)
		}
		// Its decoders take any raw event.
		r := &Raw{Str: [6]string{spec}}
		if e := p.DecodeEntry(r); e.Kind != span.SpanStart || e.Controller != strings.TrimPrefix(p.ID, "sync/") {
			t.Fatalf("%q: entry decoded as %+v", spec, e)
		}
		if e := p.DecodeReturn(r); e.Kind != span.SpanEnd || e.Result != span.ResultSuccess {
			t.Fatalf("%q: return decoded as %+v", spec, e)
		}
	})
}

// FuzzDecodeSyncEntry: a sync handler's key (from traced memory, at most 128 bytes, possibly
// cut in the middle of a character) is split into namespace and name at its first '/', as
// client-go's cache keys are, and nothing of it is lost or invented.
func FuzzDecodeSyncEntry(f *testing.F) {
	for _, k := range []string{"default/web-7d9f", "kube-system/coredns", "cluster-scoped", "", "/", "a/b/c", "ns/", "/name", "\xff\xfe/\x00", strings.Repeat("x", 128)} {
		f.Add(k, false)
	}
	f.Add(strings.Repeat("n", 60)+"/"+strings.Repeat("é", 34)[:67], true)
	f.Fuzz(func(t *testing.T, key string, truncated bool) {
		r := &Raw{Str: [6]string{key}, Truncated: [6]bool{truncated}, Goid: 7, PID: 42}
		e := decodeSyncEntry("replicaset")(r)
		if e.Kind != span.SpanStart || e.Controller != "replicaset" || e.PID != 42 || e.Goid != 7 {
			t.Fatalf("%q: decoded as %+v", key, e)
		}
		if e.Incomplete != truncated {
			t.Fatalf("%q: incomplete %v, truncated %v", key, e.Incomplete, truncated)
		}
		if strings.Contains(key, "/") {
			if e.Namespace+"/"+e.Name != key || strings.Contains(e.Namespace, "/") {
				t.Fatalf("%q: split into %q and %q", key, e.Namespace, e.Name)
			}
		} else if e.Namespace != "" || e.Name != key {
			t.Fatalf("%q: split into %q and %q", key, e.Namespace, e.Name)
		}
		if utf8.ValidString(key) && (!utf8.ValidString(e.Namespace) || !utf8.ValidString(e.Name)) {
			t.Fatalf("%q: a valid key split into invalid UTF-8", key)
		}
	})
}
