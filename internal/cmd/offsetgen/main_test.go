package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// committedFile is pkg/symbols/offsets_table.json: its bytes and the table pkg/symbols reads.
type committedFile struct {
	data  []byte
	table symbols.OffsetTable
}

func committedTable(t *testing.T) committedFile {
	t.Helper()
	data, err := os.ReadFile("../../../pkg/symbols/offsets_table.json")
	if err != nil {
		t.Fatal(err)
	}
	var table symbols.OffsetTable
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	return committedFile{data, table}
}

// TestTableRoundTrip: the committed table, read into the type pkg/symbols reads it with and
// written back by the generator, is byte for byte what is committed, so a regenerated table
// loses no field of the entries that pkg/symbols reads.
func TestTableRoundTrip(t *testing.T) {
	c := committedTable(t)
	committed, table := c.data, c.table
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
