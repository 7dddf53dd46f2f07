package probes

// Over 500 lines, on purpose: this file is one algorithm, the catalog matched against a binary.
// NewPlan and the steps it calls in turn (match, supersede, fallback, returnAddresses,
// callPairSites, bracketSites, the field offsets it resolves) read top to bottom as one pass,
// beside the Plan and Site types they fill and the accessors that read them back.

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/semver"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// SiteKind is where in a function a site sits.
type SiteKind uint8

// Site kinds: the C enum site_kind (bpf/include/events.h).
const (
	SiteEntry  = SiteKind(rbpf.TraceSiteKindSITE_ENTRY)
	SiteReturn = SiteKind(rbpf.TraceSiteKindSITE_RETURN)
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
	// In is the function the instruction is in when that is not Function: a return site at
	// the return address of a call of Function, in its caller (Probe.ReturnCallers).
	In symbols.Function
}

// Layout is what the kernel program reads at this site: its probe's entry or return layout.
func (s *Site) Layout() *Layout {
	if s.Kind == SiteEntry {
		return &s.Probe.Entry
	}
	return &s.Probe.Return
}

// OffsetUse records one struct-field offset the plan needs and where it came from.
type OffsetUse struct {
	FieldRef
	Value  uint64
	Source string // "dwarf", "table", or "" when unknown
	Err    error
	// Lacks says what spans miss when the offset is unknown.
	Lacks string
}

// ErrorMessageFields are the error types whose message the kernel reads from the returned
// error's data word, and the string field that holds it.
var ErrorMessageFields = []FieldRef{
	{Type: "errors.errorString", Path: "s"},
	{Type: "fmt.wrapError", Path: "msg"},
	{Type: "fmt.wrapErrors", Path: "msg"},
	{Type: statusError, Path: "ErrStatus.Message"},
}

// goidField is the goroutine ID in runtime.g, which every plan resolves (Plan.GoidOffset).
var goidField = FieldRef{Type: "runtime.g", Path: "goid"}

