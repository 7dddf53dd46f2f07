package collector

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// capNames are the capabilities permission errors name (numbers from golang.org/x/sys/unix).
var capNames = map[int]string{
	unix.CAP_DAC_READ_SEARCH: "CAP_DAC_READ_SEARCH",
	unix.CAP_SYS_PTRACE:      "CAP_SYS_PTRACE",
	unix.CAP_SYS_ADMIN:       "CAP_SYS_ADMIN",
	unix.CAP_SYS_RESOURCE:    "CAP_SYS_RESOURCE",
	unix.CAP_PERFMON:         "CAP_PERFMON",
	unix.CAP_BPF:             "CAP_BPF",
}

// effectiveCaps returns this process's effective capability set, from /proc/self/status.
func effectiveCaps() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	return parseCapEff(b)
}

// parseCapEff reads the CapEff line of a /proc/PID/status file.
func parseCapEff(status []byte) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps, err == nil
		}
	}
	return 0, false
}

// missingCaps names the capabilities of want that the effective set eff lacks. CAP_SYS_ADMIN
// stands in for CAP_BPF and CAP_PERFMON, as the kernel allows (and older kernels require).
func missingCaps(eff uint64, want ...int) []string {
	var out []string
	for _, c := range want {
		if eff&(1<<c) != 0 || (c == unix.CAP_BPF || c == unix.CAP_PERFMON) && eff&(1<<unix.CAP_SYS_ADMIN) != 0 {
			continue
		}
		out = append(out, capNames[c])
	}
	return out
}

// permission wraps a permission error in ErrPermission and names the capabilities among need
// that this process's effective set lacks, so the message says exactly what to add.
func permission(err error, need ...int) error {
	eff, known := effectiveCaps()
	return permissionError(err, eff, known, need...)
}

// permissionError is permission for the effective set eff (known: it could be read).
func permissionError(err error, eff uint64, known bool, need ...int) error {
	if !errors.Is(err, os.ErrPermission) && !errors.Is(err, unix.EPERM) {
		return err
	}
	if known {
		if miss := missingCaps(eff, need...); len(miss) > 0 {
			return fmt.Errorf("missing %s: %w: %v", strings.Join(miss, " and "), ErrPermission, err)
		}
	}
	return fmt.Errorf("%w: %v", ErrPermission, err)
}

// memlockNeed is the capability to name when lifting the memlock limit failed: without
// CAP_BPF the kernel's way of accounting eBPF memory cannot even be probed (cilium/ebpf creates
// a map to find out); with it, the kernel is one before 5.11, which needs CAP_SYS_RESOURCE.
func memlockNeed() int {
	eff, known := effectiveCaps()
	return memlockNeedOf(eff, known)
}

func memlockNeedOf(eff uint64, known bool) int {
	if known && len(missingCaps(eff, unix.CAP_BPF)) > 0 {
		return unix.CAP_BPF
	}
	return unix.CAP_SYS_RESOURCE
}
