package cgroup

import (
	"strings"
	"testing"
)

const (
	cid1 = "3f1b9c2e7d4a5b6c8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d"
	cid2 = "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1"
	uid1 = "0c8e4f6a-2b1d-4e3f-9a8b-7c6d5e4f3a2b"
	// uid1 as systemd writes it in slice names.
	uid1Slice = "0c8e4f6a_2b1d_4e3f_9a8b_7c6d5e4f3a2b"
	// A static pod's UID is the hash of its manifest: 32 hex digits.
	staticUID = "6a9c8d1f5b3f4f7e8d9c0b1a2f3e4d5c"
)

// v1 is a cgroup v1 file: the same path in each hierarchy, as the kubelet writes it.
func v1(path string) string {
	var b strings.Builder
	for i, c := range []string{"blkio", "cpu,cpuacct", "devices", "freezer", "hugetlb", "memory", "net_cls,net_prio", "perf_event", "pids"} {
		b.WriteString(strings.Join([]string{itoa(12 - i), c, path}, ":") + "\n")
	}
	b.WriteString("1:name=systemd:" + path + "\n0::/\n")
	return b.String()
}

func itoa(i int) string {
	return string(rune('0'+i/10)) + string(rune('0'+i%10))
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Container
		ok   bool
	}{
		{
			name: "containerd cgroupfs v1 burstable",
			in:   v1("/kubepods/burstable/pod" + uid1 + "/" + cid1),
			want: Container{ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "containerd cgroupfs v1 guaranteed",
			in:   v1("/kubepods/pod" + uid1 + "/" + cid1),
			want: Container{ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "containerd cgroupfs v2 besteffort",
			in:   "0::/kubepods/besteffort/pod" + uid1 + "/" + cid1 + "\n",
			want: Container{ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "containerd systemd v2",
			in:   "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid1Slice + ".slice/cri-containerd-" + cid1 + ".scope\n",
			want: Container{Runtime: RuntimeContainerd, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "containerd systemd v2 guaranteed",
			in:   "0::/kubepods.slice/kubepods-pod" + uid1Slice + ".slice/cri-containerd-" + cid1 + ".scope\n",
			want: Container{Runtime: RuntimeContainerd, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "containerd systemd v1",
			in:   v1("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid1Slice + ".slice/cri-containerd-" + cid1 + ".scope"),
			want: Container{Runtime: RuntimeContainerd, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "containerd systemd driver under containerd.service",
			in:   v1("/system.slice/containerd.service/kubepods-burstable-pod" + uid1Slice + ".slice:cri-containerd:" + cid1),
			want: Container{Runtime: RuntimeContainerd, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "static pod",
			in:   "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-" + cid1 + ".scope\n",
			want: Container{Runtime: RuntimeContainerd, ID: cid1, PodUID: staticUID},
			ok:   true,
		},
		{
			name: "cri-o systemd v2",
			in:   "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid1Slice + ".slice/crio-" + cid1 + ".scope\n",
			want: Container{Runtime: RuntimeCRIO, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "cri-o cgroupfs",
			in:   "0::/kubepods/burstable/pod" + uid1 + "/crio-" + cid1 + "\n",
			want: Container{Runtime: RuntimeCRIO, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "cri-o conmon is not the container",
			in:   "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid1Slice + ".slice/crio-conmon-" + cid1 + ".scope\n",
			want: Container{PodUID: uid1},
			ok:   false,
		},
		{
			name: "docker systemd in kubernetes",
			in:   v1("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid1Slice + ".slice/docker-" + cid1 + ".scope"),
			want: Container{Runtime: RuntimeDocker, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "docker systemd standalone",
			in:   "0::/system.slice/docker-" + cid1 + ".scope\n",
			want: Container{Runtime: RuntimeDocker, ID: cid1},
			ok:   true,
		},
		{
			name: "docker cgroupfs v1",
			in:   v1("/docker/" + cid1),
			want: Container{Runtime: RuntimeDocker, ID: cid1},
			ok:   true,
		},
		{
			name: "podman",
			in:   "0::/machine.slice/libpod-" + cid1 + ".scope/container\n",
			want: Container{Runtime: RuntimePodman, ID: cid1},
			ok:   true,
		},
		{
			name: "podman conmon",
			in:   "0::/machine.slice/libpod-conmon-" + cid1 + ".scope\n",
			ok:   false,
		},
		{
			name: "kind: pod container inside a node container",
			in:   "0::/system.slice/docker-" + cid2 + ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uid1Slice + ".slice/cri-containerd-" + cid1 + ".scope\n",
			want: Container{Runtime: RuntimeContainerd, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "relative to the reader's cgroup namespace",
			in:   "0::/../../kubepods-besteffort-pod" + uid1Slice + ".slice/cri-containerd-" + cid1 + ".scope\n",
			want: Container{Runtime: RuntimeContainerd, ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "hybrid: v1 line names the container, unified line does not",
			in:   "0::/user.slice\n4:memory:/kubepods/burstable/pod" + uid1 + "/" + cid1 + "\n",
			want: Container{ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "pod sandbox level only",
			in:   "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid1Slice + ".slice\n",
			want: Container{PodUID: uid1},
			ok:   false,
		},
		{
			name: "host service",
			in:   "0::/system.slice/kubelet.service\n",
			ok:   false,
		},
		{
			name: "user session",
			in:   v1("/user.slice/user-1000.slice/session-3.scope"),
			ok:   false,
		},
		{name: "root", in: "0::/\n", ok: false},
		{name: "empty", in: "", ok: false},
		{name: "garbage", in: "not a cgroup file\x00\xff", ok: false},
		{
			name: "no trailing newline, CRLF-free",
			in:   "0::/kubepods/pod" + uid1 + "/" + cid1,
			want: Container{ID: cid1, PodUID: uid1},
			ok:   true,
		},
		{
			name: "uppercase hex is not an ID",
			in:   "0::/docker/" + strings.ToUpper(cid1) + "\n",
			ok:   false,
		},
		{
			name: "short ID is not an ID",
			in:   "0::/docker/" + cid1[:63] + "\n",
			ok:   false,
		},
		{
			name: "unknown runtime prefix",
			in:   "0::/kubepods.slice/kubepods-pod" + uid1Slice + ".slice/foo-" + cid1 + ".scope\n",
			want: Container{PodUID: uid1},
			ok:   false,
		},
		{
			name: "malformed pod UID ignored",
			in:   "0::/kubepods/burstable/podnot-a-uid/" + cid1 + "\n",
			want: Container{ID: cid1},
			ok:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Parse([]byte(tt.in))
			if ok != tt.ok || got != tt.want {
				t.Errorf("Parse() = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
			rt, id, ok := ContainerID([]byte(tt.in))
			if ok != tt.ok || rt != tt.want.Runtime || id != tt.want.ID {
				t.Errorf("ContainerID() = %q, %q, %v; want %q, %q, %v", rt, id, ok, tt.want.Runtime, tt.want.ID, tt.ok)
			}
		})
	}
}

func FuzzContainerID(f *testing.F) {
	for _, s := range []string{
		"0::/kubepods/burstable/pod" + uid1 + "/" + cid1 + "\n",
		"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid1Slice + ".slice/cri-containerd-" + cid1 + ".scope\n",
		"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid1Slice + ".slice/crio-" + cid1 + ".scope\n",
		"0::/system.slice/docker-" + cid1 + ".scope\n",
		v1("/docker/" + cid1),
		v1("/system.slice/containerd.service/kubepods-burstable-pod" + uid1Slice + ".slice:cri-containerd:" + cid1),
		"0::/../../kubepods-besteffort-pod" + uid1Slice + ".slice/cri-containerd-" + cid1 + ".scope\n",
		"0::/machine.slice/libpod-conmon-" + cid1 + ".scope\n",
		"0::/\n",
		"",
		":::\n::\n:",
		"0::/kubepods.slice/-pod.slice/-.scope",
		"0::/a:b:c/pod/-",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := Parse(b)
		rt, id, ok2 := ContainerID(b)
		if ok != ok2 || rt != c.Runtime || id != c.ID {
			t.Fatalf("ContainerID and Parse disagree: %q %q %v vs %+v %v", rt, id, ok2, c, ok)
		}
		if ok != (c.ID != "") {
			t.Fatalf("ok = %v with ID %q", ok, c.ID)
		}
		if ok && !isContainerID(c.ID) {
			t.Fatalf("ID %q is not 64 lowercase hex digits", c.ID)
		}
		switch c.Runtime {
		case "", RuntimeContainerd, RuntimeCRIO, RuntimeDocker, RuntimePodman:
		default:
			t.Fatalf("unknown runtime %q", c.Runtime)
		}
		if c.PodUID != "" && !isPodUID(c.PodUID) {
			t.Fatalf("pod UID %q is not a UID", c.PodUID)
		}
		if c.ID != "" && !strings.Contains(string(b), c.ID) {
			t.Fatalf("ID %q not in input", c.ID)
		}
	})
}
