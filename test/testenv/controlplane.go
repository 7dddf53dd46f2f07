package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/reconscope/reconscope/internal/testkit"
)

// ControlPlaneDirEnv names the environment variable that, when set, is used as the control plane
// folder instead of running test/tools/build-controlplane.sh.
const ControlPlaneDirEnv = "RECONSCOPE_CONTROLPLANE_DIR"

// controlPlaneBinaries are the files ControlPlaneDir promises in its folder.
var controlPlaneBinaries = []string{
	"etcd", "kube-apiserver", "kube-controller-manager", "kube-controller-manager-stripped", "kubectl",
}

var controlPlane struct {
	sync.Mutex
	dir string
}

// ControlPlaneDir returns the folder holding etcd, kube-apiserver, kube-controller-manager,
// kube-controller-manager-stripped and kubectl. It runs test/tools/build-controlplane.sh (found at
// the module root) and returns the last line of its stdout; the script builds the binaries the
// first time (about 11 minutes on 2 cores; give `go test` a -timeout of 30m then) and answers from
// its cache afterwards. Concurrent test binaries wait for each other's build through a lock file
// in the cache. The answer is kept for the life of the test binary.
//
// When the environment variable RECONSCOPE_CONTROLPLANE_DIR is set, its value is returned
// without running the script.
func ControlPlaneDir() (string, error) {
	if dir := os.Getenv(ControlPlaneDirEnv); dir != "" {
		return dir, checkControlPlaneDir(dir)
	}
	controlPlane.Lock()
	defer controlPlane.Unlock()
	if controlPlane.dir != "" {
		return controlPlane.dir, nil
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		return "", err
	}
	unlock, err := lockFile(".build-controlplane.lock")
	if err != nil {
		return "", err
	}
	defer unlock()

	script := filepath.Join(root, "test", "tools", "build-controlplane.sh")
	dir, err := runToolScript(root, script)
	if err != nil {
		return "", err
	}
	if dir == "" {
		return "", fmt.Errorf("run %s: it printed no folder", script)
	}
	if err := checkControlPlaneDir(dir); err != nil {
		return "", err
	}
	controlPlane.dir = dir
	return dir, nil
}

// runToolScript runs the build script at path from the module root and returns the last line
// it printed: the folder of its (cached) build.
func runToolScript(root, path string) (string, error) {
	cmd := exec.Command("bash", path)
	cmd.Dir = root
	cmd.Stderr = os.Stderr // build progress: a cold build takes minutes
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("run %s: %w (run it by hand to see why)", path, err)
	}
	return lastLine(out), nil
}

// checkControlPlaneDir reports a missing binary in dir.
func checkControlPlaneDir(dir string) error {
	for _, name := range controlPlaneBinaries {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("check control plane folder %s: %w (unset %s or run test/tools/build-controlplane.sh)", dir, err, ControlPlaneDirEnv)
		}
	}
	return nil
}

// lockFile takes an exclusive lock on the file name in the cache folder the build scripts use,
// so two test binaries (go test runs packages in parallel) never build into the same folder at
// once.
func lockFile(name string) (unlock func(), err error) {
	cache := os.Getenv("RECONSCOPE_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("find cache folder: %w (set RECONSCOPE_CACHE)", err)
		}
		cache = filepath.Join(base, "reconscope")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("create cache folder: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(cache, name), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

// lastLine returns the last non-empty line of out.
func lastLine(out []byte) string {
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			last = line
		}
	}
	return last
}
