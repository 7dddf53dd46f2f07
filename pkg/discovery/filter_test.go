package discovery

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func target(exe string, pod *PodInfo) Target {
	return Target{Process: Process{PID: 1, Exe: exe}, Pod: pod}
}

func pod(ns, container string, labels map[string]string) *PodInfo {
	return &PodInfo{Namespace: ns, Name: "p", Container: container, Labels: labels}
}

func TestFilterMatch(t *testing.T) {
	ctrl := map[string]string{"app.kubernetes.io/component": "controller"}
	canary := map[string]string{"app.kubernetes.io/component": "controller", "track": "canary"}
	tests := []struct {
		name   string
		config Config
		target Target
		want   bool
	}{
		{"empty config selects all", Config{}, target("/bin/sh", nil), true},
		{"empty config selects pods", Config{}, target("/manager", pod("a", "c", nil)), true},

		{"namespace exact", Config{Include: []Rule{{Namespaces: []string{"platform"}}}}, target("/manager", pod("platform", "m", nil)), true},
		{"namespace other", Config{Include: []Rule{{Namespaces: []string{"platform"}}}}, target("/manager", pod("default", "m", nil)), false},
		{"namespace glob", Config{Include: []Rule{{Namespaces: []string{"team-*"}}}}, target("/manager", pod("team-a", "m", nil)), true},
		{"namespace rule needs a pod", Config{Include: []Rule{{Namespaces: []string{"*"}}}}, target("/manager", nil), false},

		{"selector match", Config{Include: []Rule{{PodSelector: "app.kubernetes.io/component=controller"}}}, target("/m", pod("a", "m", ctrl)), true},
		{"selector no match", Config{Include: []Rule{{PodSelector: "app.kubernetes.io/component=webhook"}}}, target("/m", pod("a", "m", ctrl)), false},
		{"selector set-based", Config{Include: []Rule{{PodSelector: "app.kubernetes.io/component in (operator,controller),!track"}}}, target("/m", pod("a", "m", ctrl)), true},
		{"selector set-based excludes", Config{Include: []Rule{{PodSelector: "app.kubernetes.io/component in (operator,controller),!track"}}}, target("/m", pod("a", "m", canary)), false},
		{"selector on unlabelled pod", Config{Include: []Rule{{PodSelector: "!track"}}}, target("/m", pod("a", "m", nil)), true},
		{"selector needs a pod", Config{Include: []Rule{{PodSelector: "!track"}}}, target("/m", nil), false},

		{"container", Config{Include: []Rule{{Containers: []string{"manager"}}}}, target("/m", pod("a", "manager", nil)), true},
		{"container other", Config{Include: []Rule{{Containers: []string{"manager"}}}}, target("/m", pod("a", "kube-rbac-proxy", nil)), false},

		{"exe base name", Config{Include: []Rule{{Executables: []string{"manager"}}}}, target("/manager", nil), true},
		{"exe base name glob", Config{Include: []Rule{{Executables: []string{"kube-*"}}}}, target("/usr/local/bin/kube-controller-manager", nil), true},
		{"exe full path", Config{Include: []Rule{{Executables: []string{"/usr/local/bin/*"}}}}, target("/usr/local/bin/kube-controller-manager", nil), true},
		{"exe full path star does not cross /", Config{Include: []Rule{{Executables: []string{"/usr/*"}}}}, target("/usr/local/bin/x", nil), false},
		{"exe full path other", Config{Include: []Rule{{Executables: []string{"/manager"}}}}, target("/bin/manager", nil), false},
		{"exe unknown", Config{Include: []Rule{{Executables: []string{"*"}}}}, target("", nil), false},

		{"fields are ANDed", Config{Include: []Rule{{Namespaces: []string{"a"}, Containers: []string{"manager"}}}}, target("/m", pod("a", "proxy", nil)), false},
		{"fields are ANDed, all match", Config{Include: []Rule{{Namespaces: []string{"a"}, Containers: []string{"manager"}, Executables: []string{"m"}}}}, target("/m", pod("a", "manager", nil)), true},
		{"rules are ORed", Config{Include: []Rule{{Namespaces: []string{"b"}}, {Executables: []string{"m"}}}}, target("/m", pod("a", "x", nil)), true},
		{"list items are ORed", Config{Include: []Rule{{Namespaces: []string{"b", "a"}}}}, target("/m", pod("a", "x", nil)), true},

		{"exclude only", Config{Exclude: []Rule{{Namespaces: []string{"kube-system"}}}}, target("/m", pod("kube-system", "x", nil)), false},
		{"exclude only, others kept", Config{Exclude: []Rule{{Namespaces: []string{"kube-system"}}}}, target("/m", pod("default", "x", nil)), true},
		{"exclude on pod fields keeps host processes", Config{Exclude: []Rule{{Namespaces: []string{"*"}}}}, target("/m", nil), true},
		{"exclude wins", Config{
			Include: []Rule{{Namespaces: []string{"a"}}},
			Exclude: []Rule{{PodSelector: "track=canary"}},
		}, target("/m", pod("a", "m", canary)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewFilter(tt.config)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Match(tt.target); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNilFilterMatchesAll(t *testing.T) {
	var f *Filter
	if !f.Match(target("/x", nil)) {
		t.Fatal("nil filter rejected a process")
	}
}

func TestNewFilterErrors(t *testing.T) {
	tests := []struct {
		name   string
		config Config
		want   string
	}{
		{"empty rule", Config{Include: []Rule{{}}}, "include[0]: rule sets no field"},
		{"bad glob", Config{Exclude: []Rule{{Namespaces: []string{"a"}}, {Executables: []string{"[x"}}}}, `exclude[1]: executables: pattern "[x"`},
		{"bad container glob", Config{Include: []Rule{{Containers: []string{"a["}}}}, `include[0]: containers: pattern "a["`},
		{"bad selector", Config{Include: []Rule{{PodSelector: "a in (b"}}}, `include[0]: podSelector "a in (b"`},
		{"all errors", Config{Include: []Rule{{}}, Exclude: []Rule{{}}}, "exclude[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFilter(tt.config)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewFilter error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	c, err := LoadConfig(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Include: []Rule{
			{Namespaces: []string{"team-*", "platform"}, PodSelector: "app.kubernetes.io/component in (controller,operator)"},
			{Executables: []string{"kube-controller-manager"}},
		},
		Exclude: []Rule{
			{PodSelector: "track=canary"},
			{Containers: []string{"debugger"}},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("LoadConfig =\n%+v\nwant\n%+v", c, want)
	}
	f, err := NewFilter(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		t    Target
		want bool
	}{
		{target("/manager", pod("team-x", "manager", map[string]string{"app.kubernetes.io/component": "operator"})), true},
		{target("/manager", pod("team-x", "manager", map[string]string{"app.kubernetes.io/component": "operator", "track": "canary"})), false},
		{target("/manager", pod("team-x", "debugger", map[string]string{"app.kubernetes.io/component": "operator"})), false},
		{target("/manager", pod("default", "manager", map[string]string{"app.kubernetes.io/component": "operator"})), false},
		{target("/usr/local/bin/kube-controller-manager", nil), true},
		{target("/usr/bin/containerd", nil), false},
	} {
		if got := f.Match(tt.t); got != tt.want {
			t.Errorf("Match(%+v, pod %+v) = %v, want %v", tt.t.Process, tt.t.Pod, got, tt.want)
		}
	}
}

func TestLoadConfigErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content, want string
	}{
		{"unknown field", "include:\n  - namespace: [a]\n", `unknown field "namespace"`},
		{"not yaml", "include: [\n", "parse discovery config"},
		{"wrong type", "include:\n  - namespaces: a\n", "parse discovery config"},
		{"bad selector", "exclude:\n  - podSelector: '=x'\n", "exclude[0]: podSelector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadConfig error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read discovery config") {
		t.Fatalf("missing file: error = %v", err)
	}
	// An empty file is a valid config that selects everything.
	p := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadConfig(p); err != nil || len(c.Include)+len(c.Exclude) != 0 {
		t.Fatalf("empty file: %+v, %v", c, err)
	}
}
