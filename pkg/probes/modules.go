package probes

import (
	"github.com/reconscope/reconscope/pkg/symbols"
)

// Modules are the modules whose versions decide what the catalog can trace, in the order
// inspect lists them.
var Modules = []string{controllerRuntime, clientGo, "k8s.io/apimachinery", kubernetes}

// ModuleVersions returns the version of each of Modules that bin depends on (bin.Modules: the
// published version for Kubernetes' staging modules in a Kubernetes release build).
func ModuleVersions(bin *symbols.Binary) map[string]string {
	out := map[string]string{}
	for _, m := range Modules {
		if v, ok := bin.Modules[m]; ok {
			out[m] = v
		}
	}
	return out
}
