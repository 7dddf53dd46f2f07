package probes

import (
	"testing"

	"github.com/reconscope/reconscope/pkg/symbols"
)

// TestKubernetesRelease: in a Kubernetes release build (staging modules recorded as v0.0.0,
// the release in -ldflags) the staging modules take the published version, in what inspect
// lists and in the binary NewPlan matches against; other modules keep theirs.
func TestKubernetesRelease(t *testing.T) {
	bin := &symbols.Binary{
		Modules: map[string]string{
			"k8s.io/client-go": "v0.0.0", "k8s.io/apimachinery": "v0.0.0",
			"k8s.io/klog/v2": "v2.130.1", "sigs.k8s.io/yaml": "v1.6.0",
		},
		Settings: map[string]string{"-ldflags": "-s -w -X 'k8s.io/component-base/version.gitVersion=v1.36.3' -X k8s.io/component-base/version.gitMajor=1"},
	}
	want := map[string]string{"k8s.io/client-go": "v0.36.3", "k8s.io/apimachinery": "v0.36.3"}
	if got := ModuleVersions(bin); len(got) != len(want) || got["k8s.io/client-go"] != want["k8s.io/client-go"] || got["k8s.io/apimachinery"] != want["k8s.io/apimachinery"] {
		t.Errorf("ModuleVersions = %v, want %v", got, want)
	}
	useKubernetesRelease(bin)
	want["k8s.io/klog/v2"], want["sigs.k8s.io/yaml"] = "v2.130.1", "v1.6.0"
	for m, v := range want {
		if bin.Modules[m] != v {
			t.Errorf("after useKubernetesRelease, Modules[%s] = %q, want %q", m, bin.Modules[m], v)
		}
	}

	for _, c := range []struct{ ldflags, want string }{
		{"-X k8s.io/client-go/pkg/version.gitVersion=v1.37.2", "v0.37.2"},
		{"-X k8s.io/component-base/version.gitVersion=v1.37.0-alpha.1", "v0.37.0"},
		{"-X 'k8s.io/component-base/version.gitVersion=v1.37.2+k3s1' -s", "v0.37.2"},
		{"-X main.version=v1.2.3", ""},
		{"", ""},
	} {
		if got := stagingVersion(c.ldflags); got != c.want {
			t.Errorf("stagingVersion(%q) = %q, want %q", c.ldflags, got, c.want)
		}
	}
}
