package main

// The table: entries that agree on every architecture folded into one, the fresh entries
// merged into the committed ones by version, and the file written.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// collapseArches folds entries that agree on every architecture into one entry without
// arch. Entries that differ keep their arch.
func collapseArches(entries []symbols.OffsetEntry, arches []string) []symbols.OffsetEntry {
	type key struct{ module, version, typ, field string }
	byKey := map[key]map[string]uint64{}
	var order []key
	for _, e := range entries {
		k := key{e.Module, e.Version, e.Type, e.Field}
		if byKey[k] == nil {
			byKey[k] = map[string]uint64{}
			order = append(order, k)
		}
		byKey[k][e.Arch] = e.Offset
	}
	var out []symbols.OffsetEntry
	for _, k := range order {
		offs := byKey[k]
		same := true
		var first uint64
		i := 0
		for _, o := range offs {
			if i == 0 {
				first = o
			} else if o != first {
				same = false
			}
			i++
		}
		if same {
			out = append(out, symbols.OffsetEntry{Module: k.module, Version: k.version, Type: k.typ, Field: k.field, Offset: first})
			continue
		}
		for _, a := range arches {
			if o, ok := offs[a]; ok {
				out = append(out, symbols.OffsetEntry{Module: k.module, Version: k.version, Arch: a, Type: k.typ, Field: k.field, Offset: o})
			}
		}
	}
	return out
}

// merge replaces the old entries of every (module, version) that fresh covers.
func merge(old, fresh []symbols.OffsetEntry) []symbols.OffsetEntry {
	type mv struct{ module, version string }
	covered := map[mv]bool{}
	for _, e := range fresh {
		covered[mv{e.Module, e.Version}] = true
	}
	var out []symbols.OffsetEntry
	for _, e := range old {
		if !covered[mv{e.Module, e.Version}] {
			out = append(out, e)
		}
	}
	out = append(out, fresh...)
	slices.SortStableFunc(out, func(a, b symbols.OffsetEntry) int {
		if c := strings.Compare(a.Module, b.Module); c != 0 {
			return c
		}
		if c := compareVersions(a.Version, b.Version); c != 0 {
			return c
		}
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Arch, b.Arch)
	})
	return slices.CompactFunc(out, func(a, b symbols.OffsetEntry) bool { return a == b })
}

// parseVersion reads "v1.2.3" or "go1.2.3" (a missing patch is 0); pre-releases are refused.
func parseVersion(v string) ([3]int, bool) {
	var n [3]int
	v = strings.TrimPrefix(strings.TrimPrefix(v, "go"), "v")
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return n, false
	}
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return n, false
		}
		n[i] = x
	}
	return n, true
}

func compareVersions(a, b string) int {
	na, oka := parseVersion(a)
	nb, okb := parseVersion(b)
	if !oka || !okb {
		return strings.Compare(a, b)
	}
	for i := range na {
		if c := na[i] - nb[i]; c != 0 {
			if c < 0 {
				return -1
			}
			return 1
		}
	}
	return 0
}

// writeTable writes one entry per line so that a refresh reads well as a diff.
func writeTable(path string, t symbols.OffsetTable) error {
	var buf bytes.Buffer
	c, _ := json.Marshal(t.Comment)
	fmt.Fprintf(&buf, "{\n  \"comment\": %s,\n  \"entries\": [\n", c)
	for i, e := range t.Entries {
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		sep := ","
		if i == len(t.Entries)-1 {
			sep = ""
		}
		fmt.Fprintf(&buf, "    %s%s\n", line, sep)
	}
	buf.WriteString("  ]\n}\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
