// Package ociimage builds container images without a container engine or a registry: files
// from the build machine, laid out in one layer, with an image config, written as an OCI
// image-layout tarball that `ctr images import` (containerd) and `docker load` (with the
// containerd image store) accept by name. It is the library behind internal/cmd/mkimage and
// `make image`; Agent is the spec of reconscope-agent's image, which the Dockerfile at the
// repository root describes too (a test checks they agree).
//
// Builds are reproducible: every timestamp is the Unix epoch, files and directories are
// written in sorted order with owner 0:0, so the same inputs give the same digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations on the layout's index.json entry that name the image. containerd's importer reads
// AnnotationImageName first (the full reference); AnnotationRefName is the OCI layout's own
// name for an entry, which by the image-spec's convention (and BuildKit's) holds the tag.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// ArchPlaceholder in a File's Source is replaced by each platform's GOARCH (amd64, arm64).
const ArchPlaceholder = "{arch}"

// epoch is every timestamp in a built image: the config's created time and the files' mtimes.
var epoch = time.Unix(0, 0).UTC()

// File is one regular file of the image.
type File struct {
	// Source is the file on the build machine; ArchPlaceholder is replaced by the platform's
	// architecture.
	Source string
	// Dest is the absolute path in the image. Its parent directories are created (0755).
	Dest string
	// Mode is the file's permission bits. Zero means 0755 when the source is executable by
	// anyone, 0644 otherwise.
	Mode fs.FileMode
}

// Spec describes an image.
type Spec struct {
	// Ref names the image, NAME[:TAG] (tag "latest" when absent). Names without a registry are
	// Docker Hub's, as containerd and the kubelet spell them: "agent:v1" is
	// "docker.io/library/agent:v1".
	Ref string
	// Platforms are "os/arch" (e.g. linux/amd64). One platform gives a layout whose index.json
	// names that image's manifest; several give an image index holding one manifest each.
	Platforms  []string
	Files      []File
	Entrypoint []string
	Cmd        []string
	// User is the config's user, e.g. "0" or "65532:65532". Empty means root.
	User string
	// Env holds K=V entries.
	Env []string
	// WorkingDir is the config's working directory; empty leaves it unset.
	WorkingDir string
}

// ParseFile parses SRC=DST[:MODE] (MODE in octal, e.g. 0555).
func ParseFile(s string) (File, error) {
	src, dst, ok := strings.Cut(s, "=")
	if !ok || src == "" || dst == "" {
		return File{}, fmt.Errorf("parse file %q: want SRC=DST[:MODE]", s)
	}
	var f File
	f.Source = src
	if d, m, ok := strings.Cut(dst, ":"); ok {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil || mode > 0o7777 {
			return File{}, fmt.Errorf("parse file %q: mode %q is not an octal permission such as 0755", s, m)
		}
		dst, f.Mode = d, fs.FileMode(mode)
	}
	if !path.IsAbs(dst) || path.Clean(dst) != dst || dst == "/" {
		return File{}, fmt.Errorf("parse file %q: destination %q must be a clean absolute file path such as /bin/app", s, dst)
	}
	f.Dest = dst
	return f, nil
}

// NormalizeRef returns ref as containerd and the kubelet name it (registry/repository:tag),
// and its tag.
func NormalizeRef(ref string) (full, tag string, err error) {
	t, err := name.NewTag(ref, name.WithDefaultTag("latest"))
	if err != nil || strings.Contains(ref, "@") {
		return "", "", fmt.Errorf("parse image reference %q: want NAME[:TAG], such as registry.example.com/agent:v1", ref)
	}
	registry := t.Context().RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io" // containerd's spelling of Docker Hub, not index.docker.io
	}
	return registry + "/" + t.Context().RepositoryStr() + ":" + t.TagStr(), t.TagStr(), nil
}

