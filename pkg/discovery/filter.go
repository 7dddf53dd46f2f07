package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Config selects the processes to trace. It is the YAML (or JSON) file read by [LoadConfig]:
//
//	# Trace controllers in the team namespaces, and kube-controller-manager on the host,
//	# but not canary pods.
//	include:
//	  - namespaces: ["team-*"]
//	    podSelector: "app.kubernetes.io/component=controller"
//	  - executables: ["kube-controller-manager"]
//	    controllers: ["deployment", "replicaset"]
//	exclude:
//	  - podSelector: "track=canary"
//	  - controllers: ["garbage_collector_*"]
//
// A process is traced when it matches at least one Include rule (or Include is empty) and no
// Exclude rule without Controllers; the fields of a rule other than Controllers decide whether
// it matches a process. Controllers then choose, in a traced process, the controllers whose
// spans are kept (see [Filter.ControllersOf]): those its matching Include rules name (every
// one when a matching Include rule names none, or there is no Include rule), less those its
// matching Exclude rules name. The agent still traces only Go programs its probe catalog
// supports: the filter narrows that set, it never widens it. Unknown fields are an error, so a
// typo does not silently select everything.
type Config struct {
	// Include lists the rules of which a process must match one. Empty: every process.
	Include []Rule `json:"include,omitempty"`
	// Exclude lists the rules of which a process must match none. Exclude wins over Include.
	Exclude []Rule `json:"exclude,omitempty"`
	// Detail is the file's detail section, not read here: how much of each reconcile the agent
	// probes, per controller (the agent's pkg/detail reads and checks it, and reloads it while
	// it runs).
	Detail json.RawMessage `json:"detail,omitempty"`
}

// Rule matches a process when every field it sets matches (fields are ANDed; the items of one
// list are ORed). A rule must set at least one field.
//
// Namespaces, PodSelector and Containers need the process's pod: a rule that sets any of them
// never matches a process outside Kubernetes, nor one whose pod is not known (no API access,
// or the kubelet has not yet written the container's ID into the pod's status). So while the
// API server is unreachable, Include rules on them select nothing and Exclude rules on them
// exclude nothing.
type Rule struct {
	// Namespaces are glob patterns (path.Match syntax: '*', '?', '[a-z]') matched against the
	// pod's namespace, e.g. ["kube-system", "team-*"].
	Namespaces []string `json:"namespaces,omitempty"`
	// PodSelector is a Kubernetes label selector on the pod's labels, in the syntax of
	// kubectl's -l flag: "app=manager,tier!=test", "env in (prod,staging)", "!canary".
	PodSelector string `json:"podSelector,omitempty"`
	// Containers are glob patterns matched against the container's name in the pod spec,
	// e.g. ["manager"].
	Containers []string `json:"containers,omitempty"`
	// Executables are glob patterns matched against the executable's path as the process sees
	// it (Process.Exe, e.g. "/manager" inside a container image). A pattern holding a '/'
	// matches the whole path ("/usr/local/bin/*"; '*' does not cross '/'); one without matches
	// the base name only ("manager", "kube-*").
	Executables []string `json:"executables,omitempty"`
	// Controllers are glob patterns matched against the controller a span carries: a work
	// queue's Name (as its workqueue_* metrics name it), a controller-runtime controller's
	// name, a sync handler's controller; e.g. ["deployment", "replicaset"]. A rule that sets
	// only Controllers applies to every process. In an Exclude rule they exclude those
	// controllers' spans, not the process.
	Controllers []string `json:"controllers,omitempty"`
}

// Target is what a [Filter] decides on: a process and, when known, its pod.
type Target struct {
	// Process is the process.
	Process Process
	// Pod is the process's pod, or nil when the process runs outside Kubernetes or its pod is
	// not known.
	Pod *PodInfo
}

// Filter is a compiled [Config]. A nil *Filter matches every process.
type Filter struct {
	include, exclude []rule
}

type rule struct {
	namespaces  []string
	selector    labels.Selector // nil: not set
	containers  []string
	executables []string
	controllers []string
}

