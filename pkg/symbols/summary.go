package symbols

import (
	"fmt"
	"strings"
)

// RelevantModules are the modules whose versions decide what reconscope can trace, in the
// order Summary lists them.
var RelevantModules = []string{
	"sigs.k8s.io/controller-runtime",
	"k8s.io/client-go",
	"k8s.io/apimachinery",
	"k8s.io/kubernetes",
}

// Module is a module path and version.
type Module struct {
	Path    string
	Version string
}

// Info is what `reconscope-agent inspect` prints about a binary before any probe site.
type Info struct {
	Path       string
	Arch       string
	GoVersion  string
	MainModule string
	Stripped   bool
	HasDWARF   bool
	PIE        bool
	// Modules lists those of RelevantModules the binary contains (as a dependency or as its
	// main module), in that order.
	Modules []Module
}

// Version returns the version of module path in the binary, "" if absent.
func (i Info) Version(path string) string {
	for _, m := range i.Modules {
		if m.Path == path {
			return m.Version
		}
	}
	return ""
}

// String renders the summary as a few aligned lines.
func (i Info) String() string {
	var sb strings.Builder
	yes := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(&sb, "binary:      %s\n", i.Path)
	fmt.Fprintf(&sb, "go:          %s %s\n", i.GoVersion, i.Arch)
	fmt.Fprintf(&sb, "main module: %s\n", i.MainModule)
	fmt.Fprintf(&sb, "stripped:    %s   dwarf: %s   pie: %s\n", yes(i.Stripped), yes(i.HasDWARF), yes(i.PIE))
	if len(i.Modules) == 0 {
		sb.WriteString("modules:     none of controller-runtime, client-go, apimachinery, kubernetes\n")
	}
	for _, m := range i.Modules {
		fmt.Fprintf(&sb, "module:      %s %s\n", m.Path, m.Version)
	}
	return sb.String()
}

// Summary returns the facts about the binary that decide what can be traced.
func (b *Binary) Summary() Info {
	info := Info{
		Path:       b.Path,
		Arch:       b.Arch,
		GoVersion:  b.GoVersion,
		MainModule: b.MainModule,
		Stripped:   b.Stripped,
		HasDWARF:   b.HasDWARF,
		PIE:        b.PIE,
	}
	for _, path := range RelevantModules {
		if v, ok := b.Modules[path]; ok {
			info.Modules = append(info.Modules, Module{Path: path, Version: v})
		} else if path == b.MainModule {
			// Built from its own tree: the version the build recorded, else the release
			// version in the linker flags (Kubernetes), else the VCS revision, else "(devel)".
			v := b.MainVersion
			if v == "(devel)" {
				v = ""
			}
			if v == "" {
				v = kubernetesVersion(b.Settings["-ldflags"])
			}
			if v == "" {
				v = b.Settings["vcs.revision"]
			}
			if v == "" {
				v = "(devel)"
			}
			info.Modules = append(info.Modules, Module{Path: path, Version: v})
		}
	}
	return info
}
