package main

import (
	"strings"

	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// processMeta is what the spans of a process say of its pod: pod may be nil (not known yet, or
// no API access); podUID is the pod UID from the process's cgroup path, "" outside a pod.
func processMeta(pod *discovery.PodInfo, podUID string) tracer.ProcessMeta {
	if pod == nil {
		if podUID == "" {
			return tracer.ProcessMeta{}
		}
		return tracer.ProcessMeta{Workload: &span.Workload{PodUID: podUID}}
	}
	w := &span.Workload{PodUID: pod.UID, Node: pod.Node}
	if w.PodUID == "" {
		w.PodUID = podUID
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
		default:
			if w.Attributes == nil {
				w.Attributes = map[string]string{}
			}
			w.Attributes[key] = v
		}
	}
	return tracer.ProcessMeta{Pod: pod.Namespace + "/" + pod.Name, Container: pod.Container, Workload: w}
}
