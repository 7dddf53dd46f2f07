// Command offsetgen regenerates pkg/symbols/offsets_table.json: the struct field offsets
// reconscope needs when a traced binary has no DWARF (release builds are usually stripped with
// -s -w).
//
// It records the struct fields the probe catalog reads (probes.FieldsRead), nothing else. For
// each supported version it writes a small program that links in their types (named, or
// reached through an anchor when unexported) into a temporary module, builds it with
// DWARF (amd64, and arm64 where asked), reads the offsets with debug/dwarf and records them
// keyed by the version of the module that defines the type, as the built binary's build info
// reports it. Runtime and standard-library types are keyed by the Go version of the toolchain
// that runs the generator.
//
// Usage (slow: each version set downloads its modules and compiles client-go):
//
//	go run ./internal/cmd/offsetgen -o pkg/symbols/offsets_table.json
//	go run ./internal/cmd/offsetgen -o pkg/symbols/offsets_table.json -client-go v0.36.6 -controller-runtime none
//
// Existing entries of other versions are kept (merged), so versions can be added one at a time.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/token"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// target names one struct type and the field paths to record. Module "std" means the
// type belongs to the Go distribution and is keyed by Go version.
type target struct {
	Module string
	Type   string
	Fields []string
}

// targets are the struct fields the catalog reads (probes.FieldsRead), by type: the table
// holds what a plan resolves, no more and no less.
var targets = catalogTargets(probes.FieldsRead(probes.Catalog()))

// catalogTargets groups fields by type, in the order they come, each type with its module
// (typeModule).
func catalogTargets(fields []probes.FieldRef) []target {
	var out []target
	index := map[string]int{}
	for _, f := range fields {
		i, ok := index[f.Type]
		if !ok {
			i = len(out)
			index[f.Type] = i
			out = append(out, target{Module: typeModule(f.Type), Type: f.Type})
		}
		if !slices.Contains(out[i].Fields, f.Path) {
			out[i].Fields = append(out[i].Fields, f.Path)
		}
	}
	return out
}

// typeModule is the module of a type: the module of a version set that provides its package
// (symbols.PackageModule, as FieldOffset finds it in a binary), "std" for the Go
// distribution, "" when no set covers it.
func typeModule(typeName string) string {
	var modules []string
	for _, s := range versionSets {
		modules = append(modules, s.covers...)
	}
	return symbols.PackageModule(symbols.TypePackage(typeName), modules)
}

// versionSet is one kind of program the generator builds, once per version: "std" for the
// Go toolchains, or a module at each of its versions. Its program links in the types of the
// modules it covers.
type versionSet struct {
	module string   // "std", or the module whose versions are built
	covers []string // the modules whose types the program links in
}

var (
	stdSet      = versionSet{module: "std", covers: []string{"std"}}
	clientGoSet = versionSet{module: "k8s.io/client-go", covers: []string{"k8s.io/client-go", "k8s.io/apimachinery"}}
	crSet       = versionSet{module: "sigs.k8s.io/controller-runtime", covers: []string{"sigs.k8s.io/controller-runtime"}}
)

// versionSets are the sets the generator builds.
var versionSets = []versionSet{stdSet, clientGoSet, crSet}

// anchor links a type that a program cannot name (unexported, internal, or generic) into
// it: an expression whose value holds it, and the packages the expression needs.
type anchor struct {
	imports []string
	expr    string // "" when every Go program has the type (runtime.g)
}

var anchors = map[string]anchor{
	"runtime.g":          {},
	"errors.errorString": {[]string{"errors"}, `errors.New("a")`},
	"fmt.wrapError":      {[]string{"errors", "fmt"}, `fmt.Errorf("b: %w", errors.New("a"))`},
	"fmt.wrapErrors":     {[]string{"errors", "fmt"}, `fmt.Errorf("c: %w %w", errors.New("a"), errors.New("b"))`},
	// controller.New makes the generic internal Controller[reconcile.Request].
	"sigs.k8s.io/controller-runtime/pkg/internal/controller.Controller": {[]string{"sigs.k8s.io/controller-runtime/pkg/controller"}, "controller.New"},
}

