package probes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// The fixture controller: a real controller-runtime manager with client-go, the informer
// cache and the priority queue, so every catalog probe but the kube-controller-manager sync
// handlers finds its function.
const fixturePkg = "github.com/reconscope/reconscope/test/fixtures/scripted-controller"

// go127 is the one other Go release this project builds and traces with (fetched by the go
// command through GOTOOLCHAIN).
const go127 = "go1.27.3"

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{}
	buildDir   string
)

// buildWith builds pkg (an import path inside this module, or pkg@version with install)
// with the given toolchain ("local" or a release) and linker flags, once per test binary.
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
	cmd := exec.Command("go", "build", "-o", out, "-ldflags="+ldflags, pkg)
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+toolchain)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s with %s: %v\n%s", pkg, toolchain, err, msg)
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
	bin, err := symbols.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bin.Close() })
	plan, err := NewPlan(bin, Catalog)
	if err != nil {
		t.Fatalf("plan of %s: %v", path, err)
	}
	return plan
}

// siteKey is what must agree between a stripped build and its unstripped twin.
func siteKey(s Site) string {
	return fmt.Sprintf("%s %s %v %#x %s", s.Probe.ID, s.Function.Name, s.Kind, s.Addr, s.Insn)
}

// checkSitesInBodies checks that every site lies in the function it names, no function is
// probed by two layouts, and no entry site is an ABI0 wrapper's first instruction.
func checkSitesInBodies(t *testing.T, plan *Plan) {
	t.Helper()
	layouts := map[string]*Probe{}
	seen := map[string]bool{}
	for _, s := range plan.Sites {
		if s.Addr < s.Function.Entry || s.Addr >= s.Function.End {
			t.Errorf("%s site %#x of %s is outside [%#x, %#x)", s.Kind, s.Addr, s.Function.Name, s.Function.Entry, s.Function.End)
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
	for _, tc := range []string{"local", go127} {
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
				"client-go/request", "client-go/response", "runtime/goroutine-start", "runtime/goroutine-exit", "controller-runtime/queue-add"} {
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
		})
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
			t.Skip("no test-bed kube-controller-manager built (make controlplane)")
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
}

// crModule is controller-runtime's own module, as the repository's go.mod requires it.
const crModule = "sigs.k8s.io/controller-runtime"

// crVersion is the version of controller-runtime this repository builds with.
func crVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", crModule).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", crModule, err)
	}
	return strings.TrimSpace(string(out))
}

// crCheckout is a writable copy of controller-runtime's module source, to build programs
// whose main module is controller-runtime itself, as a git checkout: tagged with the
// release's version when tag is set (Go then records that version as the main module's).
// Its Kubernetes modules are moved to this repository's releases, whose compiled packages
// the build cache already holds.
func crCheckout(t *testing.T, tag bool) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a controller-runtime program: skipped with -short")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", crModule).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", crModule, err)
	}
	dst := filepath.Join(t.TempDir(), "controller-runtime")
	sh := func(dir string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, msg)
		}
	}
	sh("", "cp", "-r", strings.TrimSpace(string(out)), dst)
	sh("", "chmod", "-R", "u+w", dst)
	var pins []string
	for _, m := range []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go"} {
		v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", m).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", m, err)
		}
		pins = append(pins, m+"@"+strings.TrimSpace(string(v)))
	}
	sh(dst, "go", append([]string{"get"}, pins...)...)
	if tag {
		git := []string{"-c", "user.name=test", "-c", "user.email=test@example.invalid"}
		sh(dst, "git", "init", "-q")
		sh(dst, "git", "add", "-A")
		sh(dst, "git", append(git, "commit", "-q", "-m", "release")...)
		sh(dst, "git", append(git, "tag", crVersion(t))...)
	}
	return dst
}

// buildInModule builds ./examples/builtins of controller-runtime's own module, stripped;
// vcs stamps the version-control state (and so the tag) into it.
func buildInModule(t *testing.T, dir string, vcs bool) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "builtins")
	cmd := exec.Command("go", "build", "-o", out, "-ldflags=-s -w", fmt.Sprintf("-buildvcs=%v", vcs), "./examples/builtins")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in controller-runtime's module: %v\n%s", err, msg)
	}
	return out
}

