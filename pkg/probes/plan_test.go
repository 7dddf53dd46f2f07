package probes

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// The fixture controller: a real controller-runtime manager with client-go, the informer
// cache and the priority queue, so every catalog probe but the kube-controller-manager sync
// handlers finds its function.
const fixturePkg = "github.com/reconscope/reconscope/test/fixtures/scripted-controller"

// toolchains are the Go releases TestStrippedSitesMatchUnstripped builds with: the local one;
// go1.27.3 too with the compat build tag (make compat).
var toolchains = []string{"local"}

// crModule is controller-runtime's module path.
const crModule = "sigs.k8s.io/controller-runtime"

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{}
	buildDir   string
)

// buildWith builds pkg, an import path inside this module, with the given toolchain ("local"
// or a release) and linker flags, once per test binary.
func buildWith(t *testing.T, toolchain, pkg, ldflags string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a controller-runtime program: skipped with -short")
	}
	key := toolchain + "|" + pkg + "|" + ldflags
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := buildCache[key]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "probes-plan-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, fmt.Sprintf("bin%d", len(buildCache)))
	if err := testkit.GoBuild(out, pkg, []string{"GOTOOLCHAIN=" + toolchain}, "-ldflags="+ldflags); err != nil {
		t.Fatal(err)
	}
	buildCache[key] = out
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func planOf(t *testing.T, path string) *Plan {
	t.Helper()
	return planWith(t, path, Catalog())
}

// planWith is the plan of catalog for the binary at path.
func planWith(t *testing.T, path string, catalog []*Probe) *Plan {
	t.Helper()
	bin, err := symbols.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bin.Close() })
	plan, err := NewPlan(bin, catalog)
	if err != nil {
		t.Fatalf("plan of %s: %v", path, err)
	}
	return plan
}

// siteKey is what must agree between a stripped build and its unstripped twin.
func siteKey(s Site) string {
	return fmt.Sprintf("%s %s %v %#x %s %s", s.Probe.ID, s.Function.Name, s.Kind, s.Addr, s.Insn, s.In.Name)
}

// checkSitesInBodies checks that every site lies in the function it names, no function is
// probed by two layouts, and no entry site is an ABI0 wrapper's first instruction.
func checkSitesInBodies(t *testing.T, plan *Plan) {
	t.Helper()
	layouts := map[string]*Probe{}
	seen := map[string]bool{}
	for _, s := range plan.Sites {
		in := s.Function
		if s.In.Name != "" {
			in = s.In // a return address in a caller
		}
		if s.Addr < in.Entry || s.Addr >= in.End {
			t.Errorf("%s site %#x of %s is outside %s [%#x, %#x)", s.Kind, s.Addr, s.Function.Name, in.Name, in.Entry, in.End)
		}
		if strings.HasSuffix(s.Function.Name, ".abi0") {
			t.Errorf("%s: probe %s on an ABI0 function", s.Function.Name, s.Probe.ID)
		}
		if s.Kind == SiteEntry && strings.HasPrefix(s.Insn, "XORPS X15") {
			t.Errorf("%s: entry site %#x is %q, an ABI0 wrapper's (g is not in R14 yet)", s.Function.Name, s.Addr, s.Insn)
		}
		k := fmt.Sprintf("%s %#x", s.Probe.ID, s.Function.Entry)
		if p, ok := layouts[k]; ok && p != s.Probe {
			t.Errorf("%s: two layouts of %s attached", s.Function.Name, s.Probe.ID)
		}
		layouts[k] = s.Probe
		if seen[siteKey(s)] {
			t.Errorf("site listed twice: %s", siteKey(s))
		}
		seen[siteKey(s)] = true
	}
}

// comparePlans checks that the stripped build gets exactly the sites of its unstripped twin.
func comparePlans(t *testing.T, plain, stripped *Plan) {
	t.Helper()
	want := map[string]bool{}
	for _, s := range plain.Sites {
		want[siteKey(s)] = true
	}
	got := map[string]bool{}
	for _, s := range stripped.Sites {
		got[siteKey(s)] = true
		if !want[siteKey(s)] {
			t.Errorf("stripped build has a site its unstripped twin lacks: %s", siteKey(s))
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("stripped build lacks a site of its unstripped twin: %s", k)
		}
	}
	if len(plain.Sites) != len(stripped.Sites) {
		t.Errorf("%d sites unstripped, %d stripped", len(plain.Sites), len(stripped.Sites))
	}
}

