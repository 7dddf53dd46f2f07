package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/reconscope/reconscope/internal/ociimage"
	"github.com/reconscope/reconscope/internal/testkit"
)

// TestRelease assembles a release from a real multi-arch image tarball, a real Go binary and
// the repository's chart, with real helm and the SBOM tool, and checks each artifact the way a
// user would: sha256sum -c passes over every file; the digest file names the image index's
// digest (as go-containerregistry computes it, not as the tool reads it); the packaged chart has
// the release as version and appVersion and runs the image by that digest; the manifest runs
// it too; each SBOM is CycloneDX and lists every module the binary was built with, at its
// version.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds helm and runs the SBOM tool from the Go module proxy on first use")
	}
	helm := testkit.Helm(t)
	dir := t.TempDir()
	spec := ociimage.Spec{Ref: "registry.example:5000/team/agent:v9.8.7", Platforms: []string{"linux/amd64", "linux/arm64"},
		Files: []ociimage.File{{Source: writeFile(t, dir, "app", "a binary"), Dest: "/app"}}, Entrypoint: []string{"/app"}}
	ii, err := ociimage.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	top, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := "registry.example:5000/team/agent@" + top.Manifests[0].Digest.String()
	tarball := filepath.Join(dir, "image.tar")
	if err := ociimage.WriteFile(spec, tarball); err != nil {
		t.Fatal(err)
	}
	bins := filepath.Join(dir, "bin")
	bin := testkit.Build(t, "./test/fixtures/workqueue-controller") // a program with dependencies
	if err := os.MkdirAll(filepath.Join(bins, "linux_amd64"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"reconscope-agent", "kubectl-reconscope"} {
		if err := copyFile(bin, filepath.Join(bins, "linux_amd64", name)); err != nil {
			t.Fatal(err)
		}
	}

	out := filepath.Join(dir, "release")
	var stdout bytes.Buffer
	if err := run([]string{"--version", "v9.8.7", "--image-tar", tarball, "--binaries", bins, "--helm", helm,
		"--chart", "../../../deploy/helm/reconscope", "--out", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	t.Log(stdout.String())

	// sha256sum -c checks every file, and every file is in SHA256SUMS.
	check := exec.Command("sha256sum", "-c", "--strict", "SHA256SUMS")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, b)
	}
	sums, _ := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" && !bytes.Contains(sums, []byte("  "+e.Name()+"\n")) {
			t.Errorf("%s is not in SHA256SUMS", e.Name())
		}
	}
	for _, f := range []string{"reconscope-agent-image-v9.8.7.tar", "reconscope-agent-linux-amd64", "kubectl-reconscope-linux-amd64", "kubectl-reconscope-linux-amd64.cdx.json", "reconscope-v9.8.7.yaml", "reconscope-9.8.7.tgz"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("no %s: %v", f, err)
		}
	}

	if got, _ := os.ReadFile(filepath.Join(out, "reconscope-agent-image-v9.8.7.digest")); strings.TrimSpace(string(got)) != want {
		t.Errorf("digest file %q, want %q", got, want)
	}
	chartYAML, values := fromTgz(t, filepath.Join(out, "reconscope-9.8.7.tgz"), "reconscope/Chart.yaml"), fromTgz(t, filepath.Join(out, "reconscope-9.8.7.tgz"), "reconscope/values.yaml")
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal([]byte(chartYAML), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != "9.8.7" || chart.AppVersion != "v9.8.7" {
		t.Errorf("packaged Chart.yaml: version %q, appVersion %q, want 9.8.7 and v9.8.7", chart.Version, chart.AppVersion)
	}
	_, digest, _ := strings.Cut(want, "@")
	if !strings.Contains(values, "  digest: \""+digest+"\"\n") {
		t.Errorf("packaged values.yaml does not pin %s", digest)
	}
	rendered, err := exec.Command(helm, "template", "x", filepath.Join(out, "reconscope-9.8.7.tgz")).Output()
	if err != nil {
		t.Fatal(err)
	}
	manifest, _ := os.ReadFile(filepath.Join(out, "reconscope-v9.8.7.yaml"))
	for name, text := range map[string][]byte{"helm template of the package": rendered, "the release's manifest": manifest} {
		if n := bytes.Count(text, []byte("image: ")); n != 1 || !bytes.Contains(text, []byte("image: "+want+"\n")) {
			t.Errorf("%s: %d images, want one, %s", name, n, want)
		}
	}

	// The SBOM lists what the binary's own build information says it was built from.
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "reconscope-agent-linux-amd64.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat  string `json:"bomFormat"`
		Components []struct {
			Name, Version string
		} `json:"components"`
		Metadata struct {
			Component struct{ Name, Version string } `json:"component"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Version != "v9.8.7" {
		t.Errorf("SBOM: format %q, component %+v", bom.BOMFormat, bom.Metadata.Component)
	}
	listed := map[string]string{}
	for _, c := range bom.Components {
		listed[c.Name] = c.Version
	}
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		if listed[m.Path] != m.Version {
			t.Errorf("SBOM lists %s at %q, the binary was built with %s", m.Path, listed[m.Path], m.Version)
		}
	}
	if len(info.Deps) == 0 {
		t.Error("the binary has no dependencies to compare")
	}
}

// TestReleaseBadInput: a version that is not vMAJOR.MINOR.PATCH and a file that is not an OCI
// layout tarball are refused with what is wrong, before anything is written.
func TestReleaseBadInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := run([]string{"--version", "1.2", "--out", out}, io.Discard); err == nil || !strings.Contains(err.Error(), "vMAJOR.MINOR.PATCH") {
		t.Errorf("version 1.2: %v", err)
	}
	notTar := writeFile(t, dir, "image.tar", "not a tarball")
	if err := run([]string{"--version", "v1.2.3", "--image-tar", notTar, "--out", out}, io.Discard); err == nil || !strings.Contains(err.Error(), notTar) {
		t.Errorf("not a tarball: %v", err)
	}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// fromTgz returns the file name of a gzipped tarball.
func fromTgz(t *testing.T, tgz, name string) string {
	t.Helper()
	f, err := os.Open(tgz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s: %v", tgz, name, err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
}
