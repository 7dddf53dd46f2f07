package probes

import (
	"maps"
	"testing"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// TestModuleVersions: inspect lists the versions of the catalog's modules that the binary
// has, as symbols.Binary records them, and no other module.
func TestModuleVersions(t *testing.T) {
	bin := &symbols.Binary{Modules: map[string]string{
		"k8s.io/client-go": "v0.36.3", "k8s.io/apimachinery": "v0.36.3",
		"k8s.io/klog/v2": "v2.130.1", "sigs.k8s.io/yaml": "v1.6.0",
	}}
	want := map[string]string{"k8s.io/client-go": "v0.36.3", "k8s.io/apimachinery": "v0.36.3"}
	if got := ModuleVersions(bin); !maps.Equal(got, want) {
		t.Errorf("ModuleVersions = %v, want %v", got, want)
	}
}
