// Command mkimage builds a container image from files of the build machine, without a
// container engine or a registry, into an OCI image-layout tarball that containerd imports by
// name (`ctr -n k8s.io images import FILE.tar`):
//
//	go run ./internal/cmd/mkimage --ref NAME:TAG --platform linux/amd64 [--platform linux/arm64] \
//	  --file SRC=DST[:MODE] ... --entrypoint '["/bin/x"]' --cmd '["run"]' --user 0 \
//	  --env K=V --workdir DIR --out FILE.tar
//
// SRC may contain {arch}, replaced by each platform's GOARCH. MODE is octal; without it a file
// is 0755 when its source is executable, 0644 otherwise. Several platforms give an image index
// with one manifest each. Builds are reproducible (fixed timestamps, sorted files).
//
// --spec agent starts from reconscope-agent's image spec (internal/ociimage.Agent, which the
// Dockerfile describes too); flags given with it override (--ref, --platform, --entrypoint,
// --cmd, --user, --workdir) or add to it (--file, --env). `make image` uses it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/reconscope/reconscope/internal/ociimage"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

type jsonArgs struct {
	v   []string
	set bool
}

func (j *jsonArgs) String() string {
	b, _ := json.Marshal(j.v)
	return string(b)
}

func (j *jsonArgs) Set(s string) error {
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return fmt.Errorf(`want a JSON array of strings such as '["/bin/app","run"]': %v`, err)
	}
	j.v, j.set = v, true
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	var (
		platforms, files, env list
		entrypoint, cmd       jsonArgs
	)
	specNames := make([]string, 0, len(ociimage.Specs))
	for n := range ociimage.Specs {
		specNames = append(specNames, n)
	}
	sort.Strings(specNames)
	spec := fl.String("spec", "", "start from a built-in image spec ("+strings.Join(specNames, ", ")+")")
	ref := fl.String("ref", "", "image name NAME[:TAG], e.g. registry.example.com/app:v1 (required unless --spec)")
	fl.Var(&platforms, "platform", "OS/ARCH to build for, e.g. linux/amd64 (repeat for an index)")
	fl.Var(&files, "file", "SRC=DST[:MODE] file to add (repeat); {arch} in SRC is each platform's GOARCH")
	fl.Var(&entrypoint, "entrypoint", `entrypoint as a JSON array, e.g. '["/app"]'`)
	fl.Var(&cmd, "cmd", `default command (arguments) as a JSON array, e.g. '["run"]'`)
	user := fl.String("user", "", "user (and group) the image runs as, e.g. 0 or 65532:65532")
	fl.Var(&env, "env", "K=V environment variable (repeat)")
	workdir := fl.String("workdir", "", "working directory")
	out := fl.String("out", "", "the OCI layout tarball to write (required)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	var s ociimage.Spec
	if *spec != "" {
		base, ok := ociimage.Specs[*spec]
		if !ok {
			return fmt.Errorf("--spec %q: no such spec (have %s)", *spec, strings.Join(specNames, ", "))
		}
		s = base
		s.Platforms, s.Files, s.Env = slices.Clone(base.Platforms), slices.Clone(base.Files), slices.Clone(base.Env)
	}
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["ref"] {
		s.Ref = *ref
	}
	if len(platforms) > 0 {
		s.Platforms = platforms
	}
	for _, f := range files {
		file, err := ociimage.ParseFile(f)
		if err != nil {
			return err
		}
		s.Files = append(s.Files, file)
	}
	if entrypoint.set {
		s.Entrypoint = entrypoint.v
	}
	if cmd.set {
		s.Cmd = cmd.v
	}
	if set["user"] {
		s.User = *user
	}
	s.Env = append(s.Env, env...)
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("--env %q: want K=V", e)
		}
	}
	if set["workdir"] {
		s.WorkingDir = *workdir
	}
	if s.Ref == "" {
		return fmt.Errorf("--ref is required")
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	if err := ociimage.WriteFile(s, *out); err != nil {
		return err
	}
	full, _, _ := ociimage.NormalizeRef(s.Ref)
	info, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s (%s), %d bytes\n", *out, full, strings.Join(s.Platforms, ", "), info.Size())
	return nil
}
