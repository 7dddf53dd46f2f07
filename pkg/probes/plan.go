package probes

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/semver"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// SiteKind is where in a function a site sits.
type SiteKind uint8

// Site kinds. The values are the C SITE_* constants (bpf/include/events.h).
const (
	SiteEntry  SiteKind = 1 // SITE_ENTRY
	SiteReturn SiteKind = 2 // SITE_RETURN
)

func (k SiteKind) String() string {
	if k == SiteEntry {
		return "entry"
	}
	return "return"
}

// Site is one instruction to put a uprobe on.
type Site struct {
	Probe    *Probe
	Function symbols.Function
	Kind     SiteKind
	symbols.Site
	// Config is what the kernel program reads at this site.
	Config rbpf.TraceSiteConfig
}

// OffsetUse records one struct-field offset the plan needs and where it came from.
type OffsetUse struct {
	FieldRef
	Value  uint64
	Source string // "dwarf", "table", or "" when unknown
	Err    error
}

// Missing says why a probe of the catalog does not apply to the binary.
type Missing struct {
	ProbeID string
	Reason  string
}

// Plan is what to attach to one executable.
type Plan struct {
	Binary  *symbols.Binary
	Sites   []Site
	Offsets []OffsetUse
	Missing []Missing
	// GoidOffset is runtime.g.goid's offset, 0 when unknown (goroutines are then told apart
	// by their g pointer only).
	GoidOffset uint64
}

// ErrNothingToTrace means no probe of the catalog applies to the binary.
var ErrNothingToTrace = errors.New("no probe applies: the binary has no controller code reconscope knows")

// NewPlan matches the catalog against bin. It returns ErrNothingToTrace (with the plan, whose
// Missing says why) when no site was found.
func NewPlan(bin *symbols.Binary, catalog []*Probe) (*Plan, error) {
	p := &Plan{Binary: bin}
	offsets := map[FieldRef]*OffsetUse{}
	offset := func(ref FieldRef) (uint64, bool) {
		ref.Add = 0
		if u, ok := offsets[ref]; ok {
			return u.Value, u.Err == nil
		}
		u := &OffsetUse{FieldRef: ref}
		o, err := bin.FieldOffset(ref.Type, ref.Path)
		if err != nil {
			u.Err = err
		} else {
			u.Value, u.Source = o.Value, o.Source
		}
		offsets[ref] = u
		p.Offsets = append(p.Offsets, *u)
		return u.Value, err == nil
	}
	if v, ok := offset(FieldRef{Type: "runtime.g", Path: "goid"}); ok {
		p.GoidOffset = v
	}

	funcs, err := bin.Functions()
	if err != nil {
		return nil, fmt.Errorf("read functions: %w", err)
	}
	matched := map[string]bool{} // probe IDs that found a site
	for _, pr := range catalog {
		if pr.Module != "" {
			v, ok := bin.Modules[pr.Module]
			if !ok && bin.MainModule != pr.Module {
				continue // not this kind of program: nothing to say
			}
			if ok && !inRange(v, pr.MinVersion, pr.MaxVersion) {
				p.missing(pr.ID, fmt.Sprintf("%s %s is outside this layout's range [%s, %s]", pr.Module, v, orAny(pr.MinVersion), orAny(pr.MaxVersion)))
				continue
			}
		}
		var fns []symbols.Function
		for _, f := range funcs {
			if pr.Symbol.MatchString(f.Name) {
				fns = append(fns, f)
			}
		}
		if len(fns) == 0 {
			p.missing(pr.ID, fmt.Sprintf("no function matches %s", pr.Symbol))
			continue
		}
		entryCfg, err := siteConfig(pr, SiteEntry, pr.Entry, p.GoidOffset, offset)
		if err != nil {
			p.missing(pr.ID, err.Error())
			continue
		}
		retCfg, err := siteConfig(pr, SiteReturn, pr.Return, p.GoidOffset, offset)
		if err != nil {
			p.missing(pr.ID, err.Error())
			continue
		}
		for _, fn := range fns {
			entry, err := bin.EntrySite(fn)
			if err != nil {
				p.missing(pr.ID, fmt.Sprintf("%s: find entry site: %v", fn.Name, err))
				continue
			}
			var rets []symbols.Site
			if !pr.EntryOnly {
				rets, err = bin.ReturnSites(fn)
			}
			if !pr.EntryOnly && (err != nil || len(rets) == 0) {
				p.missing(pr.ID, fmt.Sprintf("%s: find return sites: %v (a return probe is needed; uretprobes are never used)", fn.Name, err))
				continue
			}
			p.Sites = append(p.Sites, Site{Probe: pr, Function: fn, Kind: SiteEntry, Site: entry, Config: entryCfg})
			for _, r := range rets {
				p.Sites = append(p.Sites, Site{Probe: pr, Function: fn, Kind: SiteReturn, Site: r, Config: retCfg})
			}
			matched[pr.ID] = true
		}
	}
	// A probe ID with several layouts (versions) is missing only if none of them matched.
	kept := p.Missing[:0]
	for _, m := range p.Missing {
		if !matched[m.ProbeID] {
			kept = append(kept, m)
		}
	}
	p.Missing = kept
	// Calls and goroutine probes serve spans: without a span probe there is nothing to trace,
	// and goroutine inheritance serves only calls.
	roles := map[Role]bool{}
	for _, s := range p.Sites {
		roles[s.Probe.Role] = true
	}
	if !roles[RoleSpan] {
		p.Sites = nil
		return p, ErrNothingToTrace
	}
	if !roles[RoleCall] {
		p.Sites = slices.DeleteFunc(p.Sites, func(s Site) bool { return s.Probe.Role == RoleSpawn || s.Probe.Role == RoleExit })
	}
	// A work queue's adds matter only to the spans of the same process, and only then.
	sort.SliceStable(p.Sites, func(i, j int) bool { return p.Sites[i].Addr < p.Sites[j].Addr })
	return p, nil
}