// program returns the source of the program that links in every target of the modules set
// covers: a composite literal of each exported type, the anchor of each other one.
func program(set versionSet, targets []target) (string, error) {
	bare := map[string]bool{"fmt": true, "os": true} // imported under their own names
	aliases := map[string]string{}                   // imported under a name of ours
	var values []string
	for _, t := range targets {
		if !slices.Contains(set.covers, t.Module) {
			continue
		}
		if a, ok := anchors[t.Type]; ok {
			for _, p := range a.imports {
				bare[p] = true
			}
			if a.expr != "" {
				values = append(values, a.expr)
			}
			continue
		}
		pkg := symbols.TypePackage(t.Type)
		name := t.Type[len(pkg)+1:]
		if !token.IsExported(name) || strings.Contains(pkg+"/", "/internal/") {
			return "", fmt.Errorf("a program cannot name %s: give it an anchor (offsetgen's anchors)", t.Type)
		}
		if aliases[pkg] == "" {
			aliases[pkg] = fmt.Sprintf("p%d", len(aliases))
		}
		values = append(values, "&"+aliases[pkg]+"."+name+"{}")
	}
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, p := range slices.Sorted(maps.Keys(bare)) {
		fmt.Fprintf(&b, "\t%q\n", p)
	}
	for _, p := range slices.Sorted(maps.Keys(aliases)) {
		fmt.Fprintf(&b, "\t%s %q\n", aliases[p], p)
	}
	b.WriteString(")\n\nvar sink []any\n\nfunc main() {\n")
	for _, v := range values {
		fmt.Fprintf(&b, "\tsink = append(sink, %s)\n", v)
	}
	b.WriteString("\tfmt.Fprintln(os.Stderr, len(sink))\n}\n")
	return b.String(), nil
}

// programs returns the program of each version set, by its module, and fails when a target's
// module is in no set: its versions would not be built.
func programs(targets []target) (map[string]string, error) {
	for _, t := range targets {
		if t.Module == "" {
			return nil, fmt.Errorf("no version set builds the module of package %s (type %s): add one to offsetgen's sets", symbols.TypePackage(t.Type), t.Type)
		}
	}
	out := map[string]string{}
	for _, s := range versionSets {
		p, err := program(s, targets)
		if err != nil {
			return nil, err
		}
		out[s.module] = p
	}
	return out, nil
}

func main() {
	out := flag.String("o", "pkg/symbols/offsets_table.json", "table to write (merged with its current entries)")
	clientGo := flag.String("client-go", "auto", `client-go versions: "auto" (latest patch of each minor in -client-go-minors), "all" (every patch), "none", or a comma-separated list`)
	clientGoMinors := flag.String("client-go-minors", "v0.33,v0.34,v0.35,v0.36,v0.37", "client-go minor series for auto/all")
	cr := flag.String("controller-runtime", "auto", "controller-runtime versions, same forms as -client-go")
	crMinors := flag.String("controller-runtime-minors", "v0.21,v0.22,v0.23,v0.24,v0.25", "controller-runtime minor series for auto/all")
	std := flag.Bool("std", true, "record runtime and standard-library types for the Go toolchain running this command")
	goVersions := flag.String("go", "", `more Go releases to record runtime and standard-library types for, fetched by the go command through GOTOOLCHAIN (comma-separated, e.g. "go1.24.0,go1.25.0"); their binaries are what stripped controllers built with those releases need`)
	arches := flag.String("arch", "amd64,arm64", "architectures to build the standard-library program for (module programs are built for the first one; Go struct layout is the same on every 64-bit architecture, which the std build checks)")
	keep := flag.Bool("keep", false, "keep the temporary build folder")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	programs, err := programs(targets)
	if err != nil {
		fatal(log, "write the programs", err)
	}
	work, err := os.MkdirTemp("", "offsetgen-")
	if err != nil {
		fatal(log, "create work folder", err)
	}
	if !*keep {
		defer os.RemoveAll(work)
	}
	archList := strings.Split(*arches, ",")

	table := symbols.OffsetTable{}
	if data, err := os.ReadFile(*out); err == nil {
		if err := json.Unmarshal(data, &table); err != nil {
			fatal(log, "read existing table", err)
		}
	}
	var fresh []symbols.OffsetEntry

	if *std {
		toolchains := []string{"local"}
		if *goVersions != "" {
			toolchains = append(toolchains, strings.Split(*goVersions, ",")...)
		}
		for _, tc := range toolchains {
			for _, arch := range archList {
				es, err := generate(log, work, "std-"+tc+"-"+arch, arch, tc, programs[stdSet.module], nil)
				if err != nil {
					// One toolchain that cannot be had must not lose the others.
					log.Error("skip toolchain", "go", tc, "arch", arch, "err", err)
					continue
				}
				fresh = append(fresh, es...)
			}
		}
	}
	for _, set := range []struct {
		flagValue, minors, module string
	}{
		{*clientGo, *clientGoMinors, clientGoSet.module},
		{*cr, *crMinors, crSet.module},
	} {
		versions, err := pickVersions(work, set.module, set.flagValue, set.minors)
		if err != nil {
			fatal(log, "list versions of "+set.module, err)
		}
		for _, v := range versions {
			name := strings.ReplaceAll(set.module, "/", "_") + "-" + v
			es, err := generate(log, work, name, archList[0], "local", programs[set.module], map[string]string{set.module: v})
			if err != nil {
				// One unbuildable version must not lose the others: say so and go on.
				log.Error("skip version", "module", set.module, "version", v, "err", err)
				continue
			}
			fresh = append(fresh, es...)
		}
	}

	table.Entries = merge(table.Entries, collapseArches(fresh, archList))
	table.Comment = "Struct field offsets for Go binaries without DWARF. Generated by internal/cmd/offsetgen; do not edit by hand. " +
		"Entries without arch hold for every 64-bit architecture (amd64, arm64)."
	if err := writeTable(*out, table); err != nil {
		fatal(log, "write table", err)
	}
	log.Info("wrote table", "path", *out, "entries", len(table.Entries), "new", len(fresh))
}

