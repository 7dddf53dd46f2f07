package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoClientset: the agent reaches the API server through pkg/kubeapi. client-go's
// clientset links every API group's typed client, their apply configurations and the OpenAPI
// models, and its scheme registers every group's types when the program starts: all of it
// counts in the agent's size and resident memory on every node. No import may bring it back.
func TestLinksNoClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	banned := func(pkg string) bool {
		for _, p := range []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/applyconfigurations", "github.com/google/gnostic-models"} {
			if pkg == p || strings.HasPrefix(pkg, p+"/") {
				return true
			}
		}
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if banned(pkg) {
			continue // its importer is reported
		}
		for _, imp := range strings.Fields(imports) {
			if banned(imp) {
				t.Errorf("%s imports %s: the agent's API calls go through pkg/kubeapi (give the stage a narrow interface, as discovery.PodClient and metricsauth.Reviewer)", pkg, imp)
			}
		}
	}
}
