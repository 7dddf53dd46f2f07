// Package groundtruth is the line fakectl prints for each reconcile it finished, and its
// reader. It has no dependencies, so the traced program links nothing of reconscope.
package groundtruth

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
)

// Truth is one reconcile, as fakectl saw it from the inside.
type Truth struct {
	Controller   string `json:"controller"`
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	Outcome      string `json:"outcome"`
	ErrorType    string `json:"error_type"`
	Error        string `json:"error"`
	RequeueAfter int64  `json:"requeue_after_ns"`
	ReconcileID  string `json:"reconcile_id"`
}

// Read parses fakectl's output.
func Read(b []byte) ([]Truth, error) {
	var out []Truth
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var tr Truth
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
			return out, fmt.Errorf("ground truth %q: %w", sc.Text(), err)
		}
		out = append(out, tr)
	}
	return out, sc.Err()
}
