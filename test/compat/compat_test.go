//go:build compat

package compat

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/semver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/symbols"
	"github.com/reconscope/reconscope/test/groundtruth"
	"github.com/reconscope/reconscope/test/testenv"
)

// Go127 is the one Go release besides the local toolchain that this project builds traced
// programs with (the go command fetches it through GOTOOLCHAIN).
const Go127 = "go1.27.3"

// CRVersions are the controller-runtime releases of the matrix: the latest patch of each
// minor from v0.15 to v0.25 on the module proxy.
var CRVersions = []string{"v0.15.3", "v0.16.1", "v0.17.2", "v0.18.5", "v0.19.4", "v0.20.4", "v0.21.0", "v0.22.5", "v0.23.3", "v0.24.1", "v0.25.3"}

// Environment variables that pick the cells (comma-separated; "all" for every one). CI runs a
// sample; `make compat` runs all of them.
const (
	// GoCellsEnv: toolchain cells "local" and/or Go127 (default both), each plain and stripped.
	GoCellsEnv = "RECONSCOPE_COMPAT_GO"
	// CRCellsEnv: controller-runtime versions (default: the oldest and the newest), or
	// "rotate" (CI): the newest and one other in rotation (rotatedCR).
	CRCellsEnv = "RECONSCOPE_COMPAT_CR"
	// ReportEnv: a file each finished cell appends its result to (JSON lines, Cell).
	ReportEnv = "RECONSCOPE_COMPAT_REPORT"
	// CacheEnv: the folder of the cached matrix builds, instead of cacheDir's default (an
	// empty one measures a cold run; the control plane's cache stays where it is).
	CacheEnv = "RECONSCOPE_COMPAT_CACHE"
)

func pick(env string, all, def []string) []string {
	v := os.Getenv(env)
	switch v {
	case "":
		return def
	case "all":
		return all
	}
	return strings.Split(v, ",")
}

// rotatedCR picks the controller-runtime releases one CI run covers: the newest, every run,
// and one of the others in turn, from the counter in counterFile (the next run's turn is written
// back). Without a readable counter (an empty cache) the turn is the number of days since
// 1970 (UTC), so runs from empty caches rotate too, a cell a day. With the cache kept, every
// release of CRVersions is covered within len(CRVersions)-1 consecutive runs (10).
func rotatedCR(counterFile string, now time.Time) (versions []string, turn int, err error) {
	n := len(CRVersions) - 1 // the rotating cells: all but the newest
	turn = int(now.Unix()/86400) % n
	if b, err := os.ReadFile(counterFile); err == nil {
		if i, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && i >= 0 {
			turn = i % n
		}
	}
	if err := os.MkdirAll(filepath.Dir(counterFile), 0o755); err != nil {
		return nil, 0, err
	}
	if err := os.WriteFile(counterFile, []byte(strconv.Itoa((turn+1)%n)+"\n"), 0o644); err != nil {
		return nil, 0, err
	}
	return []string{CRVersions[turn], CRVersions[n]}, turn, nil
}

// TestCRRotation: CI's rotation covers every controller-runtime release within
// len(CRVersions)-1 runs that keep the counter, the newest in each, and starts from the date
// without one.
func TestCRRotation(t *testing.T) {
	counter := filepath.Join(t.TempDir(), "compat", "cr-rotation")
	day := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	n := len(CRVersions) - 1
	covered := map[string]int{}
	for run := range n {
		vs, turn, err := rotatedCR(counter, day)
		if err != nil {
			t.Fatal(err)
		}
		if run == 0 && turn != int(day.Unix()/86400)%n {
			t.Errorf("first run without a counter: turn %d, want the date's %d", turn, int(day.Unix()/86400)%n)
		}
		if len(vs) != 2 || vs[1] != CRVersions[n] {
			t.Errorf("run %d: %v, want a rotating release and the newest %s", run, vs, CRVersions[n])
		}
		for _, v := range vs {
			covered[v]++
		}
	}
	for _, v := range CRVersions {
		if covered[v] == 0 {
			t.Errorf("%s not covered in %d runs: %v", v, n, covered)
		}
	}
	if err := os.WriteFile(counter, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, turn, err := rotatedCR(counter, day); err != nil || turn != int(day.Unix()/86400)%n {
		t.Errorf("unreadable counter: turn %d (%v), want the date's", turn, err)
	}
}

var reportMu sync.Mutex

// clientGoOf returns the client-go version the binary was built with.
func clientGoOf(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "k8s.io/client-go" {
			return d.Version
		}
	}
	return ""
}

