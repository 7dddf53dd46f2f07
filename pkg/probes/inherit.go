package probes

import (
	"fmt"
	"slices"
)

// Inheritance says whether goroutines started inside a span join it: which goroutine probes
// (GoroutineProbes) a catalog keeps. It is the agent's --goroutine-inheritance (a flag.Value).
type Inheritance uint8

const (
	// InheritAuto keeps the goroutine probes: a call made on a goroutine that a reconcile
	// started (directly or not) is in the reconcile's span. A plan attaches them only where a
	// call probe applies (they serve only calls).
	InheritAuto Inheritance = iota
	// InheritOff drops them: no probe hit at goroutine creation and exit; a call made on a
	// goroutine that a reconcile started is in no span. Calls on the reconcile's own goroutine
	// are unchanged.
	InheritOff
	// InheritNewproc1 keeps them with goroutine creation at runtime.newproc1's entry and RETs
	// (the catalog's fallback, a single-stepped RET on amd64) even where newproc's calls are
	// found: the sites used before, to compare their cost. Not in --help.
	InheritNewproc1
)

var inheritanceNames = []string{InheritAuto: "auto", InheritOff: "off", InheritNewproc1: "newproc1"}

// String is the flag's value.
func (i Inheritance) String() string {
	if int(i) < len(inheritanceNames) {
		return inheritanceNames[i]
	}
	return fmt.Sprintf("Inheritance(%d)", uint8(i))
}

// Set parses the flag's value.
func (i *Inheritance) Set(s string) error {
	n := slices.Index(inheritanceNames, s)
	if n < 0 {
		return fmt.Errorf("want auto or off, not %q", s)
	}
	*i = Inheritance(n)
	return nil
}

// Type names the flag's value in its help (pflag.Value).
func (i *Inheritance) Type() string { return "mode" }

// Catalog returns catalog with its goroutine probes as i says. catalog itself is not changed.
func (i Inheritance) Catalog(catalog []*Probe) []*Probe {
	return slices.DeleteFunc(slices.Clone(catalog), func(p *Probe) bool {
		switch i {
		case InheritOff:
			return p.Role == RoleSpawn || p.Role == RoleExit
		case InheritNewproc1:
			return p.Role == RoleSpawn && !p.Fallback
		}
		return false
	})
}