func reconcileSites(plan *Plan) (fns map[string]*Probe, rets int) {
	fns = map[string]*Probe{}
	for _, s := range plan.Sites {
		if s.Probe.ID != "controller-runtime/reconcile" {
			continue
		}
		fns[s.Function.Name] = s.Probe
		if s.Kind == SiteReturn {
			rets++
		}
	}
	return fns, rets
}

// TestMainModuleVersion: a program whose main module is controller-runtime, built in a
// checkout tagged with its release (Go records the tag as the main module's version), stripped,
// is traced as that version: one reconcile layout, the controller name's offset from the table.
func TestMainModuleVersion(t *testing.T) {
	v := crVersion(t)
	plan := planOf(t, buildInModule(t, crCheckout(t, true), true))
	bin := plan.Binary
	if bin.MainModule != crModule || bin.MainVersion != v {
		t.Fatalf("main module %s %s, want %s %s", bin.MainModule, bin.MainVersion, crModule, v)
	}
	if got, _ := bin.ModuleVersion(crModule); got != v {
		t.Fatalf("ModuleVersion = %q, want %q", got, v)
	}
	checkSitesInBodies(t, plan)
	fns, _ := reconcileSites(plan)
	if len(fns) != 1 {
		t.Fatalf("reconcile probed in %d functions: %v (missing %v)", len(fns), fns, plan.Missing)
	}
	var named bool
	for _, o := range plan.Offsets {
		if o.Type == crController && o.Path == "Name" {
			named = true
			if o.Err != nil || o.Source != "table" {
				t.Errorf("%s.%s: %v (source %q), want it from the table for %s", o.Type, o.Path, o.Err, o.Source, v)
			}
		}
	}
	if !named {
		t.Error("the plan does not read the controller's name")
	}
}

// TestDevelVersionOneLayout: the same program built as "(devel)": the two generic reconcile
// layouts both match its function; the function's argument size picks one, never both. A
// catalog whose layouts the binary cannot tell apart refuses the probe with a message.
func TestDevelVersionOneLayout(t *testing.T) {
	plan := planOf(t, buildInModule(t, crCheckout(t, false), false))
	if v, _ := plan.Binary.ModuleVersion(crModule); v != "(devel)" {
		t.Fatalf("ModuleVersion = %q, want (devel)", v)
	}
	checkSitesInBodies(t, plan)
	fns, rets := reconcileSites(plan)
	if len(fns) != 1 {
		t.Fatalf("reconcile probed in %d functions (missing %v)", len(fns), plan.Missing)
	}
	for name, pr := range fns {
		if pr.MinVersion != "v0.23.0" {
			t.Errorf("%s: layout [%s, %s] chosen; controller-runtime %s has Result.Priority (v0.23+)", name, pr.MinVersion, pr.MaxVersion, crVersion(t))
		}
	}
	if rets == 0 {
		t.Error("no return sites")
	}

	// Two layouts that the argument size cannot tell apart: refused, with the reason.
	var catalog []*Probe
	for _, p := range Catalog {
		if p.ID == "controller-runtime/reconcile" && p.ArgsSize > 0 {
			q := *p
			q.ArgsSize = 0
			p = &q
		}
		catalog = append(catalog, p)
	}
	refused, err := NewPlan(plan.Binary, catalog)
	if err != nil {
		t.Fatal(err)
	}
	if fns, _ := reconcileSites(refused); len(fns) != 0 {
		t.Errorf("reconcile attached although its layout is undecided: %v", fns)
	}
	var said bool
	for _, m := range refused.Missing {
		if m.ProbeID == "controller-runtime/reconcile" && regexp.MustCompile(`version \(devel\) is unknown .* not traced`).MatchString(m.Reason) {
			said = true
			t.Logf("refused: %s", m.Reason)
		}
	}
	if !said {
		t.Errorf("no refusal message for the undecided reconcile layouts: %v", refused.Missing)
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
	plan, err := NewPlan(bin, Catalog)
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
			if o.Err != nil && !strings.HasPrefix(o.Type, "k8s.io/") {
				t.Errorf("%s: unexpected error %v", k, o.Err)
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
