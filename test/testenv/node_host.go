package testenv

// The host's side of a node: its network (an address plan, a bridge), and the host's mounts
// and cgroups as a node's teardown and its checks see them.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// nodeNetwork is a test bed's address plan: a service range whose first address is the
// kubernetes Service's ClusterIP, and a pod range on a bridge of its own. index keeps two test
// beds on one machine apart.
type nodeNetwork struct {
	index       int
	serviceCIDR *net.IPNet
	serviceIP   net.IP
	podCIDR     *net.IPNet
	gateway     net.IP // the bridge's address: the host as pods see it, and the node's IP
	bridge      string
}

// pickNodeNetwork picks an index whose bridge does not exist yet.
func pickNodeNetwork() (nodeNetwork, error) {
	for range 50 {
		n := nodeNetworkAt(1 + rand.IntN(250))
		if _, err := net.InterfaceByName(n.bridge); err != nil {
			return n, nil
		}
	}
	return nodeNetwork{}, errors.New("pick a node network: every bridge name tried is taken")
}

// nodeNetworkAt is the address plan of index i (1 to 250).
func nodeNetworkAt(i int) nodeNetwork {
	_, svc, _ := net.ParseCIDR(fmt.Sprintf("10.96.%d.0/24", i))
	_, pods, _ := net.ParseCIDR(fmt.Sprintf("10.244.%d.0/24", i))
	return nodeNetwork{
		index: i, serviceCIDR: svc, serviceIP: net.IPv4(10, 96, byte(i), 1).To4(),
		podCIDR: pods, gateway: net.IPv4(10, 244, byte(i), 1).To4(), bridge: fmt.Sprintf("rscope%d", i),
	}
}

// setUpNetwork creates the pod bridge with the gateway address (kubelet checks that the node IP
// is the host's) and, on the first node, the kubernetes Service's ClusterIP on it (an address
// of the host: pods of every node reach it through their own gateway).
func (n *Node) setUpNetwork() error {
	ones, _ := n.net.podCIDR.Mask.Size()
	cmds := [][]string{
		{"link", "add", "name", n.net.bridge, "type", "bridge"},
		{"addr", "add", fmt.Sprintf("%s/%d", n.net.gateway, ones), "dev", n.net.bridge},
	}
	if n.first {
		cmds = append(cmds, []string{"addr", "add", n.env.ServiceIP + "/32", "dev", n.net.bridge})
	}
	for _, args := range append(cmds, []string{"link", "set", n.net.bridge, "up"}) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// mount is one line of /proc/self/mountinfo: where, and the filesystem type.
type mount struct{ point, fsType string }

// mountTable lists this process's mounts, in mount order (none when mountinfo cannot be read).
func mountTable() []mount {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []mount
	for _, line := range strings.Split(string(data), "\n") {
		// ID parent major:minor root mount-point options [optional fields…] - type source …
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := mount{point: unescapeMount(f[4])}
		if sep := slices.Index(f[5:], "-"); sep >= 0 && 5+sep+1 < len(f) {
			m.fsType = f[5+sep+1]
		}
		out = append(out, m)
	}
	return out
}

// mountsUnder lists the mount points at or below dir, in mount order.
func mountsUnder(dir string) []string {
	var out []string
	for _, m := range mountTable() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupV1Root is where this machine mounts its cgroup v1 controllers.
const cgroupV1Root = "/sys/fs/cgroup"

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers and the cgroup2
// mount) under cgroupV1Root.
func cgroupHierarchies() []string {
	var out []string
	for _, m := range mountTable() {
		if (m.fsType == "cgroup" || m.fsType == "cgroup2") && strings.HasPrefix(m.point, cgroupV1Root+"/") {
			out = append(out, m.point)
		}
	}
	sort.Strings(out)
	return out
}

// makeCgroup creates the cgroup path in every hierarchy (kubelet wants its cgroup root to
// exist), with cpuset.cpus and cpuset.mems copied from the parent so processes may join it.
func makeCgroup(path string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("set %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// cgroupProcs lists the processes in path or below, in any hierarchy.
func cgroupProcs(path string) []int {
	seen := map[int]bool{}
	var out []int
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, path), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// removeCgroup removes path and every cgroup below it, deepest first, in every hierarchy.
func removeCgroup(path string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, path), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}