func fatal(log *slog.Logger, what string, err error) {
	log.Error(what, "err", err)
	os.Exit(1)
}

// pickVersions turns a version flag into the list of versions to build.
func pickVersions(work, module, value, minors string) ([]string, error) {
	switch value {
	case "none", "":
		return nil, nil
	case "auto", "all":
	default:
		return strings.Split(value, ","), nil
	}
	dir := filepath.Join(work, "versions")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module versions\n"), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "list", "-m", "-versions", module)
	cmd.Dir = dir
	outb, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m -versions %s: %w", module, err)
	}
	fields := strings.Fields(string(outb))
	if len(fields) < 2 {
		return nil, fmt.Errorf("no versions of %s", module)
	}
	latest := map[string]string{}
	var all []string
	for _, v := range fields[1:] {
		nums, ok := parseVersion(v)
		if !ok {
			continue // pre-releases and odd tags
		}
		mm := fmt.Sprintf("v%d.%d", nums[0], nums[1])
		if !slices.Contains(strings.Split(minors, ","), mm) {
			continue
		}
		all = append(all, v)
		if cur, ok := latest[mm]; !ok || compareVersions(v, cur) > 0 {
			latest[mm] = v
		}
	}
	if value == "all" {
		return all, nil
	}
	var picked []string
	for _, v := range latest {
		picked = append(picked, v)
	}
	slices.SortFunc(picked, compareVersions)
	return picked, nil
}

// generate builds one program and reads the offsets of every target whose type it contains.
// toolchain is a GOTOOLCHAIN value: "local" or a release such as "go1.24.0".
func generate(log *slog.Logger, work, name, arch, toolchain, program string, require map[string]string) ([]symbols.OffsetEntry, error) {
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var mod strings.Builder
	goLine := "1.18" // the standard-library program builds with every supported release
	if len(require) > 0 {
		goLine = "1.23"
	}
	fmt.Fprintf(&mod, "module offsetgen/%s\n\ngo %s\n", strings.NewReplacer(".", "_", "/", "_").Replace(name), goLine)
	for m, v := range require {
		fmt.Fprintf(&mod, "\nrequire %s %s\n", m, v)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN="+toolchain, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	run := func(args ...string) error {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
	log.Info("build", "program", name, "arch", arch, "go", toolchain)
	if len(require) > 0 {
		if err := run("mod", "tidy"); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(dir, "prog")
	if err := run("build", "-trimpath", "-o", bin, "."); err != nil {
		return nil, err
	}
	return readOffsets(bin, arch, require != nil)
}