// LoadConfig reads and checks the selection config file at path (YAML or JSON; see
// [Config]). Turn it into a Filter with [NewFilter].
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read discovery config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("parse discovery config %s: %w", path, err)
	}
	if _, err := NewFilter(c); err != nil {
		return Config{}, fmt.Errorf("discovery config %s: %w", path, err)
	}
	return c, nil
}

// NewFilter compiles c. It fails on a rule that sets no field, a bad glob pattern or a bad
// label selector, naming the rule.
func NewFilter(c Config) (*Filter, error) {
	f := &Filter{}
	var errs []error
	for i, r := range c.Include {
		cr, err := compileRule(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("include[%d]: %w", i, err))
		}
		f.include = append(f.include, cr)
	}
	for i, r := range c.Exclude {
		cr, err := compileRule(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("exclude[%d]: %w", i, err))
		}
		f.exclude = append(f.exclude, cr)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return f, nil
}

func compileRule(r Rule) (rule, error) {
	if len(r.Namespaces) == 0 && r.PodSelector == "" && len(r.Containers) == 0 && len(r.Executables) == 0 && len(r.Controllers) == 0 {
		return rule{}, errors.New("rule sets no field: give namespaces, podSelector, containers, executables or controllers")
	}
	cr := rule{namespaces: r.Namespaces, containers: r.Containers, executables: r.Executables, controllers: r.Controllers}
	for _, p := range r.Controllers {
		if err := checkPattern(p); err != nil {
			return rule{}, fmt.Errorf("controllers: %w", err)
		}
	}
	for _, f := range []struct {
		name string
		pats []string
	}{{"namespaces", r.Namespaces}, {"containers", r.Containers}, {"executables", r.Executables}} {
		for _, p := range f.pats {
			if _, err := path.Match(p, ""); err != nil {
				return rule{}, fmt.Errorf("%s: pattern %q: %w", f.name, p, err)
			}
		}
	}
	if r.PodSelector != "" {
		sel, err := labels.Parse(r.PodSelector)
		if err != nil {
			return rule{}, fmt.Errorf("podSelector %q: %w", r.PodSelector, err)
		}
		cr.selector = sel
	}
	return cr, nil
}

// Match reports whether t is selected: it matches an include rule (or there is none) and no
// exclude rule that names no controllers.
func (f *Filter) Match(t Target) bool {
	if f == nil {
		return true
	}
	for _, r := range f.exclude {
		if len(r.controllers) == 0 && r.match(t) {
			return false
		}
	}
	if len(f.include) == 0 {
		return true
	}
	for _, r := range f.include {
		if r.match(t) {
			return true
		}
	}
	return false
}

// ControllersOf returns the controllers selected in t, a process Match selects: those of the
// include rules t matches (every controller when one of them names none, or there is no
// include rule), less those of the exclude rules t matches.
func (f *Filter) ControllersOf(t Target) Controllers {
	var c Controllers
	if f == nil {
		return c
	}
	all := len(f.include) == 0
	for _, r := range f.include {
		if !r.match(t) {
			continue
		}
		if len(r.controllers) == 0 {
			all = true
		}
		c.Include = append(c.Include, r.controllers...)
	}
	if all {
		c.Include = nil
	}
	for _, r := range f.exclude {
		if len(r.controllers) > 0 && r.match(t) {
			c.Exclude = append(c.Exclude, r.controllers...)
		}
	}
	return c
}

// match reports whether the rule's fields other than controllers match t.
func (r rule) match(t Target) bool {
	needsPod := len(r.namespaces) > 0 || r.selector != nil || len(r.containers) > 0
	if needsPod && t.Pod == nil {
		return false
	}
	if len(r.namespaces) > 0 && !matchAny(r.namespaces, t.Pod.Namespace) {
		return false
	}
	if r.selector != nil && !r.selector.Matches(labels.Set(t.Pod.Labels)) {
		return false
	}
	if len(r.containers) > 0 && !matchAny(r.containers, t.Pod.Container) {
		return false
	}
	if len(r.executables) > 0 && !matchExecutable(r.executables, t.Process.Exe) {
		return false
	}
	return true
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

func matchExecutable(patterns []string, exe string) bool {
	if exe == "" {
		return false
	}
	base := path.Base(exe)
	for _, p := range patterns {
		s := base
		if strings.Contains(p, "/") {
			s = exe
		}
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
