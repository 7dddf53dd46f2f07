package reliability

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/internal/testproc"
	"github.com/reconscope/reconscope/pkg/collector"
	"github.com/reconscope/reconscope/pkg/tracer"
	"github.com/reconscope/reconscope/test/fakectl/fakectltest"
)

// built holds the programs TestMain builds once for every test: fakectl and the agent.
var built struct {
	dir     string
	fakectl string
	agent   string
	err     error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reconscope-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	built.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var buildOnce sync.Once

// programs builds fakectl and the agent (CGO_ENABLED=0 -trimpath, as `make build`), once.
func programs(t *testing.T) (fakectl, agent string) {
	t.Helper()
	buildOnce.Do(func() {
		built.fakectl = filepath.Join(built.dir, "fakectl")
		built.agent = filepath.Join(built.dir, "reconscope-agent")
		if built.err = testkit.GoBuild(built.fakectl, "./test/fakectl", nil, "-trimpath"); built.err != nil {
			return
		}
		built.err = testkit.GoBuild(built.agent, "./cmd/agent", []string{"CGO_ENABLED=0"}, "-trimpath")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.fakectl, built.agent
}

// copyRelctl copies fakectl to a fresh path of its own (a test that deletes, replaces or counts
// the links of its binary must not share it).
func copyRelctl(t *testing.T, dir string) string {
	t.Helper()
	src, _ := programs(t)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "fakectl")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// kill kills p (SIGKILL) and waits for it to be reaped.
func kill(t *testing.T, p *testproc.Process) {
	t.Helper()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
}

// output returns what p has written to stdout so far.
func output(t *testing.T, p *testproc.Process) []byte {
	t.Helper()
	b, err := os.ReadFile(p.StdoutPath())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lines returns the complete lines p has written to stdout so far.
func lines(t *testing.T, p *testproc.Process) [][]byte {
	t.Helper()
	b := output(t, p)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	} else {
		return nil
	}
	return bytes.Split(b, []byte("\n"))
}

// tracerOfFakectl is where the tracer's tests start: it skips (or fails, under
// RECONSCOPE_REQUIRE_BPF=1) without eBPF, copies fakectl to bin in a folder dir of the test's
// own (copyRelctl), and returns a tracer of fakectl with collector options c, writing spans into
// the returned sink, running until stop (or the test's end); it is closed at the test's end.
func tracerOfFakectl(t *testing.T, c collector.Options) (dir, bin string, tr *tracer.Tracer, out *testkit.Sink, stop func() error) {
	t.Helper()
	bpftest.Require(t)
	dir = t.TempDir()
	bin = copyRelctl(t, dir)
	out = &testkit.Sink{}
	tr, err := tracer.New(tracer.Options{Catalog: fakectltest.Catalog(t), Writer: out, Logger: testkit.Quiet(), Collector: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return dir, bin, tr, out, testkit.Go(t, tr.Run)
}

// runTraced runs fakectl bin with args under tr, traced from before its first reconcile, and
// waits for it to exit cleanly and for tr to notice; dir holds its start file.
func runTraced(t *testing.T, tr *tracer.Tracer, bin, dir string, args ...string) *testproc.Process {
	t.Helper()
	startFile := filepath.Join(dir, "start")
	ctl := testproc.Start(t, "fakectl", exec.Command(bin, append([]string{"-start", startFile}, args...)...))
	if _, err := tr.TracePID(ctl.PID()); err != nil {
		t.Fatalf("trace fakectl: %v", err)
	}
	if err := os.WriteFile(startFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-ctl.Done()
	if ctl.Wait() != nil {
		t.Fatalf("fakectl failed while traced: %v", ctl.Wait())
	}
	testkit.Eventually(t, "the tracer to notice the exit", time.Minute, func() bool { return !slices.Contains(tr.PIDs(), ctl.PID()) })
	return ctl
}

// truth is one line of fakectl's ground truth.
type truth = fakectltest.Truth

func readTruths(t *testing.T, b []byte) []truth {
	t.Helper()
	out, err := fakectltest.ReadTruths(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// reconcileSymbol matches fakectl's Reconcile (the probe's pattern).
var reconcileSymbol = func() *regexp.Regexp {
	p, err := fakectltest.Probe()
	if err != nil {
		panic(err)
	}
	return p.Symbol
}()

// agentProbe is the agent's --probe flag that traces fakectl's Reconcile as a sync handler:
// the object name is the request's Name (register slots 6 and 7: receiver, dictionary, ctx,
// Namespace before it), the error is in slots 3 and 4 after the three words of Result.
func agentProbe(t *testing.T, bin string) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if reconcileSymbol.MatchString(s.Name) {
			return s.Name + "=controller:fake,key:6,err:3"
		}
	}
	t.Fatalf("%s has no symbol matching %s", bin, reconcileSymbol)
	return ""
}

// agentLine is the part of a --output json line the tests read.
type agentLine struct {
	Controller string `json:"controller"`
	Name       string `json:"name"`
	Result     string `json:"result"`
	PID        int    `json:"pid"`
	Exe        string `json:"exe"`
	Incomplete bool   `json:"incomplete"`
}

// agentSpans parses the agent's JSON lines written so far.
func agentSpans(t *testing.T, p *testproc.Process) []agentLine {
	t.Helper()
	var out []agentLine
	for _, l := range lines(t, p) {
		var a agentLine
		if err := json.Unmarshal(l, &a); err != nil {
			t.Fatalf("agent wrote %q: %v", l, err)
		}
		out = append(out, a)
	}
	return out
}