// FieldsRead returns every struct field whose offset a plan of catalog may resolve, which the
// offsets table must hold for binaries without DWARF: the goroutine ID, the fields of every
// layout of the catalog, and the error messages (ErrorMessageFields); each once, without Add,
// in that order. internal/cmd/offsetgen generates the table for exactly these.
func FieldsRead(catalog []*Probe) []FieldRef {
	var out []FieldRef
	seen := map[FieldRef]bool{}
	add := func(f FieldRef) {
		f.Add = 0
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	add(goidField)
	for _, p := range catalog {
		for _, l := range []*Layout{&p.Entry, &p.Return} {
			for _, f := range l.Fields() {
				add(f)
			}
		}
	}
	for _, f := range ErrorMessageFields {
		add(f)
	}
	return out
}

// ResolveOffsets asks bin every field offset that FieldsRead names for each catalog, then
// lets the binary's DWARF go (symbols.Binary.ReleaseDWARF): the binary answers those offsets
// from its cache from then on, so its DWARF (~10 MiB for kubelet or an unstripped
// kube-controller-manager) and its function table, read next (~20 MiB), are never in memory
// at once, which lowers the peak of an inspection by a third. NewPlan calls it with its
// catalog; a caller that will plan more than one catalog on the same binary (the calls plan
// beside the executable's) calls it first with all of them. It must not run concurrently
// with other methods of bin.
func ResolveOffsets(bin *symbols.Binary, catalogs ...[]*Probe) {
	for _, c := range catalogs {
		for _, f := range FieldsRead(c) {
			_, _ = bin.FieldOffset(f.Type, f.Path)
		}
	}
	bin.ReleaseDWARF()
}

// Missing says why a probe of the catalog does not apply to the binary.
type Missing struct {
	ProbeID string
	Reason  string
	// refused: a function the probe matched was left out on purpose; said even when
	// another layout of the probe found sites.
	refused bool
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
	// Choices say where the sites of probes with more than one way to be probed went.
	Choices []Choice
}

// ErrNothingToTrace means no probe of the catalog applies to the binary.
var ErrNothingToTrace = errors.New("no probe applies: the binary has no controller code reconscope knows")

// Untraceable says whether err, from inspecting an executable or planning its probes, is a
// property of the file: not ELF, not Go, a Go too old, or nothing of the catalog in it. Another
// process of the same file fails the same way, so the agent remembers it rather than inspecting
// the file again; any other failure is of the moment (the process exited mid-inspection).
func Untraceable(err error) bool {
	return errors.Is(err, symbols.ErrNotGo) || errors.Is(err, symbols.ErrNotELF) ||
		errors.Is(err, ErrNothingToTrace) || errors.Is(err, symbols.ErrUnsupportedGo)
}

// NewPlan matches the catalog against bin. It returns ErrNothingToTrace (with the plan, whose
// Missing says why) when no site was found. It reads bin and catalog, and lets bin's DWARF go
// once it has asked every offset the catalog may read (ResolveOffsets). It must not run
// concurrently with other methods of bin.
func NewPlan(bin *symbols.Binary, catalog []*Probe) (*Plan, error) {
	ResolveOffsets(bin, catalog)
	p := &Plan{Binary: bin}
	offsets := map[FieldRef]*OffsetUse{}
	offset := func(ref FieldRef) (uint64, bool) {
		ref.Add = 0
		if u, ok := offsets[ref]; ok {
			return u.Value, u.Err == nil
		}
		u := &OffsetUse{FieldRef: ref, Lacks: fieldUses[ref.Type+" "+ref.Path]}
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
	if v, ok := offset(goidField); ok {
		p.GoidOffset = v
	}

	// One scan of the binary's function names for the whole catalog: the names are read from
	// the file as it goes, not held (symbols.Binary.EachFunction).
	candidates, err := p.match(bin, catalog)
	if err != nil {
		return nil, fmt.Errorf("read functions: %w", err)
	}
	matched := map[string]bool{} // probe IDs that found a site
	for _, c := range candidates {
		pr, fns := c.probe, c.fns
		if pr.Fallback && matched[pr.ID] {
			continue
		}
		if len(fns) == 0 {
			continue
		}
		// The offsets the sites read: the collector encodes them (Plan.Offset).
		for _, l := range []*Layout{&pr.Entry, &pr.Return} {
			for _, f := range l.Fields() {
				offset(f)
			}
		}
		for _, fn := range fns {
			if pr.Bracket != nil {
				entry, end, ret, err := bracketSites(bin, fn, pr.Bracket)
				if err != nil {
					p.missing(pr.ID, fmt.Sprintf("%s: queue layout unknown: %v; nothing attached for it", fn.Name, err))
					continue
				}
				p.Sites = append(p.Sites, Site{Probe: pr, Function: fn, Kind: SiteEntry, Site: entry},
					Site{Probe: pr, Function: fn, Kind: SiteReturn, Site: ret, In: end})
				p.Choices = append(p.Choices, Choice{ProbeID: pr.ID, Sites: fmt.Sprintf("%s's `%s` (the item handed to the worker) and %s's entry `%s` (the worker is done with it)", fn.Name, entry.Insn, end.Name, ret.Insn)})
				matched[pr.ID] = true
				continue
			}
			if pr.Calls != nil {
				entry, ret, err := callPairSites(bin, fn, pr.Calls)
				if err != nil {
					p.missing(pr.ID, fmt.Sprintf("%s: %v", fn.Name, err))
					continue
				}
				p.Sites = append(p.Sites, Site{Probe: pr, Function: fn, Kind: SiteEntry, Site: entry})
				if pr.EntryOnly {
					p.Choices = append(p.Choices, Choice{ProbeID: pr.ID, Sites: fmt.Sprintf("%s's call of %s (no return site)", fn.Name, pr.Calls.Entry)})
					matched[pr.ID] = true
					continue
				}
				p.Sites = append(p.Sites, Site{Probe: pr, Function: fn, Kind: SiteReturn, Site: ret})
				p.Choices = append(p.Choices, Choice{ProbeID: pr.ID, Sites: fmt.Sprintf("%s's calls of %s and %s (no single-step)", fn.Name, pr.Calls.Entry, pr.Calls.Return)})
				matched[pr.ID] = true
				continue
			}
			entry, err := bin.EntrySite(fn)
			if err != nil {
				p.missing(pr.ID, fmt.Sprintf("%s: find entry site: %v", fn.Name, err))
				continue
			}
			var rets []symbols.Site
			var in []symbols.Function // the function each return site is in, when not fn
			if !pr.EntryOnly && pr.ReturnCallers != nil && bin.Arch == "amd64" {
				rets, in = p.returnAddresses(bin, fn, pr)
			}
			if !pr.EntryOnly && rets == nil {
				rets, err = bin.ReturnSites(fn)
			}
			if !pr.EntryOnly && (err != nil || len(rets) == 0) {
				p.missing(pr.ID, fmt.Sprintf("%s: find return sites: %v (a return probe is needed; uretprobes are never used)", fn.Name, err))
				continue
			}
			p.Sites = append(p.Sites, Site{Probe: pr, Function: fn, Kind: SiteEntry, Site: entry})
			for i, r := range rets {
				s := Site{Probe: pr, Function: fn, Kind: SiteReturn, Site: r}
				if in != nil {
					s.In = in[i]
				}
				p.Sites = append(p.Sites, s)
			}
			matched[pr.ID] = true
		}
		if pr.Fallback && matched[pr.ID] {
			p.fallback(pr, fns)
		}
	}
	// A probe ID with several layouts (versions) is missing only if none of them matched.
	kept := p.Missing[:0]
	for _, m := range p.Missing {
		if !matched[m.ProbeID] || m.refused {
			kept = append(kept, m)
		}
	}
	p.Missing = kept
	p.supersede()
	// Calls and goroutine probes serve spans: without a span probe there is nothing to trace,
	// and goroutine inheritance serves only calls.
	roles := map[Role]bool{}
	for _, s := range p.Sites {
		roles[s.Probe.Role] = true
	}
	if !roles[RoleSpan] {
		p.Sites, p.Choices = nil, nil
		return p, ErrNothingToTrace
	}
	if !roles[RoleCall] {
		p.Sites = slices.DeleteFunc(p.Sites, func(s Site) bool { return s.Probe.Role == RoleSpawn || s.Probe.Role == RoleExit })
		p.Choices = slices.DeleteFunc(p.Choices, func(c Choice) bool { return !slices.Contains(p.Probes(), c.ProbeID) })
	}
	// The error messages the collector reads: reported like the probes' fields.
	_, apimachinery := bin.ModuleVersion("k8s.io/apimachinery")
	for _, ref := range ErrorMessageFields {
		if apimachinery || !strings.HasPrefix(ref.Type, "k8s.io/") {
			offset(ref)
		}
	}
	// A work queue's adds matter only to the spans of the same process, and only then.
	sort.SliceStable(p.Sites, func(i, j int) bool { return p.Sites[i].Addr < p.Sites[j].Addr })
	return p, nil
}

// supersede leaves out the sites of probes whose SupersededBy probe has sites, and says so.
func (p *Plan) supersede() {
	ids := map[string]bool{}
	for _, s := range p.Sites {
		ids[s.Probe.ID] = true
	}
	left := map[*Probe]bool{}
	var fns []string
	p.Sites = slices.DeleteFunc(p.Sites, func(s Site) bool {
		if s.Probe.SupersededBy != "" && ids[s.Probe.SupersededBy] {
			left[s.Probe] = true
			fns = append(fns, s.Function.Name+"'s ")
			return true
		}
		return false
	})
	p.Choices = slices.DeleteFunc(p.Choices, func(c Choice) bool {
		return slices.ContainsFunc(fns, func(fn string) bool { return strings.HasPrefix(c.Sites, fn) })
	})
	// In catalog order (Probe.ID, then the pattern): a map's order would make inspect's
	// output differ from run to run.
	prs := slices.Collect(maps.Keys(left))
	slices.SortFunc(prs, func(a, b *Probe) int {
		return cmp.Or(strings.Compare(a.ID, b.ID), strings.Compare(a.Symbol.String(), b.Symbol.String()))
	})
	for _, pr := range prs {
		why := pr.SupersededBy + " is attached: its spans are these queue items', at no extra probe hit"
		if pr.Enriches != "" {
			why = "detail reconcile: " + pr.Enriches + " is attached, its item is the span (controller, object, result); " +
				"the handler's start and error come at detail calls (its return sites are RETs, single-stepped)"
		}
		p.Choices = append(p.Choices, Choice{ProbeID: pr.ID, Sites: "none for the functions matching " + pr.Symbol.String(), Why: why})
	}
	sort.SliceStable(p.Choices, func(i, j int) bool { return p.Choices[i].ProbeID < p.Choices[j].ProbeID })
}

// Choice says where the plan put the sites of a probe that has more than one way to be
// probed (Probe.Calls, Probe.Fallback), and why: inspect prints it, the agent logs it.
type Choice struct {
	ProbeID string
	Sites   string // where the sites are
	Why     string // why not the preferred way, for a fallback
}

// fallback records the choice of the fallback probe pr, which found sites in fns: the reasons
// the earlier entries of its ID did not apply are in p.Missing.
func (p *Plan) fallback(pr *Probe, fns []symbols.Function) {
	var why []string
	for _, m := range p.Missing {
		if m.ProbeID == pr.ID {
			why = append(why, m.Reason)
		}
	}
	names := make([]string, len(fns))
	for i, f := range fns {
		names[i] = f.Name
	}
	sites := "the entry and RETs of " + strings.Join(names, ", ")
	if !pr.EntryOnly && p.Binary.Arch == "amd64" {
		sites += " (a RET is single-stepped)"
	}
	p.Choices = append(p.Choices, Choice{ProbeID: pr.ID, Sites: sites, Why: strings.Join(why, "; ")})
}

// returnAddresses returns the return sites of fn at the instruction after each of its calls in
// the functions pr.ReturnCallers matches (and the function each is in), when that is exact:
// every call found is direct and no branch of a caller targets its return address. It records
// the choice either way; nil means fn's RETs.
func (p *Plan) returnAddresses(bin *symbols.Binary, fn symbols.Function, pr *Probe) ([]symbols.Site, []symbols.Function) {
	var callers []symbols.Function
	err := bin.EachFunction(func(entry, end uint64, name []byte) bool {
		if entry != fn.Entry && pr.ReturnCallers.Match(name) {
			callers = append(callers, symbols.Function{Name: string(name), Entry: entry, End: end})
		}
		return true
	})
	var sites []symbols.Site
	if err == nil {
		err = errors.New("no function matches " + pr.ReturnCallers.String())
	}
	if len(callers) > 0 {
		sites, err = bin.ReturnAddressSites(fn, callers)
	}
	if err == nil && !slices.ContainsFunc(sites, func(s symbols.Site) bool { return s.Emulated }) {
		err = errors.New("the kernel single-steps the instruction at every return address, as it does a RET")
	}
	if err != nil {
		p.Choices = append(p.Choices, Choice{ProbeID: pr.ID, Sites: "the RETs of " + fn.Name + " (single-stepped)", Why: err.Error()})
		return nil, nil
	}
	in := make([]symbols.Function, len(sites))
	var where []string
	for i, s := range sites {
		in[i], _ = funcContaining(callers, s.Addr)
		where = append(where, fmt.Sprintf("%s+%#x `%s` (%s)", in[i].Name, s.Addr-in[i].Entry, s.Insn, s.Trap()))
	}
	p.Choices = append(p.Choices, Choice{ProbeID: pr.ID, Sites: fmt.Sprintf("%s's entry and the return addresses of its calls: %s", fn.Name, strings.Join(where, ", "))})
	return sites, in
}

// funcContaining returns the function of fns whose code holds addr.
func funcContaining(fns []symbols.Function, addr uint64) (symbols.Function, bool) {
	for _, f := range fns {
		if addr >= f.Entry && addr < f.End {
			return f, true
		}
	}
	return symbols.Function{}, false
}

// callPairSites finds, in fn, the single direct call of c.Entry and the single direct call of
// c.Return after it.
func callPairSites(bin *symbols.Binary, fn symbols.Function, c *CallPair) (entry, ret symbols.Site, err error) {
	calls, err := bin.Calls(fn)
	if err != nil {
		return entry, ret, err
	}
	var sites [2][]symbols.Site
	for i, name := range []string{c.Entry, c.Return} {
		if name == "" { // an entry-only probe's
			sites[i] = sites[0]
			continue
		}
		callee, err := bin.Lookup(name)
		if err != nil {
			return entry, ret, err
		}
		for _, call := range calls {
			if call.Target == callee.Entry {
				sites[i] = append(sites[i], call.Site)
			}
		}
		if len(sites[i]) != 1 {
			return entry, ret, fmt.Errorf("%d direct calls of %s, not one", len(sites[i]), name)
		}
	}
	entry, ret = sites[0][0], sites[1][0]
	if ret.Addr < entry.Addr {
		return entry, ret, fmt.Errorf("its call of %s comes before its call of %s", c.Return, c.Entry)
	}
	return entry, ret, nil
}

// bracketSites finds the sites of a Bracket probe in fn: the single direct call of a function
// b.Call matches (the entry site), and the entry of the method b.End of fn's receiver (the
// return site).
func bracketSites(bin *symbols.Binary, fn symbols.Function, b *Bracket) (entry symbols.Site, end symbols.Function, ret symbols.Site, err error) {
	calls, err := bin.Calls(fn)
	if err != nil {
		return entry, end, ret, err
	}
	var sites []symbols.Site
	for _, c := range calls {
		if callee, ok := bin.FunctionAt(c.Target); ok && callee.Entry == c.Target && b.Call.MatchString(callee.Name) {
			sites = append(sites, c.Site)
		}
	}
	if len(sites) != 1 {
		return entry, end, ret, fmt.Errorf("%d direct calls of a function matching %s, not one", len(sites), b.Call)
	}
	i := strings.LastIndexByte(fn.Name, '.')
	end, err = bin.Lookup(fn.Name[:i+1] + b.End)
	if err != nil {
		return entry, end, ret, err
	}
	ret, err = bin.EntrySite(end)
	if err != nil {
		return entry, end, ret, fmt.Errorf("find entry site of %s: %w", end.Name, err)
	}
	return sites[0], end, ret, nil
}

// candidate is a probe of the catalog and the functions it applies to.
type candidate struct {
	probe *Probe
	fns   []symbols.Function
}

// match finds the functions of each probe whose module (and version) the binary has. Layouts
// of one probe never share a function: when the module's version is unknown (a devel or
// replaced build) the size of a result type (Probe.Result) picks the layout, and a
// function no single layout fits is refused with a message.
func (p *Plan) match(bin *symbols.Binary, catalog []*Probe) ([]candidate, error) {
	// The probes whose module the binary has, then one scan of its functions for them all.
	var active []*Probe
	why := map[*Probe]string{}     // a probe left out: why, in catalog order below
	unknown := map[*Probe]string{} // probes whose module version is unknown: the version
	for _, pr := range catalog {
		if pr.Module != "" {
			v, ok := bin.ModuleVersion(pr.Module)
			if !ok {
				continue // not this kind of program: nothing to say
			}
			if !semver.IsValid(v) {
				unknown[pr] = v
			} else if !inRange(v, pr.MinVersion, pr.MaxVersion) {
				w := fmt.Sprintf("%s %s is outside this layout's range [%s, %s]", pr.Module, v, orAny(pr.MinVersion), orAny(pr.MaxVersion))
				if pr.Bracket != nil {
					w = "queue layout unknown: " + w + "; nothing attached for it"
				}
				why[pr] = w
				continue
			}
		}
		if !slices.Contains(active, pr) {
			active = append(active, pr)
		}
	}
	fns := make(map[*Probe][]symbols.Function, len(active))
	// A literal every match contains (an anchored pattern's prefix) rules most names out
	// before the regexp runs.
	lits := make([][]byte, len(active))
	for i, pr := range active {
		lit, _ := pr.Symbol.LiteralPrefix()
		lits[i] = []byte(lit)
	}
	err := bin.EachFunction(func(entry, end uint64, name []byte) bool {
		var f *symbols.Function
		for i, pr := range active {
			if !bytes.Contains(name, lits[i]) || !pr.Symbol.Match(name) || (pr.Unless != nil && pr.Unless.Match(name)) {
				continue
			}
			if f == nil {
				f = &symbols.Function{Name: string(name), Entry: entry, End: end}
			}
			fns[pr] = append(fns[pr], *f)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	var out []candidate
	for _, pr := range catalog {
		if w, ok := why[pr]; ok {
			p.missing(pr.ID, w)
			continue
		}
		if !slices.Contains(active, pr) {
			continue
		}
		if len(fns[pr]) == 0 {
			p.missing(pr.ID, fmt.Sprintf("no function matches %s", pr.Symbol))
		}
		out = append(out, candidate{pr, fns[pr]})
	}
	// Which layouts of one probe ID claim each function.
	type idFn struct {
		id    string
		entry uint64
	}
	claims := map[idFn][]int{}
	for i, c := range out {
		for _, f := range c.fns {
			k := idFn{c.probe.ID, f.Entry}
			claims[k] = append(claims[k], i)
		}
	}
	drop := map[idFn]map[int]bool{}
	for k, idx := range claims {
		if len(idx) < 2 {
			continue
		}
		fn := funcByEntry(out[idx[0]].fns, k.entry)
		var fits []int
		var shown []string
		var sizeErr error
		for _, i := range idx {
			r := out[i].probe.Result
			if r == nil {
				continue
			}
			size, ok, err := bin.MethodResultSize(r.Method, r.Out, r.Type)
			switch {
			case err != nil:
				sizeErr = err
			case !ok:
				shown = append(shown, fmt.Sprintf("no interface method %s returning %s is found", r.Method, r.Type))
			case int(size) == r.Size:
				fits = append(fits, i)
			default:
				shown = append(shown, fmt.Sprintf("%s is %d bytes, this layout's %d", r.Type, size, r.Size))
			}
		}
		drop[k] = map[int]bool{}
		for _, i := range idx {
			if len(fits) != 1 || fits[0] != i {
				drop[k][i] = true
			}
		}
		if len(fits) == 1 {
			continue
		}
		mod := out[idx[0]].probe.Module
		v := unknown[out[idx[0]].probe]
		why := "no layout names a result type that tells them apart"
		switch {
		case sizeErr != nil:
			why = sizeErr.Error()
		case len(fits) > 1:
			why = "the result types fit more than one of them"
		case len(shown) > 0:
			why = strings.Join(slices.Compact(shown), "; ")
		}
		p.refused(k.id, fmt.Sprintf("%s: %s version %s is unknown (a devel or replaced build) and %d layouts of this probe match the function, but the binary does not tell which: %s; not traced rather than read wrongly: build the program with a released %s",
			fn.Name, mod, v, len(idx), why, mod))
	}
	for k, d := range drop {
		for i := range d {
			out[i].fns = slices.DeleteFunc(out[i].fns, func(f symbols.Function) bool { return f.Entry == k.entry })
		}
	}
	return out, nil
}

func funcByEntry(fns []symbols.Function, entry uint64) symbols.Function {
	for _, f := range fns {
		if f.Entry == entry {
			return f
		}
	}
	return symbols.Function{}
}

// refused records a reason that stands even when another layout of the probe matched.
func (p *Plan) refused(id, reason string) {
	p.Missing = append(p.Missing, Missing{ProbeID: id, Reason: reason, refused: true})
}

func (p *Plan) missing(id, reason string) {
	p.Missing = append(p.Missing, Missing{ProbeID: id, Reason: reason})
}

// Offset returns the offset of a field the plan resolved (ref.Add not added); ok is false when
// it is unknown or the plan never needed it.
func (p *Plan) Offset(ref FieldRef) (uint64, bool) {
	if ref.Type == "" {
		return 0, true // a word at a fixed distance from the pointer (ValueArg)
	}
	for _, u := range p.Offsets {
		if u.Type == ref.Type && u.Path == ref.Path {
			return u.Value, u.Err == nil
		}
	}
	return 0, false
}

// inRange says whether the (valid semver) version v lies in [lo, hi].
func inRange(v, lo, hi string) bool {
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

// QueueLayoutUnknown says, in one line, why work queues of the binary are not bracketed
// (client-go's version, or Get's code, unknown); "" when none is.
func (p *Plan) QueueLayoutUnknown() string {
	var why []string
	for _, m := range p.Missing {
		if strings.Contains(m.Reason, "queue layout unknown") {
			why = append(why, m.Reason)
		}
	}
	return strings.Join(why, "; ")
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

// Where names the instruction as function+offset.
func (s *Site) Where() string {
	f := s.Function
	if s.In.Name != "" {
		f = s.In
	}
	return fmt.Sprintf("%s+%#x", f.Name, s.Addr-f.Entry)
}

// ItabSlot is the register slot whose itab names a type the site's decoder wants (Layout.Itab),
// or -1.
func (s *Site) ItabSlot() int { return s.Layout().Itab }