func report(t *testing.T, c Cell) {
	t.Helper()
	c.Pass = !t.Failed()
	path := os.Getenv(ReportEnv)
	if path == "" {
		return
	}
	line, _ := json.Marshal(c)
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("write report: %v", err)
		return
	}
	defer f.Close()
	f.Write(append(line, '\n'))
}

// cacheDir is where matrix builds are kept between runs, keyed by version:
// $RECONSCOPE_COMPAT_CACHE, or ${RECONSCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reconscope}/compat.
func cacheDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	base := os.Getenv("RECONSCOPE_CACHE")
	if base == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			t.Fatalf("no cache folder: %v", err)
		}
		base = filepath.Join(c, "reconscope")
	}
	return filepath.Join(base, "compat")
}

// goVersion returns the version of a toolchain ("local" or a release), e.g. "go1.26.8".
func goVersion(t *testing.T, toolchain string) string {
	t.Helper()
	cmd := exec.Command("go", "env", "GOVERSION")
	cmd.Dir = os.TempDir() // not this module: its go.mod plays no part
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+toolchain)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go env GOVERSION with GOTOOLCHAIN=%s: %v", toolchain, err)
	}
	return strings.TrimSpace(string(out))
}

func run(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// buildFixture builds the scripted fixture controller of this repository with a toolchain.
func buildFixture(t *testing.T, toolchain string, stripped bool) string {
	t.Helper()
	ld := "-ldflags="
	if stripped {
		ld = "-ldflags=-s -w"
	}
	return testkit.BuildEnv(t, "./test/fixtures/scripted-controller", []string{"GOTOOLCHAIN=" + toolchain}, ld)
}

// buildCRCell builds the controller program against one controller-runtime release, stripped,
// in a module of its own (go mod tidy picks the k8s.io releases that release requires), once:
// the binary is cached under cacheDir, keyed by Go version, release and program.
func buildCRCell(t *testing.T, version string) (string, time.Duration) {
	t.Helper()
	minor, err := strconv.Atoi(strings.Split(version, ".")[1])
	if err != nil {
		t.Fatalf("version %s: %v", version, err)
	}
	src, err := renderProgram(minor)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	gov := goVersion(t, "local")
	dir := filepath.Join(cacheDir(t), fmt.Sprintf("%s-controller-runtime-%s-%s", gov, version, hex.EncodeToString(sum[:4])))
	bin := filepath.Join(dir, "controller")
	if _, err := os.Stat(bin); err == nil {
		t.Logf("cached build %s", bin)
		return bin, 0
	}
	start := time.Now()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mod := fmt.Sprintf("module reconscope.example/compat\n\ngo 1.20\n\nrequire sigs.k8s.io/controller-runtime %s\n", version)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"GOTOOLCHAIN=local", "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off"}
	run(t, dir, env, "mod", "tidy")
	run(t, dir, env, "build", "-trimpath", "-ldflags=-s -w", "-o", bin+".tmp", ".")
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("built %s in %s", bin, took.Round(time.Second))
	return bin, took
}

// buildTwin builds, next to a cached controller-runtime cell, the same program unstripped: the
// linker's -n -n is a no-op as long as -s -w, so the recorded build settings and so the code
// addresses are the same as the stripped build's.
func buildTwin(t *testing.T, bin string) string {
	t.Helper()
	twin := bin + "-unstripped"
	if _, err := os.Stat(twin); err == nil {
		return twin
	}
	env := []string{"GOTOOLCHAIN=local", "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off"}
	run(t, filepath.Dir(bin), env, "build", "-trimpath", "-ldflags=-n -n", "-o", twin+".tmp", ".")
	if err := os.Rename(twin+".tmp", twin); err != nil {
		t.Fatal(err)
	}
	return twin
}

// checkResultSize checks what tells the reconcile layouts apart when a build's version is
// unknown: the size of reconcile.Result read from the stripped binary's type descriptors
// (16 bytes until v0.22, 24 with Result.Priority from v0.23).
func checkResultSize(t *testing.T, path, version string) {
	t.Helper()
	bin, err := symbols.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	want := uint64(16)
	if semver.Compare(version, "v0.23.0") >= 0 {
		want = 24
	}
	size, ok, err := bin.MethodResultSize("Reconcile", 0, "reconcile.Result")
	if err != nil || !ok || size != want {
		t.Errorf("reconcile.Result of %s: %d bytes (found %v, %v), want %d", version, size, ok, err, want)
	}
}

