// Package fakectltest is what tests need around the fakectl program (test/fakectl): its
// ground-truth line, the probe that traces it, a span sink, and the comparison of a span with
// the reconcile it stands for. The tracer, reliability and soak tests share it.
package fakectltest

import (
	"fmt"
	"regexp"
	"sync"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/fakectl/groundtruth"
)

// Truth is one reconcile as fakectl reports it.
type Truth = groundtruth.Truth

// ReadTruths parses fakectl's output.
func ReadTruths(b []byte) ([]Truth, error) { return groundtruth.Read(b) }

// Probe is the catalog's controller-runtime (v0.23+) reconcile probe pointed at fakectl, whose
// package main has the same function shape.
func Probe() (*probes.Probe, error) {
	for _, p := range probes.Catalog {
		if p.ID == "controller-runtime/reconcile" && p.MinVersion == "v0.23.0" {
			q := *p
			q.ID, q.Module, q.MinVersion = "test/fake-reconcile", "", ""
			q.Symbol = regexp.MustCompile(`^main\.\(\*Controller\[go\.shape\..*\]\)\.Reconcile$`)
			q.Entry.Strings[0].Field = probes.FieldRef{Type: "main.Controller", Path: "Name"}
			return &q, nil
		}
	}
	return nil, fmt.Errorf("the catalog has no controller-runtime v0.23+ reconcile probe")
}

// ReturnAddressProbe is Probe with its return sites at the return address of each call of the
// reconcile in fakectl's package main (its handle method), as the catalog's probe has them in
// controller-runtime's internal controller package, instead of at the RETs.
func ReturnAddressProbe() (*probes.Probe, error) {
	p, err := Probe()
	if err != nil {
		return nil, err
	}
	p.ReturnCallers = regexp.MustCompile(`^main\.`)
	return p, nil
}

// ListProbe is the catalog's controller-runtime cache-list probe pointed at fakectl's
// (*informerCache).List, which fakectl -spawn calls from a goroutine each reconcile starts.
func ListProbe() (*probes.Probe, error) {
	for _, p := range probes.Catalog {
		if p.ID == "controller-runtime/cache-list" {
			q := *p
			q.ID, q.Module = "test/fake-list", ""
			q.Symbol = regexp.MustCompile(`^main\.\(\*informerCache\)\.List$`)
			return &q, nil
		}
	}
	return nil, fmt.Errorf("the catalog has no controller-runtime cache-list probe")
}

// Sink collects spans; safe for the tracer writing while a test reads.
type Sink struct {
	mu    sync.Mutex
	spans []span.Span
}

// Write implements tracer.Writer.
func (s *Sink) Write(sp *span.Span) error {
	s.mu.Lock()
	s.spans = append(s.spans, *sp)
	s.mu.Unlock()
	return nil
}

// Snapshot returns the spans so far.
func (s *Sink) Snapshot() []span.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]span.Span(nil), s.spans...)
}

// Count returns how many spans came.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.spans)
}

// Mismatch lists how span s differs from the ground truth tr of the same reconcile.
// checkController false skips the controller's name (stripped builds have no DWARF for
// main.Controller's Name, and the offsets table does not know fakectl).
func Mismatch(tr Truth, s span.Span, checkController bool) []string {
	var p []string
	if checkController && s.Controller != tr.Controller {
		p = append(p, fmt.Sprintf("controller %q", s.Controller))
	}
	if s.Namespace != tr.Namespace || s.Name != tr.Name {
		p = append(p, fmt.Sprintf("object %s/%s", s.Namespace, s.Name))
	}
	if string(s.Result) != tr.Outcome {
		p = append(p, fmt.Sprintf("result %s", s.Result))
	}
	if s.ErrorType != tr.ErrorType {
		p = append(p, fmt.Sprintf("error type %q", s.ErrorType))
	}
	if (tr.ErrorType == "*errors.errorString" || tr.ErrorType == "*fmt.wrapError") && s.Error != tr.Error {
		p = append(p, fmt.Sprintf("error %q", s.Error))
	}
	if int64(s.RequeueAfter) != tr.RequeueAfter {
		p = append(p, fmt.Sprintf("requeue after %v", s.RequeueAfter))
	}
	if s.ReconcileID != tr.ReconcileID {
		p = append(p, fmt.Sprintf("reconcile ID %q", s.ReconcileID))
	}
	if s.Goid <= 0 || s.Duration <= 0 {
		p = append(p, fmt.Sprintf("goid %d duration %v", s.Goid, s.Duration))
	}
	return p
}
