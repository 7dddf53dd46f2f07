package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/spf13/cobra"

	"github.com/reconscope/reconscope/internal/cli"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/symbols"
)

const inspectSummary = `Usage: reconscope-agent inspect BINARY | --pid PID [-o json] [--goroutine-inheritance off] [--detail reconcile]

Says, without privileges, what 'trace' would attach to a Go binary: Go version, arch,
stripped or not, PIE or not, the controller module versions, each probe site (symbol, role,
entry and return addresses and file offsets), where the sites of a probe that can be probed
more than one way went and why, the struct-field offsets the probes read and
where each came from (DWARF or the offsets table), whether goroutines a reconcile starts join
its span (with --goroutine-inheritance as trace and run would be given it), and what cannot be
traced and why. --detail shows the plan of that detail level.
The JSON schema is in docs/inspect.md.

Exit status: 0 traceable; 3 not traceable (not ELF, not Go, unsupported Go version, no
controller code reconscope knows); 1 on error (missing or unreadable file, truncated binary);
2 usage error (bad flag, no binary or both a binary and --pid).`

// Exit statuses of inspect (docs/inspect.md).
const (
	exitError        = 1
	exitUsage        = 2
	exitNotTraceable = 3
)

// InspectSchema names the schema of inspect's JSON output (docs/inspect.md): its field
// "schema". It changes when a field changes meaning or goes; a new field does not change it.
const InspectSchema = "reconscope.dev/inspect/v1"

// InspectReport is inspect's JSON output (docs/inspect.md).
type InspectReport struct {
	Schema     string            `json:"schema"`
	Binary     string            `json:"binary"`
	Traceable  bool              `json:"traceable"`
	Reason     string            `json:"reason,omitempty"`
	GoVersion  string            `json:"go_version,omitempty"`
	Arch       string            `json:"arch,omitempty"`
	Stripped   bool              `json:"stripped"`
	PIE        bool              `json:"pie"`
	DWARF      bool              `json:"dwarf"`
	MainModule string            `json:"main_module,omitempty"`
	Modules    map[string]string `json:"modules,omitempty"`
	Probes     []InspectProbe    `json:"probes"`
	Offsets    []InspectOffset   `json:"offsets"`
	Missing    []InspectMissing  `json:"missing"`
	Choices    []InspectChoice   `json:"choices"`
	// Detail is the --detail the plan was made with: calls or reconcile.
	Detail string `json:"detail"`
	// GoroutineInheritance says whether goroutines a reconcile starts join its span.
	GoroutineInheritance InspectInheritance `json:"goroutine_inheritance"`
}

// InspectInheritance is the --goroutine-inheritance the plan was made with, and whether the
// goroutine probes are attached.
type InspectInheritance struct {
	Mode     string `json:"mode"` // auto or off
	Attached bool   `json:"attached"`
	Why      string `json:"why"` // what that means for spans
}

// InspectChoice says where the sites of a probe that can be probed more than one way went.
type InspectChoice struct {
	Probe string `json:"probe"`
	Sites string `json:"sites"`
	Why   string `json:"why,omitempty"`
}

// InspectMissing is a probe of the catalog that does not apply to the binary, and why.
type InspectMissing struct {
	Probe  string `json:"probe"`
	Reason string `json:"reason"`
}

// InspectProbe is one probed function.
type InspectProbe struct {
	Probe   string        `json:"probe"`
	Role    string        `json:"role"`
	Symbol  string        `json:"symbol"`
	Address uint64        `json:"address"`
	Size    uint64        `json:"size"`
	Entry   InspectSite   `json:"entry"`
	Returns []InspectSite `json:"returns"`
}

// InspectSite is one probe site.
type InspectSite struct {
	Address uint64 `json:"address"`
	// In is the function the site is in when it is not the probed function: a return site at
	// a return address in a caller.
	In         string `json:"in,omitempty"`
	Offset     uint64 `json:"offset"` // from the start of the function the site is in
	FileOffset uint64 `json:"file_offset"`
	Insn       string `json:"insn"`
	// Trap is what a hit there costs the traced thread: "emulated" (the kernel runs the
	// instruction in its trap handler) or "single-stepped" (a second trap to run it out of line).
	Trap string `json:"trap"`
}

// InspectOffset is one struct-field offset the probes read.
type InspectOffset struct {
	Type   string `json:"type"`
	Field  string `json:"field"`
	Value  uint64 `json:"value"`
	Source string `json:"source,omitempty"`
	Error  string `json:"error,omitempty"`
	// Lacks says what spans miss while the offset is unknown (set with Error).
	Lacks string `json:"lacks,omitempty"`
}

func inspectCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := newCommand("inspect", inspectSummary)
	cmd.Args = cobra.ArbitraryArgs // checked below, with --pid
	cmd.ValidArgsFunction = nil    // a shell completes file names
	fs := cmd.Flags()
	pid := fs.Int("pid", 0, "inspect the executable of this process (/proc/PID/exe)")
	output := fs.StringP("output", "o", "text", "output format: text or json (schema in docs/inspect.md)")
	asJSON := fs.Bool("json", false, "print JSON")
	_ = fs.MarkDeprecated("json", "use -o json; --json goes in the next release")
	var inherit probes.Inheritance
	addInheritanceFlag(fs, &inherit)
	var detail probes.Detail
	addDetailFlag(fs, &detail)
	cli.Complete(cmd, "output", "text", "json")
	completeTracerFlags(cmd)
	cmd.RunE = cli.RunE(func(args []string) int {
		switch {
		case *asJSON && fs.Changed("output") && *output != "json":
			return usageError(stderr, "inspect", "--json and --output %s: give one (--json is -o json)", *output)
		case *asJSON:
			*output = "json"
		case *output != "text" && *output != "json":
			return usageError(stderr, "inspect", "--output %q: want text or json", *output)
		}
		var path string
		switch {
		case *pid > 0 && len(args) == 0:
			path = proc.New("").ExeLink(*pid)
		case *pid == 0 && len(args) == 1:
			path = args[0]
		default:
			return usageError(stderr, "inspect", "give one BINARY or --pid PID (see --help)")
		}
		rep, code := inspect(path, inherit, detail)
		rep.Schema = InspectSchema
		if *output == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		} else {
			printInspect(stdout, rep)
		}
		if code != 0 && rep.Reason != "" && *output == "json" { // the text report says it already
			fmt.Fprintf(stderr, "reconscope-agent inspect: %s\n", rep.Reason)
		}
		return code
	})
	return cmd
}

func inspect(path string, inherit probes.Inheritance, detail probes.Detail) (*InspectReport, int) {
	rep := &InspectReport{Binary: path, Detail: detail.String(), Probes: []InspectProbe{}, Offsets: []InspectOffset{}, Missing: []InspectMissing{}, Choices: []InspectChoice{}}
	bin, err := symbols.Open(path)
	if err != nil {
		rep.Reason = err.Error()
		if fi, statErr := os.Stat(path); statErr == nil && fi.IsDir() {
			return rep, exitError // a wrong path, not a binary we cannot trace
		}
		if errors.Is(err, symbols.ErrNotELF) || errors.Is(err, symbols.ErrNotGo) || errors.Is(err, symbols.ErrUnsupportedGo) {
			return rep, exitNotTraceable
		}
		return rep, exitError
	}
	defer bin.Close()
	rep.GoVersion, rep.Arch, rep.Stripped, rep.PIE, rep.DWARF = bin.GoVersion, bin.Arch, bin.Stripped, bin.PIE, bin.HasDWARF
	rep.MainModule = bin.MainModule
	rep.Modules = probes.ModuleVersions(bin)
	plan, err := probes.NewPlan(bin, detail.Catalog(inherit.Catalog(probes.Catalog())))
	if plan != nil {
		fill(rep, plan)
		rep.GoroutineInheritance = inheritanceOf(plan, inherit)
	}
	if err != nil {
		rep.Reason = err.Error()
		if errors.Is(err, probes.ErrNothingToTrace) {
			return rep, exitNotTraceable
		}
		return rep, exitError
	}
	rep.Traceable = true
	return rep, 0
}

// inheritanceOf says what inherit means for the spans of plan.
func inheritanceOf(plan *probes.Plan, inherit probes.Inheritance) InspectInheritance {
	r := InspectInheritance{Mode: inherit.String()}
	for _, s := range plan.Sites {
		r.Attached = r.Attached || s.Probe.Role == probes.RoleSpawn
	}
	switch {
	case inherit == probes.InheritOff:
		r.Why = "no goroutine probe: calls made on goroutines a reconcile starts are in no span"
	case r.Attached:
		r.Why = "calls made on goroutines a reconcile starts are in its span; every goroutine created and ended in the process hits the goroutine probes"
	default:
		r.Why = "no goroutine probe: no call probe applies, and goroutine inheritance serves only calls"
	}
	return r
}

