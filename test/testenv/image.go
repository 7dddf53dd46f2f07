package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconscope/reconscope/internal/testkit"
)

// ImageSpec describes an image BuildImage builds with the repository's image builder
// (internal/cmd/mkimage): files from this machine, no base image, nothing pulled.
type ImageSpec struct {
	// Ref is the image's name and tag, e.g. "reconscope.test/pause:test": what pods name
	// in their image field, and what the node's containerd calls it after the import.
	Ref string
	// Files are SRC=DST[:MODE] entries; SRC may hold {arch} (see mkimage --help).
	Files []string
	// Entrypoint and Cmd are the image's; User, Env (K=V) and Workdir are optional.
	Entrypoint, Cmd []string
	User            string
	Env             []string
	Workdir         string
	// Platforms defaults to linux/amd64.
	Platforms []string
	// Spec starts from one of mkimage's built-in specs (mkimage --spec), whose relative
	// sources are read from Dir: e.g. "agent", the image `make image` builds, with Dir holding
	// what the Makefile stages.
	Spec, Dir string
}

// mkimage is the mkimage binary built for the test binary's tests, rebuilt once the test that
// built it has ended: its TempDir is gone then (TestDaemonSetTwoNodes after TestDaemonSetOnNode
// found no mkimage at the path kept).
var mkimage struct {
	sync.Mutex
	path string
}

// BuildImage builds spec into an OCI image-layout tarball in t.TempDir and returns its path.
func BuildImage(t testing.TB, spec ImageSpec) string {
	t.Helper()
	mkimage.Lock()
	if _, err := os.Stat(mkimage.path); mkimage.path == "" || err != nil {
		mkimage.path = testkit.Build(t, "./internal/cmd/mkimage")
	}
	bin := mkimage.path
	mkimage.Unlock()
	out := filepath.Join(t.TempDir(), strings.NewReplacer("/", "_", ":", "_").Replace(spec.Ref)+".tar")
	args := []string{"--ref", spec.Ref, "--out", out}
	if spec.Spec != "" {
		args = append(args, "--spec", spec.Spec)
	}
	platforms := spec.Platforms
	if len(platforms) == 0 {
		platforms = []string{"linux/amd64"}
	}
	for _, p := range platforms {
		args = append(args, "--platform", p)
	}
	for _, f := range spec.Files {
		args = append(args, "--file", f)
	}
	for flag, list := range map[string][]string{"--entrypoint": spec.Entrypoint, "--cmd": spec.Cmd} {
		if len(list) > 0 {
			b, _ := json.Marshal(list)
			args = append(args, flag, string(b))
		}
	}
	if spec.User != "" {
		args = append(args, "--user", spec.User)
	}
	for _, e := range spec.Env {
		args = append(args, "--env", e)
	}
	if spec.Workdir != "" {
		args = append(args, "--workdir", spec.Workdir)
	}
	start := time.Now()
	cmd := exec.Command(bin, args...)
	cmd.Dir = spec.Dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: mkimage %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatalf("testenv: mkimage wrote no %s: %v", out, err)
	}
	t.Logf("testenv: built image %s (%d KiB) in %s", spec.Ref, st.Size()/1024, time.Since(start).Round(time.Millisecond))
	return out
}

var toolDirs struct {
	sync.Mutex
	dirs map[string]string
}

// toolDir runs the build script test/tools/<script> (which builds into the cache folder, or
// answers from it) and returns the folder it prints on its last line, after checking that the
// named files are there. Concurrent test binaries wait for each other through a lock file.
func toolDir(script string, files ...string) (string, error) {
	toolDirs.Lock()
	defer toolDirs.Unlock()
	if dir := toolDirs.dirs[script]; dir != "" {
		return dir, nil
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		return "", err
	}
	unlock, err := lockFile(".build-" + strings.TrimSuffix(script, ".sh") + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	path := filepath.Join(root, "test", "tools", script)
	dir, err := runToolScript(root, path)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("run %s: %w", path, err)
		}
	}
	if toolDirs.dirs == nil {
		toolDirs.dirs = map[string]string{}
	}
	toolDirs.dirs[script] = dir
	return dir, nil
}

// ToolDir is toolDir for tests: the folder of a cached build of test/tools/<script>.
func ToolDir(t testing.TB, script string, files ...string) string {
	t.Helper()
	dir, err := toolDir(script, files...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dir
}