// TestStrippedSitesMatchUnstripped: every catalog function of the fixture controller, built
// with each Go release this project traces, gets the same entry and return sites stripped
// (-s -w: functions from .gopclntab) as unstripped (.symtab), and every entry site is in the
// function's ABIInternal body.
func TestStrippedSitesMatchUnstripped(t *testing.T) {
	for _, tc := range toolchains {
		t.Run(tc, func(t *testing.T) {
			// -n -n (a no-op) keeps the recorded build settings as long as "-s -w", so the
			// twins' code sits at the same addresses.
			plain := planOf(t, buildWith(t, tc, fixturePkg, "-n -n"))
			stripped := planOf(t, buildWith(t, tc, fixturePkg, "-s -w"))
			if !stripped.Binary.Stripped || plain.Binary.Stripped {
				t.Fatal("the twins are not stripped and unstripped")
			}
			checkSitesInBodies(t, plain)
			checkSitesInBodies(t, stripped)
			comparePlans(t, plain, stripped)
			probed := map[string]bool{}
			for _, s := range stripped.Sites {
				probed[s.Probe.ID] = true
			}
			for _, id := range []string{"controller-runtime/reconcile", "controller-runtime/cache-get", "controller-runtime/cache-list",
				"client-go/request", "client-go/response", "runtime/goroutine-start", "runtime/goroutine-exit", "controller-runtime/queue-add", "controller-runtime/queue-rate-limit"} {
				if !probed[id] {
					t.Errorf("stripped build: probe %s has no site (missing: %v)", id, stripped.Missing)
				}
			}
			var exits int
			for _, s := range stripped.Sites {
				if s.Probe.ID == "runtime/goroutine-exit" {
					exits++
					if s.Function.Name != "runtime.goexit1" {
						t.Errorf("goroutine-exit probe on %s", s.Function.Name)
					}
				}
			}
			if exits != 1 {
				t.Errorf("goroutine-exit has %d sites in the stripped build, want 1", exits)
			}
			// The reconcile's return: with the local Go, at the return addresses of its two
			// callers, the 5-byte NOP after reconcileHandler's call (emulated) and the
			// instruction after the instantiation wrapper's; with another release, there or
			// at the RETs with the reason.
			var rets []string
			for _, s := range stripped.Sites {
				if s.Probe.ID == "controller-runtime/reconcile" && s.Kind == SiteReturn {
					rets = append(rets, fmt.Sprintf("%s %s", s.In.Name, s.Insn))
				}
			}
			var choice Choice
			for _, c := range stripped.Choices {
				if c.ProbeID == "controller-runtime/reconcile" {
					choice = c
				}
			}
			handler := "sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[go.shape.struct { k8s.io/apimachinery/pkg/types.NamespacedName }]).reconcileHandler NOPL 0(AX)(AX*1)"
			wrapper := "sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[sigs.k8s.io/controller-runtime/pkg/reconcile.Request]).Reconcile "
			atAddresses := len(rets) == 2 && (rets[0] == handler || rets[1] == handler) && (strings.HasPrefix(rets[0], wrapper) || strings.HasPrefix(rets[1], wrapper))
			switch {
			case atAddresses && choice.Why == "":
			case tc != "local" && choice.Why != "" && !slices.ContainsFunc(rets, func(r string) bool { return r != " RET" }):
				t.Logf("reconcile returns at the RETs: %s", choice.Why)
			default:
				t.Errorf("reconcile return sites %q (choice %+v), want reconcileHandler's NOPL and the wrapper's return address", rets, choice)
			}
		})
	}
}

// TestPlanResolvesFieldsRead: every struct-field offset the plan of the fixture controller
// resolves (every catalog probe but the sync handlers applies to it) is one FieldsRead lists,
// which the offsets generator generates: an offset looked up outside it would be missing from
// the table.
func TestPlanResolvesFieldsRead(t *testing.T) {
	plan := planOf(t, buildWith(t, "local", fixturePkg, "-s -w"))
	read := FieldsRead(Catalog())
	for _, u := range plan.Offsets {
		if !slices.Contains(read, FieldRef{Type: u.Type, Path: u.Path}) {
			t.Errorf("the plan resolved %s %s, which FieldsRead does not list", u.Type, u.Path)
		}
		if u.Err != nil {
			t.Errorf("the stripped fixture's %s %s: %v", u.Type, u.Path, u.Err)
		}
	}
	if len(plan.Offsets) < len(read)-1 {
		t.Errorf("the plan resolved %d offsets, FieldsRead lists %d", len(plan.Offsets), len(read))
	}
}

