package probes

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/symbols"
)

func TestWorkerName(t *testing.T) {
	for _, tc := range []struct{ fn, want string }{
		{"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller.(*ProvisionController).processNextClaimWorkItem.func1.deferwrap1",
			"controller.ProvisionController.processNextClaimWorkItem"},
		{"main.processNextWorkItem[go.shape.string].deferwrap1", "main.processNextWorkItem"},
		{"main.processNextWorkItem[go.shape.*k8s.io/api/core/v1.Pod]", "main.processNextWorkItem"},
		{"k8s.io/kubernetes/pkg/controller/endpointslice.(*Controller).processNextTopologyWorkItem", "endpointslice.Controller.processNextTopologyWorkItem"},
		{"example.com/op/pkg/ctl.(*Reconciler[go.shape.string]).worker.func2.1", "ctl.Reconciler.worker"},
		{"example.com/op/pkg/ctl.worker.gowrap3", "ctl.worker"},
		{"main.main.func1", "main.main"},
		{"main.func1", "main.func1"}, // a function of that name, not a closure: the package and one name stay
		{"example.com/op/pkg/ctl.T.run", "ctl.T.run"},
	} {
		if got := WorkerName(tc.fn); got != tc.want {
			t.Errorf("WorkerName(%q) = %q, want %q", tc.fn, got, tc.want)
		}
	}
}

func TestWorker(t *testing.T) {
	const (
		typed    = "k8s.io/client-go/util/workqueue.(*Typed[string]).Done"
		delaying = "k8s.io/client-go/util/workqueue.(*delayingType[string]).Done"
		limiting = "k8s.io/client-go/util/workqueue.(*rateLimitingType[string]).Done"
		worker   = "main.processNextWorkItem[go.shape.string].deferwrap1"
	)
	for _, tc := range []struct {
		frames []string
		want   string
	}{
		{[]string{typed, delaying, limiting, worker}, "main.processNextWorkItem"},
		{[]string{typed, worker, "main.loop", ""}, "main.processNextWorkItem"},
		{[]string{worker, "", "", ""}, "main.processNextWorkItem"},       // the wrapper inlined
		{[]string{typed, delaying, limiting, "runtime.deferreturn"}, ""}, // the worker is past the frames read
		{[]string{typed, "", worker, ""}, ""},                            // an address no function holds: the chain is not trusted past it
		{[]string{"", "", "", ""}, ""},
	} {
		if got := Worker(tc.frames); got != tc.want {
			t.Errorf("Worker(%q) = %q, want %q", tc.frames, got, tc.want)
		}
	}
}

// TestWorkQueueDoneFrames: in the client-go fixture built for amd64 and arm64, stripped or
// not, every work-queue span's return site (Done's entry) reads the frames' return addresses
// (Frames) at an instruction that runs before Done sets up its frame, where the kernel program
// finds Done's return address (amd64: at [SP] before `PUSHQ BP`; arm64: in R30 before the
// prologue's `MOVD.W R30, -N(RSP)` stores it) and the caller's frame pointer (BP / R29); and
// the return address each Done site's caller, the instantiation's wrapper, pushes is named
// by FunctionNameAt as the work queue's code, which Worker passes over.
func TestWorkQueueDoneFrames(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program: skipped with -short")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		for _, ld := range []string{"-n -n", "-s -w"} {
			t.Run(arch+" "+ld, func(t *testing.T) {
				out := testkit.BuildEnv(t, "./test/fixtures/workqueue-controller", []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch}, "-ldflags="+ld)
				plan := planOf(t, out)
				bin, err := symbols.Open(out)
				if err != nil {
					t.Fatal(err)
				}
				defer bin.Close()
				n, bodies := 0, map[uint64]string{}
				for _, s := range plan.Sites {
					if s.Probe.ID != "client-go/workqueue" || s.Kind != SiteReturn {
						continue
					}
					n++
					if s.Layout().Values[0].Base != Frames {
						t.Errorf("%s: Done's site does not read the frames", s.Where())
					}
					// amd64: PUSHQ BP, whatever the frame's size; arm64: MOVD.W R30, -N(RSP),
					// or for a frame too large for its immediate (a struct item of three
					// strings: 288 bytes) SUB $N, RSP, R20 before STP (R29, R30), -8(R20).
					want := []string{"PUSHQ BP"}
					if arch == "arm64" {
						want = []string{"MOVD.W R30, -", "SUB $"}
					}
					if !slices.ContainsFunc(want, func(w string) bool { return strings.HasPrefix(s.Insn, w) }) {
						t.Errorf("%s: Done's site at `%s`, want one of %q…, before Done's frame", s.Where(), s.Insn, want)
					}
					bodies[s.In.Entry] = s.In.Name
				}
				// The return address each instantiation's wrapper pushes when it calls a Done
				// body is named as the work queue's code, which Worker passes over.
				wrappers, err := bin.Match(regexp.MustCompile(`^k8s\.io/client-go/util/workqueue\.\(\*Typed\[[^.]*(\.[^s].*)?\]\)\.Done$`))
				if err != nil {
					t.Fatal(err)
				}
				callLen := map[string]uint64{"amd64": 5, "arm64": 4}[arch] // CALL rel32, BL
				calls := 0
				for _, w := range wrappers {
					cs, err := bin.Calls(w)
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range cs {
						if _, ok := bodies[c.Target]; !ok {
							continue
						}
						calls++
						name, err := bin.FunctionNameAt(c.Addr + callLen)
						if err != nil || name != w.Name {
							t.Errorf("return address %#x of %s's call of %s: function %q (%v), want %s", c.Addr+callLen, w.Name, bodies[c.Target], name, err, w.Name)
						}
						if got := Worker([]string{name, "main.processNextWorkItem[go.shape.string]", "", ""}); got != "main.processNextWorkItem" {
							t.Errorf("Worker passes over %s: %q", name, got)
						}
					}
				}
				if calls == 0 {
					t.Errorf("no instantiation wrapper calls a Done body (wrappers %v)", wrappers)
				}
				if n == 0 {
					t.Fatalf("no work-queue span site: %s", plan)
				}
			})
		}
	}
}
