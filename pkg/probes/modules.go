package probes

import (
	"strconv"
	"strings"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// Modules are the modules whose versions decide what the catalog can trace, in the order
// inspect lists them.
var Modules = []string{controllerRuntime, clientGo, "k8s.io/apimachinery", kubernetes}

// ModuleVersions returns the version of each of Modules that bin depends on, with the
// published version for Kubernetes' staging modules in a Kubernetes release build (see
// moduleVersion).
func ModuleVersions(bin *symbols.Binary) map[string]string {
	out := map[string]string{}
	for _, m := range Modules {
		if v, ok := moduleVersion(bin, m); ok {
			out[m] = v
		}
	}
	return out
}

// useKubernetesRelease records in bin the published versions of the staging modules of a
// Kubernetes release build, so that the catalog's version ranges and the offsets table see
// them (NewPlan calls it first).
func useKubernetesRelease(bin *symbols.Binary) {
	for m, v := range bin.Modules {
		if r, _ := moduleVersion(bin, m); r != v {
			bin.SetModuleVersion(m, r)
		}
	}
}

// moduleVersion is the version of dependency m of bin. A Kubernetes release build replaces
// its staging modules (client-go, apimachinery, ...) by directories of the kubernetes tree,
// recorded as v0.0.0; their published version follows the release set in the linker flags:
// v1.37.2 ships client-go v0.37.2.
func moduleVersion(bin *symbols.Binary, m string) (string, bool) {
	v, ok := bin.Modules[m]
	if ok && v == "v0.0.0" && strings.HasPrefix(m, "k8s.io/") {
		if s := stagingVersion(bin.Settings["-ldflags"]); s != "" {
			return s, true
		}
	}
	return v, ok
}

// stagingVersion returns "v0.37.2" when the linker flags set the Kubernetes version to
// v1.37.2, "" otherwise.
func stagingVersion(ldflags string) string {
	v := kubernetesVersion(ldflags)
	if v == "" {
		return ""
	}
	return "v0." + strings.TrimPrefix(v, "v1.")
}

// kubernetesVersion returns the release set by -X k8s.io/component-base/version.gitVersion
// (or k8s.io/client-go/pkg/version.gitVersion) in the linker flags, as "v1.MINOR.PATCH"
// without pre-release or build suffixes; "" when there is none.
func kubernetesVersion(ldflags string) string {
	for _, key := range []string{"k8s.io/component-base/version.gitVersion=", "k8s.io/client-go/pkg/version.gitVersion="} {
		i := strings.Index(ldflags, key)
		if i < 0 {
			continue
		}
		v := strings.Trim(ldflags[i+len(key):], "'\"")
		if j := strings.IndexAny(v, " '\"+-"); j >= 0 {
			v = v[:j]
		}
		parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
		if len(parts) != 3 || parts[0] != "1" {
			continue
		}
		if _, err := strconv.Atoi(parts[1]); err != nil {
			continue
		}
		if _, err := strconv.Atoi(parts[2]); err != nil {
			continue
		}
		return "v1." + parts[1] + "." + parts[2]
	}
	return ""
}
