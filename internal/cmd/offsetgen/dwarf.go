package main

// Reading the offsets back: the struct types of a built program's DWARF, and each target
// field's offset along its path.

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"maps"
	"strings"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// readOffsets reads every target's field offsets from the DWARF of bin. Types that the
// program does not contain are skipped; fields a version lacks are skipped.
func readOffsets(bin, arch string, modulesOnly bool) ([]symbols.OffsetEntry, error) {
	b, err := symbols.Open(bin)
	if err != nil {
		return nil, err
	}
	versions := map[string]string{"std": b.GoVersion}
	maps.Copy(versions, b.Modules) // the versions FieldOffset keys a lookup by
	b.Close()
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		return nil, err
	}
	structs, err := findStructs(d)
	if err != nil {
		return nil, err
	}
	var entries []symbols.OffsetEntry
	for _, t := range targets {
		if modulesOnly && t.Module == "std" || !modulesOnly && t.Module != "std" {
			continue
		}
		v, ok := versions[t.Module]
		if !ok {
			continue
		}
		st, ok := structs[t.Type]
		if !ok {
			continue
		}
		for _, path := range t.Fields {
			off, err := fieldPath(st, path)
			if err != nil {
				continue // this version has no such field
			}
			entries = append(entries, symbols.OffsetEntry{Module: t.Module, Version: v, Arch: arch, Type: t.Type, Field: path, Offset: off})
		}
	}
	return entries, nil
}

// findStructs returns the struct types of the DWARF by name. A generic type is also
// filed under its name without the type arguments (the first instantiation that is not a
// shape wins), which is how pkg/symbols lets callers ask for "pkg.Controller".
func findStructs(d *dwarf.Data) (map[string]*dwarf.StructType, error) {
	wanted := map[string]bool{}
	for _, t := range targets {
		wanted[t.Type] = true
	}
	out := map[string]*dwarf.StructType{}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType {
			if e.Tag != dwarf.TagCompileUnit {
				r.SkipChildren()
			}
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		key := name
		if i := strings.IndexByte(name, '['); i > 0 {
			if strings.Contains(name, "go.shape.") {
				r.SkipChildren()
				continue
			}
			key = name[:i]
		}
		if wanted[key] && out[key] == nil {
			t, err := d.Type(e.Offset)
			if err != nil {
				return nil, err
			}
			if st, ok := t.(*dwarf.StructType); ok {
				out[key] = st
			}
		}
		r.SkipChildren()
	}
	return out, nil
}

func fieldPath(st *dwarf.StructType, path string) (uint64, error) {
	var off uint64
	parts := strings.Split(path, ".")
	for i, p := range parts {
		var found *dwarf.StructField
		for _, f := range st.Field {
			if f.Name == p {
				found = f
				break
			}
		}
		if found == nil {
			return 0, fmt.Errorf("no field %s in %s", p, st.StructName)
		}
		off += uint64(found.ByteOffset)
		if i == len(parts)-1 {
			break
		}
		t := found.Type
		for {
			td, ok := t.(*dwarf.TypedefType)
			if !ok {
				break
			}
			t = td.Type
		}
		next, ok := t.(*dwarf.StructType)
		if !ok {
			return 0, fmt.Errorf("field %s of %s is not a struct", p, st.StructName)
		}
		st = next
	}
	return off, nil
}
