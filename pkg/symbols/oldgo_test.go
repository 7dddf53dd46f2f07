package symbols

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOlderGo builds the fixture program with older Go toolchains (fetched by the go command
// through GOTOOLCHAIN) and runs the function, site, itab and field-offset checks on them: the
// moduledata, pclntab and prologue layouts differ between releases. Set RECONSCOPE_OLD_GO,
// e.g. "go1.18.10,go1.20.14,go1.22.12".
func TestOlderGo(t *testing.T) {
	versions := os.Getenv("RECONSCOPE_OLD_GO")
	if versions == "" {
		t.Skip("set RECONSCOPE_OLD_GO to a comma-separated list of Go versions to build fixtures with")
	}
	testGoReleases(t, strings.Split(versions, ","))
}

// testGoReleases runs TestOlderGo's checks on the fixture program built with each release.
func testGoReleases(t *testing.T, versions []string) {
	src := t.TempDir()
	for _, f := range []string{"main.go", "nocgo.go"} {
		data, err := os.ReadFile(filepath.Join("testdata", "prog", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module oldprog\n\ngo 1.18\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		for _, arch := range []string{"amd64", "arm64"} {
			t.Run(v+"-"+arch, func(t *testing.T) {
				buildOld := func(name string, flags ...string) string {
					out := filepath.Join(src, name)
					args := append(append([]string{"build", "-o", out}, flags...), ".")
					cmd := exec.Command(goTool(t), args...)
					cmd.Dir = src
					cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+v, "GOFLAGS=", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
					if o, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("go %v with %s: %v\n%s", args, v, err, o)
					}
					return out
				}
				plainPath := buildOld(v + "-" + arch)
				strippedPath := buildOld(v+"-"+arch+"-stripped", "-ldflags=-s -w")
				dump := goObjdump(t, plainPath)
				names := map[bool][]string{}
				var goid uint64
				for _, stripped := range []bool{false, true} {
					path := plainPath
					if stripped {
						path = strippedPath
					}
					b, err := Open(path)
					if err != nil {
						t.Fatal(err)
					}
					defer b.Close()
					if b.GoVersion != v || b.Stripped != stripped || b.Arch != arch {
						t.Fatalf("facts: %s, stripped %v, %s", b.GoVersion, b.Stripped, b.Arch)
					}
					// The -s -w build keeps the text layout of the plain one (data may move by
					// a few bytes: the recorded flags differ), so functions and sites compare
					// by address; file bytes only for the plain build itself.
					checkFunctions(t, b, plainPath, stripped)
					checkSites(t, b, dump, !stripped)
					list, err := b.ItabList()
					if err != nil {
						t.Fatal(err)
					}
					for _, it := range list {
						if it.Interface == "error" {
							names[stripped] = append(names[stripped], it.Type)
							// As the collector names an error's type: through the itab's
							// type pointer in the process memory (here the file's bytes).
							if name, err := b.ItabTypeName(memOf(t, b), 0, it.Addr); err != nil || name != it.Type {
								t.Errorf("ItabTypeName(%#x) = %q, %v; want %q", it.Addr, name, err, it.Type)
							}
						}
					}
					// Unstripped: from DWARF. Stripped: from the table if it has this release
					// (then equal to DWARF), else an error naming the release.
					off, err := b.FieldOffset("runtime.g", "goid")
					switch {
					case !stripped && (err != nil || off.Source != "dwarf" || off.Value == 0):
						t.Errorf("FieldOffset(runtime.g, goid) = %+v, %v", off, err)
					case !stripped:
						goid = off.Value
					case err == nil && (off.Source != "table" || off.Value != goid):
						t.Errorf("FieldOffset(runtime.g, goid) on a stripped %s = %+v, DWARF says %d", v, off, goid)
					case err != nil && (!errors.Is(err, ErrOffsetUnknown) || !strings.Contains(err.Error(), v)):
						t.Errorf("FieldOffset error does not name %s: %v", v, err)
					}
				}
				if strings.Join(names[false], ",") != strings.Join(names[true], ",") {
					t.Errorf("error itabs differ: %v unstripped, %v stripped", names[false], names[true])
				}
				joined := strings.Join(names[false], ",")
				if !strings.Contains(joined, "*errors.errorString") || !strings.Contains(joined, "*fmt.wrapError") {
					t.Errorf("error itabs: %v", names[false])
				}
			})
		}
	}
}
