package symbols

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Offset is the byte offset of a struct field, and where it came from.
type Offset struct {
	Value uint64
	// Source is "dwarf" (read from the binary itself) or "table" (the embedded offsets
	// table, for binaries built without DWARF).
	Source string
	// Version is, for Source "table", the Go or module version of the table entry used: the
	// binary's own version, or another patch release of the same minor series when every
	// recorded patch release of that series agrees on the offset.
	Version string
}

type offsetResult struct {
	off Offset
	err error
}

// FieldOffset returns the offset of a field in a struct type, for example
// ("runtime.g", "goid"), ("k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta", "UID") or
// ("k8s.io/apimachinery/pkg/api/errors.StatusError", "ErrStatus.Message") for a nested field
// (the path may not go through pointers; promoted fields of embedded structs are found too).
// A generic type may be named without its type arguments
// ("sigs.k8s.io/controller-runtime/pkg/internal/controller.Controller"): the first
// instantiation that is not a GC shape is used (the layout does not depend on them for the
// fields reconscope reads).
//
// The binary's DWARF answers first; it is decoded only as far as needed and the answer is
// cached. Without DWARF (or without that type in it) the embedded offsets table answers, keyed
// by the Go version for standard-library types and by the version of the module that defines
// the type (from Modules). Otherwise the error wraps ErrOffsetUnknown and says which type,
// field and version were missing.
func (b *Binary) FieldOffset(typeName, fieldPath string) (Offset, error) {
	key := typeName + "\x00" + fieldPath
	b.mu.Lock()
	if r, ok := b.offsets[key]; ok {
		b.mu.Unlock()
		return r.off, r.err
	}
	b.mu.Unlock()
	off, err := b.fieldOffset(typeName, fieldPath)
	b.mu.Lock()
	if b.offsets == nil {
		b.offsets = map[string]offsetResult{}
	}
	b.offsets[key] = offsetResult{off, err}
	b.mu.Unlock()
	return off, err
}

func (b *Binary) fieldOffset(typeName, fieldPath string) (Offset, error) {
	if typeName == "" || fieldPath == "" {
		return Offset{}, fmt.Errorf("field offset %q.%q: %w: empty type or field name", typeName, fieldPath, ErrOffsetUnknown)
	}
	module, version := b.moduleOf(typeName)
	var dwarfProblem string
	switch {
	case !b.HasDWARF:
		dwarfProblem = "the binary has no DWARF (built with -ldflags=-w)"
	case module == "":
		dwarfProblem = "no module of the binary provides package " + TypePackage(typeName)
	default:
		b.mu.Lock()
		dwarf := b.dwarf // ReleaseDWARF may replace it
		b.mu.Unlock()
		d, err := dwarf()
		if err == nil && d != nil {
			var off uint64
			var found bool
			off, found, err = d.fieldOffset(typeName, fieldPath)
			if err == nil && found {
				return Offset{Value: off, Source: "dwarf"}, nil
			}
			if found {
				// The binary's own description of the type says no: the table cannot know
				// better for this binary.
				return Offset{}, fmt.Errorf("field offset %s.%s in %s: %w: %v", typeName, fieldPath, b.name(), ErrOffsetUnknown, err)
			}
		}
		if err != nil {
			dwarfProblem = "its DWARF could not be read (" + err.Error() + ")"
		} else {
			dwarfProblem = "its DWARF has no type " + typeName
		}
	}
	if module == "" {
		return Offset{}, fmt.Errorf("field offset %s.%s in %s: %w: %s; is the package linked into this program?", typeName, fieldPath, b.name(), ErrOffsetUnknown, dwarfProblem)
	}
	if off, ok := lookupTable(typeName, fieldPath, module, version, b.Arch); ok {
		return off, nil
	}
	what := "module " + module + " " + version
	if module == "std" {
		what = "Go version " + version
	}
	known := tableVersions(typeName, fieldPath)
	hint := "the offsets table has no entry for it"
	if len(known) > 0 {
		hint = "the offsets table knows it for " + strings.Join(known, ", ") + " only"
	}
	return Offset{}, fmt.Errorf("field offset %s.%s in %s: %w: %s, and for %s %s; %s",
		typeName, fieldPath, b.name(), ErrOffsetUnknown, dwarfProblem, what, hint, b.addHint(module, version))
}

// addHint says how to make an unknown offset known: the offsetgen command that adds the
// version to the table, or, for a version no generator can fetch, a build with DWARF.
func (b *Binary) addHint(module, version string) string {
	const noDWARF = "rebuild the program without -ldflags=-w (its DWARF then answers)"
	version, _, _ = strings.Cut(version, " ")
	const gen = "go run ./internal/cmd/offsetgen -o pkg/symbols/offsets_table.json"
	var cmd string
	switch module {
	case "std":
		if versionSeries(version) == "" {
			return noDWARF
		}
		cmd = gen + " -go " + version + " -client-go none -controller-runtime none"
	case "k8s.io/client-go", "k8s.io/apimachinery":
		v := version
		if cg, ok := b.Modules["k8s.io/client-go"]; ok {
			v = cg // the generator's client-go program pulls in the apimachinery it needs
		}
		if versionSeries(v) == "" {
			return noDWARF + "; " + module + " " + version + " is not a release the offsets table can be generated for"
		}
		cmd = gen + " -std=false -client-go " + v + " -controller-runtime none"
	case "sigs.k8s.io/controller-runtime":
		if versionSeries(version) == "" {
			return noDWARF + "; " + module + " " + version + " is not a release the offsets table can be generated for"
		}
		cmd = gen + " -std=false -client-go none -controller-runtime " + version
	default:
		return noDWARF
	}
	return "add " + version + " to the table (in reconscope's source tree: " + cmd + "), or " + noDWARF
}