func fill(rep *InspectReport, plan *probes.Plan) {
	byFn := map[string]*InspectProbe{}
	for _, s := range plan.Sites {
		p := byFn[s.Function.Name]
		if p == nil {
			role := s.Probe.Role.String()
			p = &InspectProbe{Probe: s.Probe.ID, Role: role, Symbol: s.Function.Name, Address: s.Function.Entry, Size: s.Function.End - s.Function.Entry, Returns: []InspectSite{}}
			byFn[s.Function.Name] = p
		}
		site := InspectSite{Address: s.Addr, Offset: s.Addr - s.Function.Entry, FileOffset: s.FileOffset, Insn: s.Insn, Trap: s.Trap()}
		if s.In.Name != "" {
			site.In, site.Offset = s.In.Name, s.Addr-s.In.Entry
		}
		if s.Kind == probes.SiteEntry {
			p.Entry = site
		} else {
			p.Returns = append(p.Returns, site)
		}
	}
	for _, p := range byFn {
		rep.Probes = append(rep.Probes, *p)
	}
	sort.Slice(rep.Probes, func(i, j int) bool { return rep.Probes[i].Address < rep.Probes[j].Address })
	for _, o := range plan.Offsets {
		io := InspectOffset{Type: o.Type, Field: o.Path, Value: o.Value, Source: o.Source}
		if o.Err != nil {
			io.Error = o.Err.Error()
			io.Lacks = o.Lacks
		}
		rep.Offsets = append(rep.Offsets, io)
	}
	for _, m := range plan.Missing {
		rep.Missing = append(rep.Missing, InspectMissing{Probe: m.ProbeID, Reason: m.Reason})
	}
	for _, c := range plan.Choices {
		rep.Choices = append(rep.Choices, InspectChoice{Probe: c.ProbeID, Sites: c.Sites, Why: c.Why})
	}
}

func printInspect(w io.Writer, r *InspectReport) {
	fmt.Fprintf(w, "binary:     %s\n", r.Binary)
	if r.GoVersion == "" {
		fmt.Fprintf(w, "traceable:  no: %s\n", r.Reason)
		return
	}
	fmt.Fprintf(w, "go:         %s %s   stripped: %s   PIE: %s   DWARF: %s\n", r.GoVersion, r.Arch, yesNo(r.Stripped), yesNo(r.PIE), yesNo(r.DWARF))
	fmt.Fprintf(w, "main:       %s\n", r.MainModule)
	mods := make([]string, 0, len(r.Modules))
	for m := range r.Modules {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	for _, m := range mods {
		fmt.Fprintf(w, "module:     %s %s\n", m, r.Modules[m])
	}
	if r.Traceable {
		fmt.Fprintln(w, "traceable:  yes")
		fmt.Fprintf(w, "detail:     %s\n", r.Detail)
		g := r.GoroutineInheritance
		fmt.Fprintf(w, "goroutines: inheritance %s, probes %s: %s\n", g.Mode, map[bool]string{true: "attached", false: "not attached"}[g.Attached], g.Why)
	} else {
		fmt.Fprintf(w, "traceable:  no: %s\n", r.Reason)
	}
	for _, p := range r.Probes {
		fmt.Fprintf(w, "\nprobe %s (%s)\n  %s\n  function %#x size %d\n", p.Probe, p.Role, p.Symbol, p.Address, p.Size)
		fmt.Fprintf(w, "  entry  %#x (+%d, file %#x)  %s  [%s]\n", p.Entry.Address, p.Entry.Offset, p.Entry.FileOffset, p.Entry.Insn, p.Entry.Trap)
		for _, s := range p.Returns {
			if s.In != "" {
				fmt.Fprintf(w, "  return %#x (%s+%d, file %#x)  %s  [%s]\n", s.Address, s.In, s.Offset, s.FileOffset, s.Insn, s.Trap)
				continue
			}
			fmt.Fprintf(w, "  return %#x (+%d, file %#x)  %s  [%s]\n", s.Address, s.Offset, s.FileOffset, s.Insn, s.Trap)
		}
	}
	if len(r.Choices) > 0 {
		fmt.Fprintln(w, "\nsites chosen:")
		for _, c := range r.Choices {
			fmt.Fprintf(w, "  %s: at %s\n", c.Probe, c.Sites)
			if c.Why != "" {
				fmt.Fprintf(w, "    because %s\n", c.Why)
			}
		}
	}
	if len(r.Offsets) > 0 {
		fmt.Fprintln(w, "\noffsets:")
		for _, o := range r.Offsets {
			if o.Error != "" {
				fmt.Fprintf(w, "  %s.%s: MISSING: %s\n", o.Type, o.Field, o.Error)
				if o.Lacks != "" {
					fmt.Fprintf(w, "    spans will lack %s\n", o.Lacks)
				}
				continue
			}
			fmt.Fprintf(w, "  %s.%s = %d (%s)\n", o.Type, o.Field, o.Value, o.Source)
		}
	}
	if len(r.Missing) > 0 {
		fmt.Fprintln(w, "\nnot traced:")
		for _, m := range r.Missing {
			fmt.Fprintf(w, "  %s: %s\n", m.Probe, m.Reason)
		}
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