func (p *Plan) missing(id, reason string) {
	p.Missing = append(p.Missing, Missing{ProbeID: id, Reason: reason})
}

// siteConfig builds the kernel's view of one site. A string whose field offset is unknown is
// left out (the span comes without it) rather than failing the probe.
func siteConfig(pr *Probe, kind SiteKind, l Layout, goidOff uint64, offset func(FieldRef) (uint64, bool)) (rbpf.TraceSiteConfig, error) {
	c := rbpf.TraceSiteConfig{
		Kind:     uint8(kind),
		Role:     uint8(pr.Role),
		CtxSlot:  int8(l.Ctx),
		ErrSlot:  int8(l.Err),
		GoidOff:  uint32(goidOff),
		SaveSlot: int8(l.Save),
	}
	for i, s := range l.Strings {
		spec := rbpf.TraceStrSpec{PtrSlot: int8(s.Ptr), LenSlot: int8(s.Len), BaseSlot: int8(s.Base)}
		if s.Base != None {
			off, ok := offset(s.Field)
			if !ok {
				spec = rbpf.TraceStrSpec{PtrSlot: None, LenSlot: None, BaseSlot: None}
			} else {
				spec.Off = uint32(off + s.Field.Add)
			}
		}
		c.Str[i] = spec
	}
	for i, v := range l.Values {
		spec := rbpf.TraceValSpec{BaseSlot: None}
		if v.Base != None {
			if off, ok := offset(v.Field); ok {
				spec = rbpf.TraceValSpec{BaseSlot: int8(v.Base), Off: uint32(off + v.Field.Add)}
			}
		}
		c.Val[i] = spec
	}
	return c, nil
}

func inRange(v, lo, hi string) bool {
	if !semver.IsValid(v) {
		return true // pseudo or replaced versions: trust the symbol match
	}
	if lo != "" && semver.Compare(v, lo) < 0 {
		return false
	}
	if hi != "" && semver.Compare(v, hi) > 0 {
		return false
	}
	return true
}

func orAny(v string) string {
	if v == "" {
		return "any"
	}
	return v
}

// Probes returns the distinct probe IDs the plan attaches, sorted.
func (p *Plan) Probes() []string {
	seen := map[string]bool{}
	var ids []string
	for _, s := range p.Sites {
		if !seen[s.Probe.ID] {
			seen[s.Probe.ID] = true
			ids = append(ids, s.Probe.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// String is a one-line summary.
func (p *Plan) String() string {
	return fmt.Sprintf("%d sites (%s)", len(p.Sites), strings.Join(p.Probes(), ", "))
}

// ItabSlot is the register slot whose itab names a type the site's decoder wants (Layout.Itab),
// or -1.
func (s *Site) ItabSlot() int {
	if s.Kind == SiteEntry {
		return s.Probe.Entry.Itab
	}
	return s.Probe.Return.Itab
}