// TestStrippedSitesKubeControllerManager does the same for the test bed's
// kube-controller-manager and its stripped copy (the sync handlers), when they are built.
func TestStrippedSitesKubeControllerManager(t *testing.T) {
	dir := os.Getenv("RECONSCOPE_CONTROLPLANE_DIR")
	if dir == "" {
		home, _ := os.UserCacheDir()
		matches, _ := filepath.Glob(filepath.Join(home, "reconscope", "controlplane-*", "kube-controller-manager-stripped"))
		if len(matches) == 0 {
			bpftest.SkipOrFail(t, "no test-bed kube-controller-manager built (make controlplane)")
		}
		dir = filepath.Dir(matches[0])
	}
	plain := planOf(t, filepath.Join(dir, "kube-controller-manager"))
	stripped := planOf(t, filepath.Join(dir, "kube-controller-manager-stripped"))
	checkSitesInBodies(t, plain)
	checkSitesInBodies(t, stripped)
	comparePlans(t, plain, stripped)
	var syncs int
	for _, s := range stripped.Sites {
		if strings.HasPrefix(s.Probe.ID, "sync/") {
			syncs++
		}
	}
	if syncs < len(SyncHandlers)*2 {
		t.Errorf("only %d sync-handler sites in the stripped kube-controller-manager", syncs)
	}

	// At detail reconcile (the default) the work queue's items are the spans: no sync handler
	// is attached, and no site that a work item's worker reaches is single-stepped (only a
	// queue's creation, once per queue, is read at its RETs). The handlers are with the calls
	// probes, for the controllers a per-controller detail puts at calls.
	bin, err := symbols.Open(filepath.Join(dir, "kube-controller-manager-stripped"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	recon, err := NewPlan(bin, DetailReconcile.Catalog(Catalog()))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range recon.Sites {
		if strings.HasPrefix(s.Probe.ID, "sync/") {
			t.Errorf("detail reconcile: sync-handler site %s of %s", s.Where(), s.Probe.ID)
		}
		if s.Trap() != "emulated" && s.Probe.ID != "client-go/workqueue-name" {
			t.Errorf("detail reconcile: %s site of %s at %s is %s (%s)", s.Kind, s.Probe.ID, s.Where(), s.Trap(), s.Insn)
		}
	}
	if !slices.Contains(recon.Probes(), "client-go/workqueue") {
		t.Errorf("detail reconcile: no work-queue site (%s)", recon)
	}
	calls, err := NewCallsPlan(bin, Catalog())
	if err != nil {
		t.Fatal(err)
	}
	var callSyncs int
	for _, s := range calls.Sites {
		if strings.HasPrefix(s.Probe.ID, "sync/") {
			callSyncs++
		}
	}
	if callSyncs != syncs {
		t.Errorf("the calls plan holds %d sync-handler sites, the plan at detail calls %d", callSyncs, syncs)
	}
}

// TestUnknownVersionExplained: a stripped controller of a Go release and a controller-runtime
// release the offsets table lacks (the versions are what a newer build would record): each
// unknown offset names the version and the offsetgen command that adds it, and says what spans
// will lack.
func TestUnknownVersionExplained(t *testing.T) {
	bin, err := symbols.Open(buildWith(t, "local", fixturePkg, "-s -w"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	bin.GoVersion = "go1.99.1"
	bin.Modules[crModule] = "v0.99.0"
	plan, err := NewPlan(bin, Catalog())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"runtime.g goid":       {"go1.99.1", "go run ./internal/cmd/offsetgen -o pkg/symbols/offsets_table.json -go go1.99.1 ", "goroutine IDs"},
		crController + " Name": {"v0.99.0", "go run ./internal/cmd/offsetgen -o pkg/symbols/offsets_table.json -std=false -client-go none -controller-runtime v0.99.0", "controller name"},
		"errors.errorString s": {"go1.99.1", "-go go1.99.1", "message of *errors.errorString"},
	}
	for _, o := range plan.Offsets {
		k := o.Type + " " + o.Path
		w, ok := want[k]
		if !ok {
			// Every other standard-library field is unknown too, and says why the same way.
			if !strings.HasPrefix(o.Type, "k8s.io/") && (o.Err == nil || !strings.Contains(o.Err.Error(), "-go go1.99.1 ")) {
				t.Errorf("%s: %v, want the offsetgen command for go1.99.1", k, o.Err)
			}
			continue
		}
		delete(want, k)
		if o.Err == nil {
			t.Errorf("%s: known (%d from %s) for a version the table lacks", k, o.Value, o.Source)
			continue
		}
		for _, s := range w[:2] {
			if !strings.Contains(o.Err.Error(), s) {
				t.Errorf("%s: error %q does not say %q", k, o.Err, s)
			}
		}
		if !strings.Contains(o.Lacks, w[2]) {
			t.Errorf("%s: lacks %q, want it to name %q", k, o.Lacks, w[2])
		}
	}
	for k := range want {
		t.Errorf("%s: not in the plan's offsets", k)
	}
	if plan.GoidOffset != 0 {
		t.Errorf("goid offset %d for an unknown Go release", plan.GoidOffset)
	}
}