// parsePlatform parses os/arch[/variant].
func parsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return v1.Platform{}, fmt.Errorf("parse platform %q: want OS/ARCH such as linux/amd64", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// Build builds the image and returns the layout's top-level index (what index.json holds).
func Build(spec Spec) (v1.ImageIndex, error) {
	full, tag, err := NormalizeRef(spec.Ref)
	if err != nil {
		return nil, err
	}
	if len(spec.Platforms) == 0 {
		return nil, errors.New("build image: no platform: give at least one, such as linux/amd64")
	}
	if len(spec.Entrypoint) == 0 && len(spec.Cmd) == 0 {
		return nil, errors.New("build image: neither entrypoint nor cmd: the image would run nothing")
	}
	seen := map[string]bool{}
	for _, f := range spec.Files {
		if seen[f.Dest] {
			return nil, fmt.Errorf("build image: %s is the destination of two files", f.Dest)
		}
		seen[f.Dest] = true
	}
	names := map[string]string{AnnotationImageName: full, AnnotationRefName: tag}

	var adds []mutate.IndexAddendum
	platforms := map[string]bool{}
	for _, ps := range spec.Platforms {
		p, err := parsePlatform(ps)
		if err != nil {
			return nil, err
		}
		if platforms[p.String()] {
			return nil, fmt.Errorf("build image: platform %s given twice", p)
		}
		platforms[p.String()] = true
		img, err := buildImage(spec, p)
		if err != nil {
			return nil, fmt.Errorf("build image for %s: %w", p, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	top := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	if len(adds) == 1 {
		adds[0].Descriptor.Annotations = names
		return mutate.AppendManifests(top, adds[0]), nil
	}
	multi := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.AppendManifests(top, mutate.IndexAddendum{Add: multi, Descriptor: v1.Descriptor{Annotations: names}}), nil
}

func buildImage(spec Spec, p v1.Platform) (v1.Image, error) {
	layer, err := buildLayer(spec.Files, p.Architecture)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: epoch},
		CreatedBy: "reconscope ociimage: " + strings.Join(dests(spec.Files), " "),
		Comment:   "files from the build machine",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.User = spec.User
	cf.Config.Env = spec.Env
	cf.Config.WorkingDir = spec.WorkingDir
	return mutate.ConfigFile(img, cf)
}

func dests(files []File) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Dest)
	}
	return out
}

// buildLayer writes the files, and every parent directory of each, into one tar layer.
func buildLayer(files []File, arch string) (v1.Layer, error) {
	type entry struct {
		hdr  *tar.Header
		data []byte
	}
	entries := map[string]entry{}
	for _, f := range files {
		src := strings.ReplaceAll(f.Source, ArchPlaceholder, arch)
		info, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("read file for %s: %w", f.Dest, err)
		}
		if !info.Mode().IsRegular() {
			return nil, fmt.Errorf("read file for %s: %s is not a regular file", f.Dest, src)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("read file for %s: %w", f.Dest, err)
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
			if info.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
		}
		rel := strings.TrimPrefix(f.Dest, "/")
		entries[rel] = entry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(mode), Size: int64(len(data))}, data: data}
		for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
			if e, ok := entries[dir+"/"]; ok && e.hdr.Typeflag == tar.TypeDir {
				continue
			}
			entries[dir+"/"] = entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755}}
		}
	}
	for name := range entries {
		if !strings.HasSuffix(name, "/") {
			if _, ok := entries[name+"/"]; ok {
				return nil, fmt.Errorf("build layer: /%s is both a file and a directory", name)
			}
		}
	}
	var names []string
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names) // parents sort before their contents ("a/" < "a/b")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range names {
		e := entries[name]
		e.hdr.ModTime, e.hdr.Format = epoch, tar.FormatPAX
		e.hdr.Uid, e.hdr.Gid = 0, 0
		if err := tw.WriteHeader(e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// WriteLayoutTar writes ii as an OCI image layout, in a tar stream: oci-layout, index.json and
// blobs/sha256/..., in sorted order with fixed timestamps.
func WriteLayoutTar(w io.Writer, ii v1.ImageIndex) error {
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := layout.Write(dir, ii); err != nil {
		return fmt.Errorf("write image layout: %w", err)
	}
	var names []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			rel += "/"
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		hdr := &tar.Header{Name: n, ModTime: epoch, Format: tar.FormatPAX}
		if strings.HasSuffix(n, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(n)))
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// WriteFile builds spec and writes its layout tarball to out (replaced atomically).
func WriteFile(spec Spec, out string) error {
	ii, err := Build(spec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".mkimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := WriteLayoutTar(tmp, ii); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
