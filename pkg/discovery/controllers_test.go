package discovery

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestControllersSelects(t *testing.T) {
	tests := []struct {
		name             string
		include, exclude []string
		selected         []string
		rejected         []string
	}{
		{"zero value: every controller", nil, nil,
			[]string{"deployment", "replicaset", "workqueue", ""}, nil},
		{"kube-controller-manager's deployment and replicaset", []string{"deployment", "replicaset"}, nil,
			[]string{"deployment", "replicaset"}, []string{"Deployment", "deployments", "replicasets", "garbage_collector_graph_changes", "workqueue", ""}},
		{"globs", []string{"garbage_collector_*", "replica?et", "[dj]*"}, nil,
			[]string{"garbage_collector_graph_changes", "garbage_collector_attempt_to_delete", "replicaset", "deployment", "job"},
			[]string{"garbage_collector", "replicasets", "cronjob"}},
		{"exclude wins", []string{"*"}, []string{"garbage_collector_*"},
			[]string{"deployment", "ClusterRoleAggregator"}, []string{"garbage_collector_graph_changes"}},
		{"exclude only", nil, []string{"endpoint*"},
			[]string{"deployment", "workqueue"}, []string{"endpoint", "endpoint_slice", "endpointslice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewControllers(tt.include, tt.exclude)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := c.All(), tt.include == nil && tt.exclude == nil; got != want {
				t.Errorf("All() = %v, want %v", got, want)
			}
			for _, n := range tt.selected {
				if !c.Selects(n) {
					t.Errorf("Selects(%q) = false, want true", n)
				}
			}
			for _, n := range tt.rejected {
				if c.Selects(n) {
					t.Errorf("Selects(%q) = true, want false", n)
				}
			}
		})
	}
}

func TestNewControllersErrors(t *testing.T) {
	for _, tt := range []struct {
		include, exclude []string
		want             string
	}{
		{[]string{"deployment", "[replicaset"}, nil, `pattern "[replicaset": syntax error in pattern`},
		{nil, []string{`job\`}, `pattern "job\\"`},
		{[]string{""}, nil, `pattern "": empty`},
	} {
		if _, err := NewControllers(tt.include, tt.exclude); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewControllers(%q, %q) error = %v, want it to contain %q", tt.include, tt.exclude, err, tt.want)
		}
	}
}

// TestFilterControllersOf: rules with controllers choose the controllers of the processes
// their other fields match; an exclude rule with controllers never excludes the process.
func TestFilterControllersOf(t *testing.T) {
	kcm := target("/usr/local/bin/kube-controller-manager", nil)
	manager := target("/manager", pod("team-a", "manager", nil))
	other := target("/manager", pod("default", "manager", nil))
	tests := []struct {
		name   string
		config Config
		t      Target
		match  bool
		want   Controllers
	}{
		{"no rule", Config{}, kcm, true, Controllers{}},
		{"controllers only: every process", Config{Include: []Rule{{Controllers: []string{"deployment", "replicaset"}}}},
			manager, true, Controllers{Include: []string{"deployment", "replicaset"}}},
		{"kube-controller-manager's deployment and replicaset",
			Config{Include: []Rule{{Executables: []string{"kube-controller-manager"}, Controllers: []string{"deployment", "replicaset"}}, {Namespaces: []string{"team-*"}}}},
			kcm, true, Controllers{Include: []string{"deployment", "replicaset"}}},
		{"another include rule without controllers: all of them",
			Config{Include: []Rule{{Executables: []string{"kube-controller-manager"}, Controllers: []string{"deployment"}}, {Namespaces: []string{"team-*"}}}},
			manager, true, Controllers{}},
		{"matching include rules' controllers add up",
			Config{Include: []Rule{{Executables: []string{"manager"}, Controllers: []string{"a"}}, {Namespaces: []string{"team-*"}, Controllers: []string{"b*"}}}},
			manager, true, Controllers{Include: []string{"a", "b*"}}},
		{"not included", Config{Include: []Rule{{Executables: []string{"kube-controller-manager"}, Controllers: []string{"deployment"}}}},
			other, false, Controllers{Include: []string{}}},
		{"exclude with controllers keeps the process",
			Config{Exclude: []Rule{{Namespaces: []string{"team-*"}, Controllers: []string{"garbage_collector_*"}}}},
			manager, true, Controllers{Exclude: []string{"garbage_collector_*"}}},
		{"exclude with controllers of another process",
			Config{Exclude: []Rule{{Namespaces: []string{"team-*"}, Controllers: []string{"garbage_collector_*"}}}},
			other, true, Controllers{}},
		{"exclude without controllers excludes the process",
			Config{Exclude: []Rule{{Namespaces: []string{"team-*"}}}}, manager, false, Controllers{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewFilter(tt.config)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Match(tt.t); got != tt.match {
				t.Errorf("Match = %v, want %v", got, tt.match)
			}
			if !tt.match {
				return
			}
			got := f.ControllersOf(tt.t)
			if len(got.Include) != len(tt.want.Include) || len(got.Exclude) != len(tt.want.Exclude) ||
				(len(got.Include) > 0 && !reflect.DeepEqual(got.Include, tt.want.Include)) ||
				(len(got.Exclude) > 0 && !reflect.DeepEqual(got.Exclude, tt.want.Exclude)) {
				t.Errorf("ControllersOf = %+v, want %+v", got, tt.want)
			}
		})
	}
	var nilFilter *Filter
	if c := nilFilter.ControllersOf(kcm); !c.All() {
		t.Errorf("nil filter: ControllersOf = %+v, want every controller", c)
	}
}

func TestLoadConfigControllers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := LoadConfig(write("ok.yaml", `include:
  - executables: ["kube-controller-manager"]
    controllers: ["deployment", "replicaset"]
exclude:
  - controllers: ["garbage_collector_*"]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Include: []Rule{{Executables: []string{"kube-controller-manager"}, Controllers: []string{"deployment", "replicaset"}}},
		Exclude: []Rule{{Controllers: []string{"garbage_collector_*"}}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("LoadConfig =\n%+v\nwant\n%+v", c, want)
	}
	for _, tt := range []struct{ name, content, want string }{
		{"bad glob", "include:\n  - controllers: [\"deploy[\"]\n", `include[0]: controllers: pattern "deploy["`},
		{"bad exclude glob", "exclude:\n  - executables: [kcm]\n    controllers: [ok, \"[\"]\n", `exclude[0]: controllers: pattern "["`},
		{"empty pattern", "include:\n  - controllers: [\"\"]\n", `include[0]: controllers: pattern "": empty`},
		{"singular", "include:\n  - controller: [deployment]\n", `unknown field "controller"`},
		{"not a list", "include:\n  - controllers: deployment\n", "parse discovery config"},
	} {
		_, err := LoadConfig(write(strings.ReplaceAll(tt.name, " ", "-")+".yaml", tt.content))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: LoadConfig error = %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}
