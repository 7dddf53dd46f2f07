package testkit

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBuildOnce: a second Build of the same package and flags is a copy of the first build (a
// file of its own, the same bytes), other flags are a build of their own, and a failed build
// is tried again.
func TestBuildOnce(t *testing.T) {
	const pkg = "./test/tools/pause"
	first := Build(t, pkg)
	second := Build(t, pkg)
	if first == second {
		t.Fatalf("two Builds returned one path %s", first)
	}
	a, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the second Build (%d bytes) is not the first's binary (%d bytes)", len(b), len(a))
	}
	if st, err := os.Stat(second); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("the copy is not executable: %v %v", st.Mode(), err)
	}
	// A file of its own: removing one leaves the other.
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(second); err != nil {
		t.Errorf("removing the first build's file took the second: %v", err)
	}

	stripped := Build(t, pkg, "-ldflags=-s -w")
	c, err := os.ReadFile(stripped)
	if err != nil {
		t.Fatal(err)
	}
	if len(c) >= len(a) {
		t.Errorf("the build with -ldflags=-s -w (%d bytes) is not smaller than the plain one (%d bytes): a copy of it?", len(c), len(a))
	}

	builds.Lock()
	n := len(builds.by)
	builds.Unlock()
	var again bool
	for i := 0; i < 2; i++ {
		again, err = goBuild(filepath.Join(t.TempDir(), "x"), "./test/tools/no-such-package", nil)
		if err == nil || again {
			t.Fatalf("building a package that does not exist: again %v, err %v", again, err)
		}
	}
	builds.Lock()
	after := len(builds.by)
	builds.Unlock()
	if after != n {
		t.Errorf("a failed build was kept: %d builds remembered, was %d", after, n)
	}
	if !strings.Contains(err.Error(), "no-such-package") {
		t.Errorf("the failed build's error does not name the package: %v", err)
	}
}

// TestBuildsDirOfGoneProcess: a builds folder whose process is gone is removed when another
// process makes its own; one of a live process is left.
func TestBuildsDirOfGoneProcess(t *testing.T) {
	if _, err := buildsDir(); err != nil {
		t.Fatal(err)
	}
	// PID 1 lives; a PID above the kernel's maximum cannot.
	live := filepath.Join(os.TempDir(), buildsPrefix+"1-test")
	gone := filepath.Join(os.TempDir(), buildsPrefix+strconv.Itoa(1<<23)+"-test")
	for _, d := range []string{live, gone} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(live); os.RemoveAll(gone) })
	builds.Lock()
	mine := builds.dir
	builds.dir = ""
	builds.Unlock()
	dir, err := buildsDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if _, err := os.Stat(gone); err == nil {
		t.Errorf("%s, of a process gone, is still there", gone)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("%s, of a live process, was removed: %v", live, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("this process's own builds folder %s was removed: %v", mine, err)
	}
}
