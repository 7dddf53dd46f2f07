// Package fakectltest is what tests and benchmarks need around the fake controller
// (test/fakectl; the benchmarks' reconcileloop calls the same Reconcile, the one in
// test/fakectl/controller): the probe that traces it and fakectl's ground truth
// (testkit.Compare checks spans against it). The tracer, reliability, soak and kernel tests and
// the benchmarks share it.
package fakectltest

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/test/fakectl/controller"
	"github.com/reconscope/reconscope/test/groundtruth"
)

// Truth is one reconcile as fakectl reports it.
type Truth = groundtruth.Record

// ReadTruths parses fakectl's output.
func ReadTruths(b []byte) ([]Truth, error) { return groundtruth.Read(bytes.NewReader(b)) }

// Probe is the catalog's controller-runtime (v0.23+) reconcile probe pointed at the fake
// controller's Reconcile (test/fakectl/controller), which fakectl and reconcileloop call.
func Probe() (*probes.Probe, error) {
	for _, p := range probes.Catalog() {
		if p.ID == "controller-runtime/reconcile" && p.MinVersion == "v0.23.0" {
			q := *p
			q.ID, q.Module, q.MinVersion = "test/fake-reconcile", "", ""
			q.Symbol = regexp.MustCompile(`^` + regexp.QuoteMeta(controller.Path) + `\.\(\*Controller\[go\.shape\..*\]\)\.Reconcile$`)
			q.Entry.Strings[0].Field = probes.FieldRef{Type: controller.Path + ".Controller", Path: "Name"}
			return &q, nil
		}
	}
	return nil, fmt.Errorf("the catalog has no controller-runtime v0.23+ reconcile probe")
}

// ReturnAddressProbe is Probe with its return sites at the return address of each call of the
// reconcile in the fake controller's package (its Handle method, the only caller in fakectl),
// as the catalog's probe has them in controller-runtime's internal controller package, instead
// of at the RETs.
func ReturnAddressProbe() (*probes.Probe, error) {
	p, err := Probe()
	if err != nil {
		return nil, err
	}
	p.ReturnCallers = regexp.MustCompile(`^` + regexp.QuoteMeta(controller.Path) + `\.`)
	return p, nil
}

// ListProbe is the catalog's controller-runtime cache-list probe pointed at fakectl's
// (*informerCache).List, which fakectl -spawn calls from a goroutine each reconcile starts.
func ListProbe() (*probes.Probe, error) {
	for _, p := range probes.Catalog() {
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

// CheckEachOnce fails t unless truths holds each of fakectl's objects obj-0- … obj-(n-1)-
// exactly once, n being how many it holds, and returns n.
func CheckEachOnce(t testing.TB, truths []Truth) int {
	t.Helper()
	seen := map[string]bool{}
	for _, tr := range truths {
		if seen[tr.Name] {
			t.Fatalf("%s reconciled twice", tr.Name)
		}
		seen[tr.Name] = true
	}
	for i := range len(truths) {
		if !seen[fmt.Sprintf("obj-%d-", i)] {
			t.Fatalf("obj-%d- missing from fakectl's %d reconciles", i, len(truths))
		}
	}
	return len(truths)
}
