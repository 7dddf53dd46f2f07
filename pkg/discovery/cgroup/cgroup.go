// Package cgroup reads what a process's cgroup file says about the container it runs in:
// runtime, container ID and pod UID, for cgroup v1 and v2, the cgroupfs and systemd drivers,
// containerd, CRI-O, Docker and Podman. Pure, with no dependency beyond the standard library:
// its fuzz target builds without Kubernetes' client libraries.
package cgroup

import (
	"bytes"
	"strings"
)

// Container runtimes, named as the kubelet prefixes container IDs in pod status
// ("containerd://…", "cri-o://…", "docker://…").
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimeDocker     = "docker"
	RuntimePodman     = "podman"
)

// Container is what a cgroup path says about the container a process runs in.
type Container struct {
	// Runtime is one of the Runtime constants, or "" when the path gives only the ID: the
	// cgroupfs driver's "/kubepods/…/pod<uid>/<id>" is written alike by containerd and by
	// Docker through cri-dockerd. The pod's status in the API server names the runtime.
	Runtime string
	// ID is the full container ID: 64 lowercase hex digits, as in pod status without the
	// "<runtime>://" prefix.
	ID string
	// PodUID is the UID of the pod the container belongs to, with dashes
	// ("5c8a1e9b-7f2d-4c1a-9e3b-1d2f3a4b5c6d"; static pods have 32 hex digits), or "" when the
	// path names no pod.
	PodUID string
}

// ContainerID returns the runtime and container ID named by the content of a /proc/PID/cgroup
// file, and whether one was found. See [Parse] for the formats.
func ContainerID(cgroupFileContent []byte) (runtime, id string, ok bool) {
	c, ok := Parse(cgroupFileContent)
	return c.Runtime, c.ID, ok
}

