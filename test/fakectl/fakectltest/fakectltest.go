// Package fakectltest is what tests and benchmarks need around the fake controller
// (test/fakectl; the benchmarks' reconcileloop has the same Reconcile in its package main): the
// probe that traces it, fakectl's ground truth, and the comparison of a span with the
// reconcile it stands for. The tracer, reliability, soak and kernel tests and the benchmarks
// share it.
package fakectltest

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// Truth is one reconcile as fakectl reports it.
type Truth = groundtruth.Record

// ReadTruths parses fakectl's output.
func ReadTruths(b []byte) ([]Truth, error) { return groundtruth.Read(bytes.NewReader(b)) }

// Probe is the catalog's controller-runtime (v0.23+) reconcile probe pointed at fakectl (and
// reconcileloop), whose package main has the same function shape.
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

// Catalog is a catalog of Probe alone, for a tracer of the fake controller; it fails t when the
// probe cannot be made.
func Catalog(t testing.TB) []*probes.Probe {
	t.Helper()
	p, err := Probe()
	if err != nil {
		t.Fatal(err)
	}
	return []*probes.Probe{p}
}

// Mismatch lists how span s differs from the ground truth tr of the same reconcile.
// checkController false skips the controller's name (stripped builds have no DWARF for
// the fake Controller's Name, and the offsets table does not know fakectl).
func Mismatch(tr Truth, s span.Span, checkController bool) []string {
	var p []string
	if checkController && s.Controller != tr.Controller {
		p = append(p, fmt.Sprintf("controller %q", s.Controller))
	}
	if s.Namespace != tr.Namespace || s.Name != tr.Name {
		p = append(p, fmt.Sprintf("object %s/%s", s.Namespace, s.Name))
	}
	if string(s.Result) != string(tr.Outcome) {
		p = append(p, fmt.Sprintf("result %s", s.Result))
	}
	if s.ErrorType != tr.ErrorType {
		p = append(p, fmt.Sprintf("error type %q", s.ErrorType))
	}
	if (tr.ErrorType == "*errors.errorString" || tr.ErrorType == "*fmt.wrapError") && s.Error != tr.Error {
		p = append(p, fmt.Sprintf("error %q", s.Error))
	}
	if int64(s.RequeueAfter) != tr.RequeueAfterNS {
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
