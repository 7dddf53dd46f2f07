package testkit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the main package pkg of this module — a path relative to the module root such
// as "./test/fakectl", or an import path — with go build and the given flags (e.g. "-trimpath",
// "-ldflags=-s -w", "-buildmode=pie") into t.TempDir, and returns the binary's path. It fails t
// when the build fails. A test binary builds each package, environment and flags once: a later
// call gets a copy of that build, a file of its own (see GoBuild).
func Build(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	return BuildEnv(t, pkg, nil, flags...)
}

// BuildEnv is Build with env (e.g. "CGO_ENABLED=0") added to go's environment.
func BuildEnv(t testing.TB, pkg string, env []string, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(pkg))
	start := time.Now()
	again, err := goBuild(out, pkg, env, flags...)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	logBuild(t, pkg, again, start)
	return out
}

// logBuild says how out came to be: built, or copied from this test binary's earlier build.
func logBuild(t testing.TB, what string, again bool, start time.Time) {
	t.Helper()
	if again {
		t.Logf("testkit: %s as built before by this test binary, copied in %s", what, time.Since(start).Round(time.Millisecond))
		return
	}
	t.Logf("testkit: built %s in %s", what, time.Since(start).Round(time.Millisecond))
}

// GoBuild builds the main package pkg of this module into out, as Build does, for a build
// outside one test (once for a whole test binary, or in a program of the module's own).
//
// A process runs go build once for each package, environment (env and its own) and flags: a
// later call with the same ones copies that build's binary to out. The copy is a file of its
// own (a test may replace, delete or re-exec it), the same bytes go build would link again
// from its cache, minus the link: a few seconds each, 20 under load, and test/integration
// asked for the same fixture 44 times a run.
func GoBuild(out, pkg string, env []string, flags ...string) error {
	_, err := goBuild(out, pkg, env, flags...)
	return err
}

// goBuild is GoBuild, and says whether out is a copy of an earlier build.
func goBuild(out, pkg string, env []string, flags ...string) (again bool, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return false, err
	}
	return once(buildKey(root, pkg, env, flags), out, path.Base(pkg), goBuildIn(root, pkg, env, flags))
}

// goBuildIn returns the run of once that builds pkg with go build in dir, with env and flags.
func goBuildIn(dir, pkg string, env, flags []string) func(bin string) error {
	return func(bin string) error {
		args := append(append([]string{"build", "-o", bin}, flags...), pkg)
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s go %s in %s: %w\n%s", strings.Join(env, " "), strings.Join(args, " "), dir, err, msg)
		}
		return nil
	}
}

// buildKey is what a build's binary depends on, besides the sources: where and what it builds,
// the environment go runs in and the flags.
func buildKey(dir, pkg string, env, flags []string) string {
	return strings.Join([]string{dir, pkg, strings.Join(env, "\x01"), strings.Join(flags, "\x01"), strings.Join(os.Environ(), "\x01")}, "\x00")
}

// builds are the builds this process made, by buildKey, in one folder of its own.
var builds = struct {
	sync.Mutex
	dir string
	n   int
	by  map[string]*build
}{by: map[string]*build{}}

// build is one build of builds: done is closed when bin holds its binary, or err says why not.
type build struct {
	done chan struct{}
	bin  string
	err  error
}

// buildsPrefix names the builds' folder of a process, in the system's temporary folder,
// followed by its PID and a dash.
const buildsPrefix = "reconscope-testkit-builds-"

// once copies to out the binary of the build key, made by run (into the path it is given) the
// first time it is asked for; calls for one key at once wait for one build. A failed build is
// not kept: the next call tries again. again is true when out is a copy of an earlier build.
func once(key, out, name string, run func(bin string) error) (again bool, err error) {
	builds.Lock()
	b, ok := builds.by[key]
	if !ok {
		builds.n++
		b = &build{done: make(chan struct{}), bin: strconv.Itoa(builds.n) + "-" + name}
		builds.by[key] = b
	}
	builds.Unlock()
	if ok {
		<-b.done
		if b.err != nil {
			return false, b.err
		}
		return true, CopyFile(b.bin, out)
	}
	b.err = func() error {
		dir, err := buildsDir()
		if err != nil {
			return err
		}
		b.bin = filepath.Join(dir, b.bin)
		return run(b.bin)
	}()
	err = b.err
	if err != nil {
		builds.Lock()
		delete(builds.by, key)
		builds.Unlock()
	}
	close(b.done)
	if err != nil {
		return false, err
	}
	return false, CopyFile(b.bin, out)
}

// buildsDir makes this process's builds folder the first time, after removing those of
// processes gone (a test binary has no hook at its exit: its folder goes with the next one's
// start).
func buildsDir() (string, error) {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		return builds.dir, nil
	}
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), buildsPrefix+"*"))
	for _, d := range old {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(d), buildsPrefix), "-", 2)[0])
		if err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
	dir, err := os.MkdirTemp("", buildsPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("builds folder: %w", err)
	}
	builds.dir = dir
	return dir, nil
}

// CopyFile copies the executable src to dst, replacing it, with src's mode: a file of its own
// (another inode, so that uprobes attached to one do not fire in the other).
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	os.Remove(dst) // a running executable cannot be written over; a new file takes its name
	w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, in); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// BuildModule builds the main package of the module of its own in dir — a folder relative to
// this module's root holding a go.mod and go.sum, such as "test/fixtures/external-provisioner"
// — with go build and the given flags into t.TempDir, and returns the binary's path. Its
// modules come from the module cache, or the Go module proxy the first time (go.sum checks
// them). Like Build, once per test binary for each dir and flags.
func BuildModule(t testing.TB, dir string, flags ...string) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	out := filepath.Join(t.TempDir(), path.Base(dir))
	start := time.Now()
	env := []string{"GOWORK=off", "GOFLAGS=-mod=readonly"}
	modDir := filepath.Join(root, dir)
	again, err := once(buildKey(modDir, ".", env, flags), out, path.Base(dir), goBuildIn(modDir, ".", env, flags))
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	logBuild(t, dir, again, start)
	return out
}

// modulePath is this module's path, as its go.mod names it.
const modulePath = "github.com/reconscope/reconscope"

// ModuleRoot finds the folder of this module's go.mod, walking up from the working directory
// (go test runs in the package's folder), then from this source file.
func ModuleRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if isModuleRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("find module root: no go.mod of " + modulePath + " above the working directory")
}

// isModuleRoot tells whether dir holds the go.mod of modulePath.
func isModuleRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == modulePath
		}
	}
	return false
}