// Parse reads the content of a /proc/PID/cgroup file (cgroup v1: one
// "hierarchy:controllers:path" line per hierarchy; v2: the single line "0::path") and returns
// the container named by the first line whose path names one, with the pod UID when the path
// has one. ok is false when no line names a container; PodUID may still be set.
//
// Path forms understood, searched from the innermost path element outwards (so a container
// nested in another, as in kind, yields the inner one):
//
//	/kubepods/burstable/pod<uid>/<64hex>                        cgroupfs driver (containerd, cri-dockerd)
//	/kubepods.slice/…/kubepods-burstable-pod<uid_>.slice/cri-containerd-<64hex>.scope
//	/kubepods.slice/…/kubepods-besteffort-pod<uid_>.slice/crio-<64hex>.scope
//	/kubepods.slice/…/kubepods-pod<uid_>.slice/docker-<64hex>.scope
//	/system.slice/containerd.service/kubepods-burstable-pod<uid_>.slice:cri-containerd:<64hex>
//	/kubepods/burstable/pod<uid>/crio-<64hex>                   CRI-O, cgroupfs driver
//	/docker/<64hex>, /system.slice/docker-<64hex>.scope          plain Docker
//	/machine.slice/libpod-<64hex>.scope                         Podman
//
// where <uid_> is the pod UID with '_' for '-' (systemd reserves '-'). Paths relative to the
// reader's cgroup namespace ("/../../kubepods-….slice/…") work too. The monitor processes
// "crio-conmon-<id>.scope" and "libpod-conmon-<id>.scope" are not containers.
// Parse never panics, whatever its input.
func Parse(cgroupFileContent []byte) (Container, bool) {
	var podUID string
	for len(cgroupFileContent) > 0 {
		var line []byte
		if i := bytes.IndexByte(cgroupFileContent, '\n'); i >= 0 {
			line, cgroupFileContent = cgroupFileContent[:i], cgroupFileContent[i+1:]
		} else {
			line, cgroupFileContent = cgroupFileContent, nil
		}
		// hierarchy-ID:controller-list:cgroup-path; the path may itself hold ':'.
		parts := strings.SplitN(string(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		c, ok := parseCgroupPath(parts[2])
		if ok {
			return c, true
		}
		if podUID == "" {
			podUID = c.PodUID
		}
	}
	return Container{PodUID: podUID}, false
}

// parseCgroupPath finds the innermost container in one cgroup path, and the pod around it.
func parseCgroupPath(path string) (Container, bool) {
	elems := strings.Split(path, "/")
	for i := len(elems) - 1; i >= 0; i-- {
		c, ok := containerFromElem(elems[i], elems[:i])
		if !ok {
			continue
		}
		if c.PodUID == "" {
			c.PodUID = podUIDFromPath(elems[:i])
		}
		return c, true
	}
	return Container{PodUID: podUIDFromPath(elems)}, false
}

// containerFromElem reads a container from one path element; parents are the elements
// before it.
func containerFromElem(elem string, parents []string) (Container, bool) {
	// containerd's systemd cgroup driver on some setups: "<pod slice>:cri-containerd:<id>".
	if parts := strings.Split(elem, ":"); len(parts) == 3 {
		rt, ok := runtimeOfPrefix(parts[1])
		if !ok || !isContainerID(parts[2]) {
			return Container{}, false
		}
		return Container{Runtime: rt, ID: parts[2], PodUID: podUIDFromElem(parts[0])}, true
	}
	if isContainerID(elem) {
		rt := ""
		if len(parents) > 0 && parents[len(parents)-1] == "docker" {
			rt = RuntimeDocker
		}
		return Container{Runtime: rt, ID: elem}, true
	}
	name := strings.TrimSuffix(elem, ".scope")
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return Container{}, false
	}
	rt, ok := runtimeOfPrefix(name[:i])
	if !ok || !isContainerID(name[i+1:]) {
		return Container{}, false
	}
	return Container{Runtime: rt, ID: name[i+1:]}, true
}

// runtimeOfPrefix names the runtime that writes prefix before a container ID. Monitor
// prefixes ("crio-conmon", "libpod-conmon") are no runtime.
func runtimeOfPrefix(prefix string) (string, bool) {
	switch prefix {
	case "cri-containerd":
		return RuntimeContainerd, true
	case "crio":
		return RuntimeCRIO, true
	case "docker":
		return RuntimeDocker, true
	case "libpod":
		return RuntimePodman, true
	}
	return "", false
}

// podUIDFromPath returns the pod UID of the innermost pod element of elems, or "".
func podUIDFromPath(elems []string) string {
	for i := len(elems) - 1; i >= 0; i-- {
		if uid := podUIDFromElem(elems[i]); uid != "" {
			return uid
		}
	}
	return ""
}

// podUIDFromElem reads a pod UID from "pod<uid>" (cgroupfs) or
// "[kubelet-]kubepods[-<qos>]-pod<uid_>.slice" (systemd).
func podUIDFromElem(elem string) string {
	if strings.HasSuffix(elem, ".slice") {
		if !strings.Contains(elem, "kubepods") {
			return ""
		}
		name := strings.TrimSuffix(elem, ".slice")
		i := strings.LastIndex(name, "-pod")
		if i < 0 {
			return ""
		}
		uid := strings.ReplaceAll(name[i+len("-pod"):], "_", "-")
		if !isPodUID(uid) {
			return ""
		}
		return uid
	}
	if uid, ok := strings.CutPrefix(elem, "pod"); ok && isPodUID(uid) {
		return uid
	}
	return ""
}

// isContainerID reports whether s is 64 lowercase hex digits.
func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerHex(s[i]) {
			return false
		}
	}
	return true
}

// isPodUID reports whether s looks like a pod UID: an RFC 4122 UUID with dashes, or the 32
// hex digits of a static pod's UID (a hash of its manifest).
func isPodUID(s string) bool {
	switch len(s) {
	case 32:
		for i := 0; i < len(s); i++ {
			if !isLowerHex(s[i]) {
				return false
			}
		}
		return true
	case 36:
		for i := 0; i < len(s); i++ {
			switch i {
			case 8, 13, 18, 23:
				if s[i] != '-' {
					return false
				}
			default:
				if !isLowerHex(s[i]) {
					return false
				}
			}
		}
		return true
	}
	return false
}

func isLowerHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
}
