// Command release assembles reconscope's release artifacts from what `make image` built, with
// no registry (`make release` runs it):
//
//	go run ./internal/cmd/release --version v0.1.0 --image-tar bin/reconscope-agent-image.tar \
//	  --binaries bin/image --helm PATH --out bin/release
//
// Into --out, replaced whole:
//   - reconscope-agent-image-VERSION.tar: the multi-arch image (OCI layout tarball, the one
//     `make image` built), and reconscope-agent-image-VERSION.digest: its reference by digest
//     (REPOSITORY@sha256:…, the digest of its image index: what a registry would serve it as);
//   - reconscope-VERSION.tgz: the Helm chart packaged by helm, its version and appVersion the
//     release, its image.repository and image.digest the image's (pods run the image by digest
//     unless overridden);
//   - reconscope-VERSION.yaml: the chart's default render (the same agent as deploy/'s
//     kustomization, a test holds them equal) with the image by digest, for kubectl apply -f;
//   - reconscope-agent-linux-ARCH: the agent for local tracing, and
//     reconscope-agent-linux-ARCH.cdx.json: its CycloneDX SBOM (made by cyclonedx-gomod from the
//     binary's build information), for each architecture of --binaries;
//   - kubectl-reconscope-linux-ARCH: the kubectl plugin (installed as kubectl-reconscope on the
//     PATH), and its SBOM kubectl-reconscope-linux-ARCH.cdx.json, for the same architectures;
//   - SHA256SUMS: every file above (sha256sum -c SHA256SUMS checks them).
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// SBOMTool is the command that writes an SBOM of a Go binary (its arguments follow), pinned to
// a version the module proxy serves.
var SBOMTool = []string{"go", "run", "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0", "bin", "-json", "-licenses=false"}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// options are the flags.
type options struct {
	version, imageTar, binaries, helm, chart, out string
}

func run(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("release", flag.ContinueOnError)
	var o options
	fl.StringVar(&o.version, "version", "", "the release, vMAJOR.MINOR.PATCH (required)")
	fl.StringVar(&o.imageTar, "image-tar", "bin/reconscope-agent-image.tar", "the image's OCI layout tarball (make image)")
	fl.StringVar(&o.binaries, "binaries", "bin/image", "the agent binaries, DIR/linux_ARCH/reconscope-agent (make image), and the kubectl plugin's beside them, DIR/linux_ARCH/kubectl-reconscope (make release)")
	fl.StringVar(&o.helm, "helm", "helm", "the helm binary")
	fl.StringVar(&o.chart, "chart", "deploy/helm/reconscope", "the chart's directory")
	fl.StringVar(&o.out, "out", "bin/release", "the directory to write (replaced)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if !semver.MatchString(o.version) {
		return fmt.Errorf("--version %q: want vMAJOR.MINOR.PATCH", o.version)
	}
	return release(o, stdout)
}

var semver = regexp.MustCompile(`^v(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$`)

func release(o options, stdout io.Writer) error {
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	name, digest, err := ImageDigest(o.imageTar)
	if err != nil {
		return fmt.Errorf("read image %s: %w", o.imageTar, err)
	}
	repo := name // without its tag (a registry's port comes before the last slash)
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		repo = name[:i]
	}
	byDigest := repo + "@" + digest
	image := "reconscope-agent-image-" + o.version
	if err := copyFile(o.imageTar, filepath.Join(o.out, image+".tar")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, image+".digest"), []byte(byDigest+"\n"), 0o644); err != nil {
		return err
	}

	pkg, err := packageChart(o, repo, digest)
	if err != nil {
		return fmt.Errorf("package the chart: %w", err)
	}
	rendered, err := exec.Command(o.helm, "template", "reconscope", pkg, "--namespace", "reconscope").Output()
	if err != nil {
		return fmt.Errorf("render the chart: %w%s", err, stderrOf(err))
	}
	header := fmt.Sprintf("# reconscope %s: the agent's DaemonSet and what it needs, the image by digest.\n# kubectl apply -f reconscope-%s.yaml (the namespace reconscope is created).\n", o.version, o.version)
	if !bytes.Contains(rendered, []byte("image: "+byDigest)) {
		return fmt.Errorf("the chart's render does not run %s", byDigest)
	}
	if err := os.WriteFile(filepath.Join(o.out, "reconscope-"+o.version+".yaml"), append([]byte(header), rendered...), 0o644); err != nil {
		return err
	}

	archs, err := filepath.Glob(filepath.Join(o.binaries, "linux_*", "reconscope-agent"))
	if err != nil || len(archs) == 0 {
		return fmt.Errorf("no agent binary in %s/linux_*/ (make image builds them)", o.binaries)
	}
	for _, agent := range archs {
		dir := filepath.Dir(agent)
		arch := strings.TrimPrefix(filepath.Base(dir), "linux_")
		for _, name := range []string{"reconscope-agent", "kubectl-reconscope"} {
			bin := filepath.Join(dir, name)
			if _, err := os.Stat(bin); err != nil {
				return fmt.Errorf("no %s beside the agent in %s (make release builds it): %w", name, dir, err)
			}
			dst := filepath.Join(o.out, name+"-linux-"+arch)
			if err := copyFile(bin, dst); err != nil {
				return err
			}
			if err := os.Chmod(dst, 0o755); err != nil {
				return err
			}
			cmd := exec.Command(SBOMTool[0], append(SBOMTool[1:], "-output", dst+".cdx.json", "-version", o.version, dst)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("SBOM of %s: %w\n%s", dst, err, out)
			}
		}
	}
	sums, err := writeSums(o.out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "release %s in %s: image %s\n%s", o.version, o.out, byDigest, sums)
	return nil
}

