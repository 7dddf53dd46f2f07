package collector

import (
	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/probes"
)

// siteConfig encodes one site of plan into the record the kernel program reads at it
// (struct site_config, bpf/include/events.h); Attach adds the executable's slot and the site's
// address. A string or value whose field offset the plan could not resolve is left out (the
// span comes without it) rather than failing the probe.
func siteConfig(plan *probes.Plan, s *probes.Site) rbpf.TraceSiteConfig {
	l := s.Layout()
	c := rbpf.TraceSiteConfig{
		Kind:     uint8(s.Kind),
		Role:     uint8(s.Probe.Role),
		CtxSlot:  int8(l.Ctx),
		ErrSlot:  int8(l.Err),
		GoidOff:  uint32(plan.GoidOffset),
		SaveSlot: int8(l.Save),
		KeySlot:  int8(probes.None),
	}
	if s.Kind == probes.SiteEntry && s.Probe.Role == probes.RoleSpan {
		c.KeySlot = int8(l.Key)
		if s.Probe.Bracket != nil {
			c.Flags |= uint8(rbpf.TraceSiteFlagSITE_F_ITEM)
		}
	}
	if s.Probe.Role == probes.RoleCall && s.Probe.ItemResult && s.Probe.ItemKnown {
		c.Flags |= uint8(rbpf.TraceSiteFlagSITE_F_ITEM_CALL)
	}
	if s.Kind == probes.SiteEntry && s.Probe.DeferredRead {
		c.Deferred = 1
	}
	for i, a := range l.Strings {
		spec := rbpf.TraceStrSpec{PtrSlot: int8(a.Ptr), LenSlot: int8(a.Len), BaseSlot: int8(a.Base)}
		if a.Base != probes.None {
			off, ok := plan.Offset(a.Field)
			if !ok {
				spec = rbpf.TraceStrSpec{PtrSlot: int8(probes.None), LenSlot: int8(probes.None), BaseSlot: int8(probes.None)}
			} else {
				spec.Off = uint32(off + a.Field.Add)
			}
		}
		c.Str[i] = spec
	}
	for i, v := range l.Values {
		spec := rbpf.TraceValSpec{BaseSlot: int8(probes.None)}
		if v.Base == probes.Frames {
			spec.BaseSlot = int8(probes.Frames)
		} else if v.Base != probes.None {
			if off, ok := plan.Offset(v.Field); ok {
				spec = rbpf.TraceValSpec{BaseSlot: int8(v.Base), Off: uint32(off + v.Field.Add)}
			}
		}
		c.Val[i] = spec
	}
	return c
}