// moduleOf returns the module that defines typeName's package and its version in this
// binary: ("std", GoVersion) for the standard library, "" if no module of the binary
// provides the package.
func (b *Binary) moduleOf(typeName string) (module, version string) {
	modules := slices.Collect(maps.Keys(b.Modules))
	if b.MainModule != "" {
		modules = append(modules, b.MainModule)
	}
	switch m := PackageModule(TypePackage(typeName), modules); m {
	case "":
		return "", ""
	case "std":
		return "std", b.GoVersion
	default:
		v, _ := b.ModuleVersion(m)
		return m, v
	}
}

// PackageModule returns the module of modules that provides the package pkg: "std" for the
// standard library (no dot in the path's first element, or a main package "main"), else the
// longest of modules that is pkg or a prefix of it, "" when none is. The offsets table keys an
// entry by it (internal/cmd/offsetgen), FieldOffset looks it up by it.
func PackageModule(pkg string, modules []string) string {
	first, _, _ := strings.Cut(pkg, "/")
	if !strings.Contains(first, ".") {
		return "std"
	}
	best := ""
	for _, m := range modules {
		if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// The offsets table, generated by internal/cmd/offsetgen.
//
//go:embed offsets_table.json
var offsetsTableJSON []byte

// OffsetTable is the file format of the offsets table, offsets_table.json, which
// internal/cmd/offsetgen writes and FieldOffset reads.
type OffsetTable struct {
	Comment string        `json:"comment"`
	Entries []OffsetEntry `json:"entries"`
}

// OffsetEntry is one entry of the offsets table: the offset of a field of Type in Version of
// Module (Module "std": the Go release), for Arch only when the architectures differ.
type OffsetEntry struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	Arch    string `json:"arch,omitempty"`
	Type    string `json:"type"`
	Field   string `json:"field"`
	Offset  uint64 `json:"offset"`
}

var offsetsTable = sync.OnceValues(func() (map[string][]OffsetEntry, error) {
	var t OffsetTable
	if err := json.Unmarshal(offsetsTableJSON, &t); err != nil {
		return nil, fmt.Errorf("read the embedded offsets table: %w", err)
	}
	m := map[string][]OffsetEntry{}
	for _, e := range t.Entries {
		k := e.Type + "\x00" + e.Field
		m[k] = append(m[k], e)
	}
	return m, nil
})

func lookupTable(typeName, fieldPath, module, version, arch string) (Offset, bool) {
	table, err := offsetsTable()
	if err != nil {
		return Offset{}, false
	}
	if i := strings.IndexByte(typeName, '['); i > 0 {
		typeName = typeName[:i]
	}
	version, _, _ = strings.Cut(version, " ") // drop " X:experiment" suffixes
	if version == "" {
		return Offset{}, false
	}
	var series []OffsetEntry
	for _, e := range table[typeName+"\x00"+fieldPath] {
		if e.Module != module || (e.Arch != "" && e.Arch != arch) {
			continue
		}
		if e.Version == version {
			return Offset{Value: e.Offset, Source: "table", Version: e.Version}, true
		}
		if s := versionSeries(e.Version); s != "" && s == versionSeries(version) {
			series = append(series, e)
		}
	}
	// Another patch release of the same minor series: trusted only when every recorded
	// patch release of the series has the same offset.
	if len(series) == 0 {
		return Offset{}, false
	}
	for _, e := range series[1:] {
		if e.Offset != series[0].Offset {
			return Offset{}, false
		}
	}
	return Offset{Value: series[0].Offset, Source: "table", Version: series[0].Version}, true
}

func tableVersions(typeName, fieldPath string) []string {
	table, err := offsetsTable()
	if err != nil {
		return nil
	}
	if i := strings.IndexByte(typeName, '['); i > 0 {
		typeName = typeName[:i]
	}
	var out []string
	for _, e := range table[typeName+"\x00"+fieldPath] {
		if !slices.Contains(out, e.Version) {
			out = append(out, e.Version)
		}
	}
	return out
}

// versionSeries returns "v0.37" for "v0.37.2" and "go1.26" for "go1.26.8"; "" if the
// version has no patch part to drop or is a pseudo-version.
func versionSeries(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) != 3 || strings.ContainsAny(v, "-+") {
		return ""
	}
	return parts[0] + "." + parts[1]
}
