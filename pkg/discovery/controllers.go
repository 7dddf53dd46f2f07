package discovery

import (
	"fmt"
	"path"
)

// Controllers selects controllers by name: the controller a span carries (a work queue's
// Name, a controller-runtime controller's name, a sync handler's controller). A controller is
// selected when it matches an Include pattern (or Include is empty) and no Exclude pattern.
// Patterns are globs (path.Match syntax: '*', '?', '[a-z]'), matched against the whole name,
// case-sensitively: "deployment", "replicaset", "garbage_collector_*". The zero value selects
// every controller.
type Controllers struct {
	Include []string
	Exclude []string
}

// NewControllers checks the patterns and returns the selection; a bad pattern is an error
// naming it.
func NewControllers(include, exclude []string) (Controllers, error) {
	for _, p := range append(append([]string(nil), include...), exclude...) {
		if err := checkPattern(p); err != nil {
			return Controllers{}, err
		}
	}
	return Controllers{Include: include, Exclude: exclude}, nil
}

// checkPattern reports a glob pattern path.Match cannot use.
func checkPattern(p string) error {
	if p == "" {
		return fmt.Errorf("pattern %q: empty (a controller name or a glob such as \"replica*\")", p)
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("pattern %q: %w (globs: '*', '?', '[a-z]'; escape a literal one with '\\')", p, err)
	}
	return nil
}

// All reports whether c selects every controller.
func (c Controllers) All() bool { return len(c.Include) == 0 && len(c.Exclude) == 0 }

// Selects reports whether the controller named name is selected.
func (c Controllers) Selects(name string) bool {
	if matchAny(c.Exclude, name) {
		return false
	}
	return len(c.Include) == 0 || matchAny(c.Include, name)
}