// checkTwinSites checks the stripped build's probe sites against its unstripped twin's: the
// same sites (probe, function, kind, address, instruction), every one inside the function it
// names (or, for a return site at a return address, inside the caller it names), no ABI0 wrapper probed, one layout per function. It returns the number of sites.
func checkTwinSites(t *testing.T, strippedPath, plainPath string) int {
	t.Helper()
	plans := make([]*probes.Plan, 2)
	for i, path := range []string{strippedPath, plainPath} {
		bin, err := symbols.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bin.Close() })
		if bin.Stripped != (i == 0) {
			t.Fatalf("%s: stripped = %v", path, bin.Stripped)
		}
		plans[i], err = probes.NewPlan(bin, probes.Catalog())
		if err != nil {
			t.Fatalf("plan of %s: %v", path, err)
		}
	}
	key := func(s probes.Site) string {
		return fmt.Sprintf("%s %s %v %#x %s in %s", s.Probe.ID, s.Function.Name, s.Kind, s.Addr, s.Insn, s.In.Name)
	}
	sets := make([]map[string]bool, 2)
	for i, plan := range plans {
		sets[i] = map[string]bool{}
		layouts := map[string]*probes.Probe{}
		for _, s := range plan.Sites {
			// A return site at the return address of a call is in the caller (Site.In).
			in := s.Function
			if s.In.Name != "" {
				in = s.In
			}
			if s.Addr < in.Entry || s.Addr >= in.End {
				t.Errorf("%s site %#x of %s is outside %s [%#x, %#x)", s.Kind, s.Addr, s.Function.Name, in.Name, in.Entry, in.End)
			}
			if strings.HasSuffix(s.Function.Name, ".abi0") || (s.Kind == probes.SiteEntry && strings.HasPrefix(s.Insn, "XORPS X15")) {
				t.Errorf("%s: probe %s on an ABI0 wrapper (%q)", s.Function.Name, s.Probe.ID, s.Insn)
			}
			k := fmt.Sprintf("%s %#x", s.Probe.ID, s.Function.Entry)
			if p, ok := layouts[k]; ok && p != s.Probe {
				t.Errorf("%s: two layouts of %s attached", s.Function.Name, s.Probe.ID)
			}
			layouts[k] = s.Probe
			if sets[i][key(s)] {
				t.Errorf("site listed twice: %s", key(s))
			}
			sets[i][key(s)] = true
		}
	}
	for k := range sets[0] {
		if !sets[1][k] {
			t.Errorf("stripped build has a site its unstripped twin lacks: %s", k)
		}
	}
	for k := range sets[1] {
		if !sets[0][k] {
			t.Errorf("stripped build lacks a site of its unstripped twin: %s", k)
		}
	}
	return len(plans[0].Sites)
}

// traced runs bin (with args, and --kubeconfig and --ground-truth) against the test bed's
// API server under the tracer, lets create make the objects, waits until want reconciles
// are recorded, and returns the ground truth and the spans.
func traced(t *testing.T, bin string, args []string, create func(*testenv.Env), want int) ([]groundtruth.Record, []span.Span, ktime.Clock) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	truth := filepath.Join(t.TempDir(), "truth.jsonl")
	ctl := testenv.StartProcess(t, "controller", exec.Command(bin, append([]string{"--kubeconfig", env.Kubeconfig, "--ground-truth", truth}, args...)...))
	tr, s, plan := testenv.Trace(t, bin, ctl.PID())
	t.Logf("attached %s", plan)
	for _, o := range plan.Offsets {
		if o.Err != nil && (o.Type == "runtime.g" || strings.HasSuffix(o.Type, "controller.Controller")) {
			t.Errorf("offset %s.%s unknown: %v", o.Type, o.Path, o.Err)
		}
	}
	stop := testkit.Go(t, tr.Run)
	clock := tr.Clock()
	create(env)
	// Short of want the test goes on: the count is checked below, with the tracer's losses.
	testkit.Poll(90*time.Second, func() bool {
		recs, _ := groundtruth.ReadFile(truth)
		return len(recs) >= want
	})
	time.Sleep(time.Second) // late requeues, and the last events drain
	recs, _ := groundtruth.ReadFile(truth)
	if err := stop(); err != nil {
		t.Errorf("tracer: %v", err)
	}
	st := tr.Stats()
	tr.Close()
	if st.Kernel.LostRingBuffer != 0 {
		t.Errorf("lost %d events", st.Kernel.LostRingBuffer)
	}
	if len(recs) < want {
		t.Errorf("only %d reconciles recorded, want at least %d", len(recs), want)
	}
	return recs, s.Snapshot(), clock
}

