package agent

import (
	"testing"

	"github.com/reconscope/reconscope/pkg/discovery"
)

// TestProcessMetaServiceVersionAndContainer: service.version is the pod's
// resource.opentelemetry.io/service.version annotation, else its app.kubernetes.io/version
// label; container.id is the container of the process's cgroup path, known without the pod
// too.
func TestProcessMetaServiceVersionAndContainer(t *testing.T) {
	c := discovery.Container{Runtime: "containerd", ID: "3f1c9a0d5e7b", PodUID: "0f6c1a52-8a7e-4a43-9b8e-6a0d6f1f3d2b"}
	pod := &discovery.PodInfo{Namespace: "shop", Name: "widget-7c9f8d-abcde", UID: c.PodUID, Container: "manager",
		Labels: map[string]string{"app.kubernetes.io/version": "v2.3.1"}}
	if w := processMeta(pod, c).Workload; w == nil || w.ServiceVersion != "v2.3.1" || w.ContainerID != c.ID || w.PodUID != c.PodUID {
		t.Errorf("from the label: %+v", w)
	}
	pod.Annotations = map[string]string{discovery.ResourceAnnotationPrefix + "service.version": "2026.12-rc1"}
	if w := processMeta(pod, c).Workload; w == nil || w.ServiceVersion != "2026.12-rc1" || w.Attributes["service.version"] != "" {
		t.Errorf("the annotation wins, and is not repeated as another attribute: %+v", w)
	}
	if w := processMeta(nil, c).Workload; w == nil || w.ContainerID != c.ID || w.PodUID != c.PodUID || w.ServiceVersion != "" {
		t.Errorf("no pod known: %+v, want the cgroup's pod UID and container ID", w)
	}
	if m := processMeta(nil, discovery.Container{}); m.Workload != nil {
		t.Errorf("outside a container: %+v, want no workload", m.Workload)
	}
}

// TestProcessMetaServiceVersionFromImage: with neither annotation nor label, service.version
// comes from the container's image reference as OpenTelemetry's Kubernetes conventions say:
// <tag>@<digest>, else the digest, else the tag; none from an image with neither.
func TestProcessMetaServiceVersionFromImage(t *testing.T) {
	const digest = "sha256:4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a"
	for image, want := range map[string]string{
		"ghcr.io/acme/widget-operator:v2.3.1":                "v2.3.1",
		"ghcr.io/acme/widget-operator:v2.3.1@" + digest:      "v2.3.1@" + digest,
		"registry.local:5000/acme/widget-operator@" + digest: digest,
		"registry.local:5000/acme/widget-operator":           "",
		"widget-operator": "",
		"registry.local:5000/acme/widget-operator:2026.12-rc": "2026.12-rc",
	} {
		pod := &discovery.PodInfo{Namespace: "shop", Name: "widget", Container: "manager", Image: image}
		if got := processMeta(pod, discovery.Container{}).Workload.ServiceVersion; got != want {
			t.Errorf("image %s: service.version %q, want %q", image, got, want)
		}
	}
}
