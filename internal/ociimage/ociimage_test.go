package ociimage_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/ociimage"
	"github.com/reconscope/reconscope/internal/testkit"
)

// tinySpec writes a fake executable per architecture and a data file, and returns a spec of
// an image holding them.
func tinySpec(t *testing.T, ref string, platforms ...string) ociimage.Spec {
	t.Helper()
	dir := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		if err := os.WriteFile(filepath.Join(dir, "app_"+arch), []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca"), []byte("certs"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := ociimage.ParseFile(filepath.Join(dir, "ca") + "=/etc/ssl/certs/ca.crt:0444")
	if err != nil {
		t.Fatal(err)
	}
	return ociimage.Spec{
		Ref:       ref,
		Platforms: platforms,
		Files: []ociimage.File{
			{Source: filepath.Join(dir, "app_"+ociimage.ArchPlaceholder), Dest: "/usr/bin/app"}, // executable: 0755
			{Source: filepath.Join(dir, "data"), Dest: "/var/lib/app/data"},                     // not: 0644
			ca,
		},
		Entrypoint: []string{"/usr/bin/app"},
		Cmd:        []string{"run", "--flag"},
		User:       "0",
		Env:        []string{"A=b", "PATH=/usr/bin"},
		WorkingDir: "/var/lib/app",
	}
}

// writeTar builds spec into a layout tarball in a temporary folder and returns its path.
func writeTar(t *testing.T, spec ociimage.Spec) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(spec, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// eachInTar calls each with every entry of the tar stream r and its content, in order.
func eachInTar(t *testing.T, r io.Reader, each func(h *tar.Header, data []byte)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		each(h, b)
	}
}

// untar extracts a layout tarball and opens it with go-containerregistry's layout package.
func untar(t *testing.T, file string) layout.Path {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	eachInTar(t, f, func(h *tar.Header, b []byte) {
		if !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI layout: %v", err)
	}
	return lp
}

// openIndex extracts a layout tarball and returns its top index (index.json) and that index's
// manifest.
func openIndex(t *testing.T, file string) (v1.ImageIndex, *v1.IndexManifest) {
	t.Helper()
	top, err := untar(t, file).ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	return top, manifestOf(t, top)
}

// manifestOf returns idx's manifest.
func manifestOf(t *testing.T, idx v1.ImageIndex) *v1.IndexManifest {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type fileInLayer struct {
	typ  byte
	mode int64
	data string
}

// layerFiles returns every entry of the image's filesystem, in the order of its layer.
func layerFiles(t *testing.T, img v1.Image) (map[string]fileInLayer, []string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	mt, err := layers[0].MediaType()
	if err != nil || mt != types.OCILayer {
		t.Errorf("layer media type %s (%v), want %s", mt, err, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]fileInLayer{}
	var order []string
	eachInTar(t, rc, func(h *tar.Header, b []byte) {
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner %d:%d, mtime %v; want 0:0 and the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		files[h.Name] = fileInLayer{typ: h.Typeflag, mode: h.Mode, data: string(b)}
		order = append(order, h.Name)
	})
	return files, order
}

func checkImage(t *testing.T, img v1.Image, arch string) {
	t.Helper()
	mt, err := img.MediaType()
	if err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("%s: manifest media type %s (%v), want %s", arch, mt, err, types.OCIManifestSchema1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("config platform %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/bin/app"}) || !slices.Equal(c.Cmd, []string{"run", "--flag"}) ||
		c.User != "0" || !slices.Equal(c.Env, []string{"A=b", "PATH=/usr/bin"}) || c.WorkingDir != "/var/lib/app" {
		t.Errorf("%s: config entrypoint %q cmd %q user %q env %q workdir %q", arch, c.Entrypoint, c.Cmd, c.User, c.Env, c.WorkingDir)
	}
	if !cf.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("%s: created %v, want the epoch", arch, cf.Created)
	}
	files, order := layerFiles(t, img)
	want := map[string]fileInLayer{
		"etc/":                 {tar.TypeDir, 0o755, ""},
		"etc/ssl/":             {tar.TypeDir, 0o755, ""},
		"etc/ssl/certs/":       {tar.TypeDir, 0o755, ""},
		"etc/ssl/certs/ca.crt": {tar.TypeReg, 0o444, "certs"},
		"usr/":                 {tar.TypeDir, 0o755, ""},
		"usr/bin/":             {tar.TypeDir, 0o755, ""},
		"usr/bin/app":          {tar.TypeReg, 0o755, "binary for " + arch},
		"var/":                 {tar.TypeDir, 0o755, ""},
		"var/lib/":             {tar.TypeDir, 0o755, ""},
		"var/lib/app/":         {tar.TypeDir, 0o755, ""},
		"var/lib/app/data":     {tar.TypeReg, 0o644, "data"},
	}
	if len(files) != len(want) {
		t.Errorf("%s: layer holds %v, want %d entries", arch, order, len(want))
	}
	for name, w := range want {
		if got, ok := files[name]; !ok || got != w {
			t.Errorf("%s: %s = %+v (present %v), want %+v", arch, name, got, ok, w)
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("%s: layer entries not sorted: %v", arch, order)
	}
}

func TestMultiPlatformIndex(t *testing.T) {
	spec := tinySpec(t, "example.com/team/app:v1", "linux/amd64", "linux/arm64")
	out := writeTar(t, spec)
	top, im := openIndex(t, out)
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json holds %d entries, want 1 (the image index)", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.MediaType != types.OCIImageIndex {
		t.Errorf("index.json entry is a %s, want an image index", d.MediaType)
	}
	if d.Annotations[ociimage.AnnotationImageName] != "example.com/team/app:v1" || d.Annotations[ociimage.AnnotationRefName] != "v1" {
		t.Errorf("index.json annotations %v", d.Annotations)
	}
	idx, err := top.ImageIndex(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m := manifestOf(t, idx)
	var archs []string
	for _, md := range m.Manifests {
		if md.Platform == nil || md.Platform.OS != "linux" {
			t.Fatalf("manifest %s: platform %v", md.Digest, md.Platform)
		}
		archs = append(archs, md.Platform.Architecture)
		img, err := idx.Image(md.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, img, md.Platform.Architecture)
	}
	if !slices.Equal(archs, []string{"amd64", "arm64"}) {
		t.Errorf("platforms %v, want amd64 and arm64", archs)
	}

	// Reproducible: the same inputs give the same bytes.
	again := writeTar(t, spec)
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("two builds of the same spec differ")
	}
}

func TestSinglePlatform(t *testing.T) {
	top, im := openIndex(t, writeTar(t, tinySpec(t, "app", "linux/arm64")))
	if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIManifestSchema1 {
		t.Fatalf("index.json: %+v, want one image manifest", im.Manifests)
	}
	d := im.Manifests[0]
	// A name without registry is Docker Hub's, spelt as containerd and the kubelet spell it.
	if d.Annotations[ociimage.AnnotationImageName] != "docker.io/library/app:latest" || d.Annotations[ociimage.AnnotationRefName] != "latest" {
		t.Errorf("annotations %v", d.Annotations)
	}
	if d.Platform == nil || d.Platform.Architecture != "arm64" {
		t.Errorf("platform %v", d.Platform)
	}
	img, err := top.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, img, "arm64")
}

func TestBadInput(t *testing.T) {
	for _, s := range []string{"noequals", "=/x", "a=", "a=relative/path", "a=/x:999", "a=/x:rw", "a=/x/../y", "a=/"} {
		if _, err := ociimage.ParseFile(s); err == nil {
			t.Errorf("ParseFile(%q) accepted", s)
		}
	}
	good := tinySpec(t, "app:v1", "linux/amd64")
	for name, mutate := range map[string]func(*ociimage.Spec){
		"digest ref":     func(s *ociimage.Spec) { s.Ref = "app@sha256:" + strings.Repeat("0", 64) },
		"bad ref":        func(s *ociimage.Spec) { s.Ref = "UPPER/Case:v1" },
		"no platform":    func(s *ociimage.Spec) { s.Platforms = nil },
		"bad platform":   func(s *ociimage.Spec) { s.Platforms = []string{"amd64"} },
		"platform twice": func(s *ociimage.Spec) { s.Platforms = []string{"linux/amd64", "linux/amd64"} },
		"missing source": func(s *ociimage.Spec) {
			s.Files = append(s.Files, ociimage.File{Source: "/nonexistent/file", Dest: "/x"})
		},
		"directory source": func(s *ociimage.Spec) { s.Files = append(s.Files, ociimage.File{Source: t.TempDir(), Dest: "/x"}) },
		"same dest twice":  func(s *ociimage.Spec) { s.Files = append(s.Files, s.Files[0]) },
		"file and directory": func(s *ociimage.Spec) {
			s.Files = append(s.Files, ociimage.File{Source: s.Files[1].Source, Dest: "/usr/bin/app/x"})
		},
		"runs nothing": func(s *ociimage.Spec) { s.Entrypoint, s.Cmd = nil, nil },
	} {
		s := good
		s.Files = slices.Clone(good.Files)
		mutate(&s)
		if err := ociimage.WriteFile(s, filepath.Join(t.TempDir(), "x.tar")); err == nil {
			t.Errorf("%s: built", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestContainerdImport imports built images into a real containerd (Debian's containerd
// package, or any containerd and ctr on PATH), started for the test on a socket of its own,
// and checks that it names them as the kubelet will look them up.
func TestContainerdImport(t *testing.T) {
	containerd, err1 := exec.LookPath("containerd")
	ctr, err2 := exec.LookPath("ctr")
	if err := errors.Join(err1, err2); err != nil {
		bpftest.SkipOrFail(t, "no containerd and ctr: %v", err)
	}
	if os.Geteuid() != 0 {
		bpftest.SkipOrFail(t, "containerd needs root")
	}
	dir, err := os.MkdirTemp("", "ctd") // short: the socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	config := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var log testkit.LogBuffer // containerd writes it while the test reads it
	ctx, cancel := context.WithCancel(context.Background())
	daemon := exec.CommandContext(ctx, containerd, "--config", filepath.Join(dir, "config.toml"))
	daemon.Stdout, daemon.Stderr = &log, &log
	daemon.Cancel = func() error { return daemon.Process.Signal(os.Interrupt) }
	daemon.WaitDelay = 10 * time.Second
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = daemon.Wait()
		// containerd unmounts its own snapshots; an overlay mount left behind would keep dir busy.
		if b, err := os.ReadFile("/proc/self/mounts"); err == nil && strings.Contains(string(b), dir) {
			t.Errorf("mounts left under %s after containerd stopped", dir)
		}
	})
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(ctr, append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s\ncontainerd log:\n%s", strings.Join(args, " "), err, out, log.String())
		}
		return string(out)
	}
	testkit.WaitFor(t, "containerd to start", 30*time.Second, func() (bool, string) {
		_, err := os.Stat(sock)
		return err == nil && exec.Command(ctr, "--address", sock, "version").Run() == nil, "containerd log:\n" + log.String()
	})

	multi := writeTar(t, tinySpec(t, "example.com/team/app:v1", "linux/amd64", "linux/arm64"))
	single := writeTar(t, tinySpec(t, "app:v2", "linux/amd64"))
	run("images", "import", multi)
	run("images", "import", single)
	got := strings.Fields(run("images", "ls", "--quiet"))
	for _, want := range []string{"example.com/team/app:v1", "docker.io/library/app:v2"} {
		if !slices.Contains(got, want) {
			t.Errorf("containerd's images %v: no %s", got, want)
		}
	}
	// Every blob of every platform arrived: ctr reports the image complete.
	check := run("images", "check")
	for _, line := range strings.Split(strings.TrimSpace(check), "\n")[1:] {
		if !strings.Contains(line, "complete") {
			t.Errorf("ctr images check: %s", line)
		}
	}
	t.Logf("ctr images check:\n%s", check)
}
