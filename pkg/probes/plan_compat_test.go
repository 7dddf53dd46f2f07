//go:build compat

package probes

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// go127 is the one other Go release this project builds and traces with (fetched by the go
// command through GOTOOLCHAIN).
const go127 = "go1.27.3"

// With the compat tag (make compat), the twins are also built with go1.27.3.
func init() { toolchains = append(toolchains, go127) }

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
// layouts both match its function; the size of reconcile.Result (from the reconciler
// interface's type descriptors) picks one, never both. A
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

	// Two layouts that nothing in the binary tells apart: refused, with the reason.
	var catalog []*Probe
	for _, p := range Catalog() {
		if p.ID == "controller-runtime/reconcile" && p.Result != nil {
			q := *p
			q.Result = nil
			p = &q
		}
		catalog = append(catalog, p)
	}
	// Without a span probe the plan says there is nothing to trace, and why.
	refused, err := NewPlan(plan.Binary, catalog)
	if err != nil && !errors.Is(err, ErrNothingToTrace) {
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
