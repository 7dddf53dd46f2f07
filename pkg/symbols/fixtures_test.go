package symbols

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/reconscope/reconscope/internal/bpftest"
)

// fixture is one build of a testdata program.
type fixture struct {
	name     string
	pkg      string   // package to build, relative to this directory
	arch     string   // GOARCH
	cgo      bool     // CGO_ENABLED=1 and -tags withcgo
	flags    []string // extra go build flags
	stripped bool
	twin     string // name of the unstripped twin of a stripped build ("" for itself)
}

// The unstripped builds pass the linker's no-op flag twice ("-n -n") so that the build
// settings recorded in the binary have the same length as the stripped twin's "-s -w": the
// loaded segments of the twins are then byte for byte the same except those two flags, and
// addresses (functions, itabs, types) can be compared between them.
const sameLayoutAsStripped = "-ldflags=-n -n"

var fixtures = []fixture{
	{name: "plain", pkg: "./testdata/prog", arch: "amd64", flags: []string{sameLayoutAsStripped}},
	{name: "stripped", pkg: "./testdata/prog", arch: "amd64", flags: []string{"-ldflags=-s -w"}, stripped: true, twin: "plain"},
	{name: "pie", pkg: "./testdata/prog", arch: "amd64", flags: []string{"-buildmode=pie", sameLayoutAsStripped}},
	{name: "pie-stripped", pkg: "./testdata/prog", arch: "amd64", flags: []string{"-buildmode=pie", "-ldflags=-s -w"}, stripped: true, twin: "pie"},
	{name: "cgo", pkg: "./testdata/prog", arch: "amd64", cgo: true, flags: []string{sameLayoutAsStripped}},
	{name: "cgo-stripped", pkg: "./testdata/prog", arch: "amd64", cgo: true, flags: []string{"-ldflags=-s -w"}, stripped: true, twin: "cgo"},
	{name: "arm64", pkg: "./testdata/prog", arch: "arm64", flags: []string{sameLayoutAsStripped}},
	{name: "arm64-stripped", pkg: "./testdata/prog", arch: "arm64", flags: []string{"-ldflags=-s -w"}, stripped: true, twin: "arm64"},
}

var kubeFixtures = []fixture{
	{name: "kube", pkg: "./testdata/kubeprog", arch: "amd64", flags: []string{sameLayoutAsStripped}},
	{name: "kube-stripped", pkg: "./testdata/kubeprog", arch: "amd64", flags: []string{"-ldflags=-s -w"}, stripped: true, twin: "kube"},
}

var (
	fixtureDir     string
	fixtureDirOnce sync.Once
	fixtureMu      sync.Mutex
	fixtureBuilt   = map[string]*fixtureResult{}
)

type fixtureResult struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

func goTool(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		bpftest.SkipOrFail(t, "the go command is not available to build fixtures")
	}
	return p
}

func findFixture(name string) fixture {
	for _, f := range append(append([]fixture{}, fixtures...), kubeFixtures...) {
		if f.name == name {
			return f
		}
	}
	panic("no fixture " + name)
}

// build returns the path of the fixture's binary, building it on first use.
func build(t testing.TB, name string) string {
	t.Helper()
	fx := findFixture(name)
	if fx.cgo {
		if _, err := exec.LookPath("gcc"); err != nil {
			bpftest.SkipOrFail(t, "the cgo fixture needs gcc (apt-get install gcc)")
		}
	}
	fixtureDirOnce.Do(func() {
		d, err := os.MkdirTemp("", "symbols-fixtures-")
		if err != nil {
			panic(err)
		}
		fixtureDir = d
	})
	fixtureMu.Lock()
	r := fixtureBuilt[name]
	if r == nil {
		r = &fixtureResult{}
		fixtureBuilt[name] = r
	}
	fixtureMu.Unlock()
	r.once.Do(func() {
		out := filepath.Join(fixtureDir, name)
		args := append([]string{"build", "-o", out}, fx.flags...)
		if fx.cgo {
			args = append(args, "-tags", "withcgo")
		}
		args = append(args, fx.pkg)
		cmd := exec.Command(goTool(t), args...)
		cgo := "0"
		if fx.cgo {
			cgo = "1"
		}
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+fx.arch, "CGO_ENABLED="+cgo, "GOTOOLCHAIN=local")
		if o, err := cmd.CombinedOutput(); err != nil {
			r.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, o)
			return
		}
		r.path = out
	})
	if r.err != nil {
		t.Fatalf("build fixture %s: %v", name, r.err)
	}
	return r.path
}

func openFixture(t testing.TB, name string) *Binary {
	t.Helper()
	b, err := Open(build(t, name))
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// nmSym is one line of `go tool nm -size`.
type nmSym struct {
	addr, size uint64
	kind       string
	name       string
}

func goNM(t testing.TB, bin string) []nmSym {
	t.Helper()
	out, err := exec.Command(goTool(t), "tool", "nm", "-size", "-sort", "address", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm %s: %v", bin, err)
	}
	var syms []nmSym
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		addr, err1 := strconv.ParseUint(f[0], 16, 64)
		size, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		// The name may contain spaces (generic shapes): everything after the kind.
		line := sc.Text()
		i := strings.Index(line, " "+f[2]+" ")
		syms = append(syms, nmSym{addr: addr, size: size, kind: f[2], name: line[i+len(f[2])+2:]})
	}
	return syms
}

// objInsn is one instruction line of `go tool objdump`.
type objInsn struct {
	addr  uint64
	bytes []byte
	text  string
}

// goObjdump disassembles the whole binary and returns the instructions of each function,
// keyed by the function's entry address.
func goObjdump(t testing.TB, bin string) map[uint64][]objInsn {
	t.Helper()
	cmd := exec.Command(goTool(t), "tool", "objdump", bin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool objdump %s: %v", bin, err)
	}
	return parseObjdump(out)
}

// parseObjdump splits go tool objdump output into functions keyed by entry address.
func parseObjdump(out []byte) map[uint64][]objInsn {
	funcs := map[uint64][]objInsn{}
	var cur uint64
	start := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "TEXT ") {
			start = true
			continue
		}
		var parts []string
		for _, p := range strings.Split(line, "\t") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		if len(parts) < 3 || !strings.HasPrefix(parts[1], "0x") {
			continue
		}
		addr, err := strconv.ParseUint(parts[1][2:], 16, 64)
		if err != nil {
			continue
		}
		var raw []byte
		if _, err := fmt.Sscanf(parts[2], "%x", &raw); err != nil {
			continue
		}
		text := ""
		if len(parts) > 3 {
			text = strings.Join(parts[3:], " ")
		}
		if start {
			cur, start = addr, false
		}
		funcs[cur] = append(funcs[cur], objInsn{addr: addr, bytes: raw, text: text})
	}
	return funcs
}
