package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// TestTableRoundTrip: the committed table, read into the type pkg/symbols reads it with and
// written back by the generator, is byte for byte what is committed, so a regenerated table
// loses no field of the entries that pkg/symbols reads.
func TestTableRoundTrip(t *testing.T) {
	committed, err := os.ReadFile("../../../pkg/symbols/offsets_table.json")
	if err != nil {
		t.Fatal(err)
	}
	var table symbols.OffsetTable
	if err := json.Unmarshal(committed, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Entries) == 0 {
		t.Fatal("the committed table has no entries")
	}
	out := filepath.Join(t.TempDir(), "offsets_table.json")
	if err := writeTable(out, table); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(written, committed) {
		t.Errorf("the table written back differs from the committed one (%d bytes, %d committed)", len(written), len(committed))
	}
}
