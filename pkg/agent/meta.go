package agent

import (
	"strings"

	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// processMeta is what the spans of a process say of its pod: pod may be nil (not known yet, or
// no API access); c is the container of the process's cgroup path (its pod UID and container
// ID), zero outside a container.
func processMeta(pod *discovery.PodInfo, c discovery.Container) tracer.ProcessMeta {
	if pod == nil {
		if c.PodUID == "" && c.ID == "" {
			return tracer.ProcessMeta{}
		}
		return tracer.ProcessMeta{Workload: &span.Workload{PodUID: c.PodUID, ContainerID: c.ID}}
	}
	w := &span.Workload{PodUID: pod.UID, Node: pod.Node, ContainerID: c.ID, ServiceVersion: pod.Labels["app.kubernetes.io/version"]}
	if w.ServiceVersion == "" {
		w.ServiceVersion = discovery.ImageVersion(pod.Image)
	}
	if w.PodUID == "" {
		w.PodUID = c.PodUID
	}
	w.Kind, w.Name, w.ReplicaSet = pod.Workload()
	w.ServiceName = pod.ServiceName(pod.Container)
	// service.namespace and service.instance.id: the annotations, else the pod's namespace
	// and <namespace>.<pod>.<container>, as OpenTelemetry's Kubernetes conventions say.
	w.ServiceNamespace = pod.Namespace
	if pod.Container != "" {
		w.ServiceInstanceID = pod.Namespace + "." + pod.Name + "." + pod.Container
	}
	for k, v := range pod.Annotations {
		key := strings.TrimPrefix(k, discovery.ResourceAnnotationPrefix)
		switch key {
		case "service.name":
		case "service.namespace":
			w.ServiceNamespace = v
		case "service.instance.id":
			w.ServiceInstanceID = v
		case "service.version":
			w.ServiceVersion = v
		default:
			if w.Attributes == nil {
				w.Attributes = map[string]string{}
			}
			w.Attributes[key] = v
		}
	}
	return tracer.ProcessMeta{Pod: pod.Namespace + "/" + pod.Name, Container: pod.Container, Workload: w}
}