// ImageDigest reads an OCI layout tarball's index.json: the name its one entry is annotated
// with (org.opencontainers.image.ref.name's full form, io.containerd.image.name) and its digest.
func ImageDigest(tarball string) (name, digest string, err error) {
	f, err := os.Open(tarball)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", "", errors.New("no index.json: not an OCI layout tarball")
		}
		if err != nil {
			return "", "", err
		}
		if h.Name != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct {
				Digest      string            `json:"digest"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return "", "", fmt.Errorf("index.json: %w", err)
		}
		if len(idx.Manifests) != 1 {
			return "", "", fmt.Errorf("index.json has %d entries, want the image's one", len(idx.Manifests))
		}
		m := idx.Manifests[0]
		name = m.Annotations["io.containerd.image.name"]
		if name == "" || !strings.HasPrefix(m.Digest, "sha256:") {
			return "", "", fmt.Errorf("index.json's entry has no image name or no sha256 digest: %+v", m)
		}
		return name, m.Digest, nil
	}
}

// packageChart packages a copy of the chart whose version and appVersion are the release and
// whose image is repo by digest, with helm, into o.out; it returns the package's path.
func packageChart(o options, repo, digest string) (string, error) {
	stage, err := os.MkdirTemp("", "reconscope-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	dir := filepath.Join(stage, filepath.Base(o.chart))
	if err := os.CopyFS(dir, os.DirFS(o.chart)); err != nil {
		return "", err
	}
	chartVersion := strings.TrimPrefix(o.version, "v")
	if err := replaceLine(filepath.Join(dir, "Chart.yaml"), `(?m)^version: .*$`, "version: "+chartVersion); err != nil {
		return "", err
	}
	if err := replaceLine(filepath.Join(dir, "Chart.yaml"), `(?m)^appVersion: .*$`, fmt.Sprintf("appVersion: %q", o.version)); err != nil {
		return "", err
	}
	if err := replaceLine(filepath.Join(dir, "values.yaml"), `(?m)^  repository: .*$`, "  repository: "+repo); err != nil {
		return "", err
	}
	if err := replaceLine(filepath.Join(dir, "values.yaml"), `(?m)^  digest: ""$`, fmt.Sprintf("  digest: %q", digest)); err != nil {
		return "", err
	}
	out, err := exec.Command(o.helm, "package", dir, "--destination", o.out).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("helm package: %w\n%s", err, out)
	}
	pkg := filepath.Join(o.out, "reconscope-"+chartVersion+".tgz")
	if _, err := os.Stat(pkg); err != nil {
		return "", fmt.Errorf("helm package wrote no %s: %s", filepath.Base(pkg), out)
	}
	return pkg, nil
}

// replaceLine replaces the one match of pattern in file with line.
func replaceLine(file, pattern, line string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	re := regexp.MustCompile(pattern)
	if n := len(re.FindAllIndex(b, -1)); n != 1 {
		return fmt.Errorf("%s: %d lines match %s, want one", file, n, pattern)
	}
	return os.WriteFile(file, re.ReplaceAllLiteral(b, []byte(line)), 0o644)
}

// writeSums writes dir/SHA256SUMS for every file in dir, in sha256sum's format, and returns it.
func writeSums(dir string) (string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		names = append(names, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(dir, n))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&sb, "%s  %s\n", sum, n)
	}
	return sb.String(), os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sb.String()), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return "\n" + string(ee.Stderr)
	}
	return ""
}
