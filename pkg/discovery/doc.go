// Package discovery decides which processes of a node the agent traces, and says where they
// run.
//
// It is a pipeline of small stages, each usable alone:
//
//   - [Scan] and [ReadProcess] read /proc (the root is a parameter, so tests use a fake tree):
//     PID, executable path, executable identity (device and inode, so one attach serves every
//     process of the same binary), comm, start time and the container ID from the cgroup file.
//   - [Watcher] rescans /proc at an interval and sends one [Started] per process and one
//     [Exited] when it is gone.
//   - [cgroup.Parse] and [cgroup.ContainerID] (package cgroup) turn a /proc/PID/cgroup file (cgroup v1 or v2;
//     containerd, CRI-O, Docker, Podman; cgroupfs or systemd drivers) into a container ID and
//     pod UID. Pure.
//   - [PodIndex] maps container IDs to pods (namespace, name, UID, container, labels) from a
//     client-go informer on the pods of this node only. It needs get/list/watch on pods and
//     nothing else; without API access the agent keeps working with host-only metadata.
//     [PodIndex.OtherNode] tells a process of a pod it does not hold: another node's, where
//     nodes share one kernel (kind), which that node's agent traces.
//   - [Filter] decides, from a [Config] (a YAML file read by [LoadConfig]), whether a process
//     is traced: include and exclude rules on namespace, pod labels, container name and
//     executable path. Pure.
//
// A caller joins them like this:
//
//	for ev := range watcher.Events() {
//		switch ev := ev.(type) {
//		case discovery.Started:
//			t := discovery.Target{Process: ev.Process}
//			if pod, ok := index.Lookup(ev.Process.Container.ID); ok {
//				t.Pod = &pod
//			} else if pod, ok := index.LookupPod(ev.Process.Container.PodUID); ok {
//				t.Pod = &pod // the kubelet has not written the container ID yet
//			} else if index.OtherNode(ev.Process.Container) {
//				continue // another node's pod: its agent traces it
//			}
//			if filter.Match(t) {
//				// attach
//			}
//		case discovery.Exited:
//			// detach ev.PID
//		}
//	}
package discovery