func createConfigMaps(t *testing.T, env *testenv.Env, ns string, objs map[string]map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(objs))
	for n := range objs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
		for k, v := range objs[n] {
			if strings.HasPrefix(k, "label:") {
				if cm.Labels == nil {
					cm.Labels = map[string]string{}
				}
				cm.Labels[strings.TrimPrefix(k, "label:")] = v
			} else {
				if cm.Annotations == nil {
					cm.Annotations = map[string]string{}
				}
				cm.Annotations[k] = v
			}
		}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
}

// fixtureScripts: one object per outcome of the fixture controller; want counts the
// reconciles they make at least.
var fixtureScripts = map[string]string{
	"ok":            "success",
	"err-plain":     "times:1;error",
	"err-status":    "times:1;error-status",
	"requeue-after": "times:1;requeue-after:50ms",
	"panic":         "times:1;panic",
	"deep":          "times:1;deep:300;gc",
}

// TestGoToolchains: the fixture controller built with each Go release this environment has
// (the local one and go1.27.3), plain and stripped, traced with exact spans.
func TestGoToolchains(t *testing.T) {
	bpftest.Require(t)
	for _, tc := range pick(GoCellsEnv, []string{"local", Go127}, []string{"local", Go127}) {
		for _, stripped := range []bool{false, true} {
			name := tc + map[bool]string{false: "/plain", true: "/stripped"}[stripped]
			t.Run(name, func(t *testing.T) {
				gov := goVersion(t, tc)
				start := time.Now()
				bin := buildFixture(t, tc, stripped)
				took := time.Since(start)
				objs := map[string]map[string]string{}
				for n, s := range fixtureScripts {
					objs[n] = map[string]string{"scripted.reconscope.io/script": s}
				}
				recs, spans, clock := traced(t, bin, []string{"--max-concurrent-reconciles", "2"}, func(env *testenv.Env) {
					createConfigMaps(t, env, "compat", objs)
				}, len(fixtureScripts))
				testkit.Compare(t, recs, spans, testkit.Match{Wall: clock.Wall})
				t.Logf("%s stripped=%v: %d reconciles, %d spans", gov, stripped, len(recs), len(spans))
				report(t, Cell{Kind: "go", Go: gov, CR: "fixture", Stripped: stripped, Reconciles: len(recs), Spans: len(spans), BuildSecs: int(took.Seconds()), ClientGo: clientGoOf(bin)})
			})
		}
	}
}

// crObjects: success, error, Conflict and requeue-after, each once.
var crObjects = map[string]map[string]string{
	"ok-1":       {"label:compat": "yes"},
	"err-1":      {"label:compat": "yes"},
	"conflict-1": {"label:compat": "yes"},
	"after-1":    {"label:compat": "yes"},
}

// TestControllerRuntime: a small controller built against each controller-runtime release
// (stripped, with the local Go), traced with exact spans.
func TestControllerRuntime(t *testing.T) {
	bpftest.Require(t)
	versions := pick(CRCellsEnv, CRVersions, []string{CRVersions[0], CRVersions[len(CRVersions)-1]})
	if os.Getenv(CRCellsEnv) == "rotate" {
		var turn int
		var err error
		if versions, turn, err = rotatedCR(filepath.Join(cacheDir(t), "cr-rotation"), time.Now()); err != nil {
			t.Fatalf("compat rotation: %v", err)
		}
		n := len(CRVersions) - 1
		t.Logf("compat rotation: controller-runtime %s (turn %d of %d; the next run takes %s) and the newest, %s, every run",
			versions[0], turn+1, n, CRVersions[(turn+1)%n], versions[1])
	}
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			bin, took := buildCRCell(t, v)
			sites := checkTwinSites(t, bin, buildTwin(t, bin))
			checkResultSize(t, bin, v)
			recs, spans, clock := traced(t, bin, nil, func(env *testenv.Env) {
				createConfigMaps(t, env, "compat", crObjects)
			}, len(crObjects)+1)
			testkit.Compare(t, recs, spans, testkit.Match{Wall: clock.Wall})
			t.Logf("controller-runtime %s: %d reconciles, %d spans; %d probe sites, the same as the unstripped twin's", v, len(recs), len(spans), sites)
			report(t, Cell{Kind: "controller-runtime", Go: goVersion(t, "local"), CR: v, Stripped: true, Reconciles: len(recs), Spans: len(spans), Sites: sites, BuildSecs: int(took.Seconds()), ClientGo: clientGoOf(bin)})
		})
	}
}
