// Package verdict is the budget check of reconscope's benchmarks: what every part of `make bench`
// (the bench command's subcommands, the at-scale benchmark) appends to one JSON-lines file, and
// what `bench summary` and `bench compare` read back.
package verdict

import (
	"encoding/json"
	"fmt"
	"os"
)

// Verdict is one budget check.
type Verdict struct {
	Figure   string `json:"figure"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	// Value is the measured figure as a number in Unit ("ns", "B", "×", "events/cpu-s", ...):
	// what bench compare sets side by side with the previous run.
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	Met   bool    `json:"met"`
	Why   string  `json:"why,omitempty"`
	// Warm is what a machine whose TLB survives the trap would pay, measured here as the
	// program's second run in the same trap (bench overhead); empty for other figures.
	Warm string `json:"warm,omitempty"`
}

// Append adds vs to the JSON-lines file at path, creating it if needed.
func Append(path string, vs ...Verdict) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("record verdict: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			f.Close()
			return fmt.Errorf("record verdict: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("record verdict: %w", err)
	}
	return nil
}
