package main

import (
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// fieldRefs collects every probes.FieldRef with a type that v holds, through pointers,
// structs, arrays and slices.
func fieldRefs(v reflect.Value, seen map[uintptr]bool, out *[]probes.FieldRef) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || seen[v.Pointer()] {
			return
		}
		seen[v.Pointer()] = true
		fieldRefs(v.Elem(), seen, out)
	case reflect.Struct:
		if f, ok := v.Interface().(probes.FieldRef); ok {
			if f.Type != "" {
				*out = append(*out, f)
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fieldRefs(v.Field(i), seen, out)
			}
		}
	case reflect.Array, reflect.Slice:
		for i := range v.Len() {
			fieldRefs(v.Index(i), seen, out)
		}
	}
}

// TestTargetsCoverCatalog: every struct field the catalog names anywhere in its probes (found
// by walking them, not through probes.FieldsRead), every error message field and the
// goroutine ID are targets of the generator, the generator can write a program that links in
// each target's type, and the committed table has every target (a catalog field the table
// lacks means the table was not regenerated).
func TestTargetsCoverCatalog(t *testing.T) {
	var want []probes.FieldRef
	fieldRefs(reflect.ValueOf(probes.Catalog()), map[uintptr]bool{}, &want)
	want = append(want, probes.ErrorMessageFields...)
	want = append(want, probes.FieldRef{Type: "runtime.g", Path: "goid"})
	if len(want) < 10 {
		t.Fatalf("the walk of the catalog found only %v", want)
	}
	has := func(typ, field string) bool {
		return slices.ContainsFunc(targets, func(tg target) bool { return tg.Type == typ && slices.Contains(tg.Fields, field) })
	}
	for _, f := range want {
		if !has(f.Type, f.Path) {
			t.Errorf("the catalog reads %s %s, which is not a target of the generator", f.Type, f.Path)
		}
	}
	if _, err := programs(targets); err != nil {
		t.Error(err)
	}
	inTable := map[string]string{} // type+field: module
	for _, e := range committedTable(t).table.Entries {
		inTable[e.Type+" "+e.Field] = e.Module
	}
	for _, tg := range targets {
		for _, f := range tg.Fields {
			switch m, ok := inTable[tg.Type+" "+f]; {
			case !ok:
				t.Errorf("the committed table has no entry for %s %s: regenerate it (go run ./internal/cmd/offsetgen)", tg.Type, f)
			case m != tg.Module:
				t.Errorf("%s: module %s by its version set, %s in the table", tg.Type, tg.Module, m)
			}
		}
	}
}

// TestTypeModule: a type's module is the version set's module that provides its package, as
// pkg/symbols finds it in a binary; a package no set builds has none, which programs refuses.
func TestTypeModule(t *testing.T) {
	for typ, want := range map[string]string{
		"runtime.g":                     "std",
		"net/http.Response":             "std",
		"k8s.io/client-go/rest.Request": "k8s.io/client-go",
		"k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta":                   "k8s.io/apimachinery",
		"sigs.k8s.io/controller-runtime/pkg/internal/controller.Controller": "sigs.k8s.io/controller-runtime",
		"k8s.io/client-go/util/workqueue.Typed[string]":                     "k8s.io/client-go",
		"github.com/owner/repo/pkg/x.T":                                     "",
		"k8s.io/client-go-extra/x.T":                                        "",
	} {
		if got := typeModule(typ); got != want {
			t.Errorf("typeModule(%q) = %q, want %q", typ, got, want)
		}
	}
}

// TestRegenerateOwnVersions regenerates the entries of the versions this module builds with
// (its Go toolchain, and the client-go and controller-runtime of its go.mod) and compares them
// with the committed table: every target is found, at the offset the table has.
func TestRegenerateOwnVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds client-go and controller-runtime programs: skipped with -short")
	}
	data, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	version := func(path string) string {
		for _, r := range mod.Require {
			if r.Mod.Path == path {
				return r.Mod.Version
			}
		}
		t.Fatalf("go.mod does not require %s", path)
		return ""
	}
	progs, err := programs(targets)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	work := t.TempDir()
	arches := []string{"amd64", "arm64"}
	var fresh []symbols.OffsetEntry
	for _, arch := range arches {
		es, err := generate(log, work, "std-"+arch, arch, "local", progs[stdSet.module], nil)
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, es...)
	}
	for _, m := range []string{clientGoSet.module, crSet.module} {
		v := version(m)
		es, err := generate(log, work, strings.ReplaceAll(m, "/", "_")+"-"+v, arches[0], "local", progs[m], map[string]string{m: v})
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, es...)
	}
	fresh = collapseArches(fresh, arches)

	type key struct{ module, version, arch, typ, field string }
	committed := map[key]uint64{}
	for _, e := range committedTable(t).table.Entries {
		committed[key{e.Module, e.Version, e.Arch, e.Type, e.Field}] = e.Offset
	}
	found := map[string]bool{}
	for _, e := range fresh {
		found[e.Type+" "+e.Field] = true
		k := key{e.Module, e.Version, e.Arch, e.Type, e.Field}
		off, ok := committed[k]
		switch {
		case !ok:
			t.Logf("new entry (the table does not have %s %s yet): %+v", e.Module, e.Version, e)
		case off != e.Offset:
			t.Errorf("%+v: offset %d, the committed table says %d", e, e.Offset, off)
		}
	}
	for _, tg := range targets {
		for _, f := range tg.Fields {
			if !found[tg.Type+" "+f] {
				t.Errorf("no regenerated entry (Go %s and go.mod's modules) has %s %s", runtime.Version(), tg.Type, f)
			}
		}
	}
	t.Logf("%d entries regenerated", len(fresh))
}
