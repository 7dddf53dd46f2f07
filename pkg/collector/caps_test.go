package collector

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCapEff(t *testing.T) {
	status := "Name:\treconscope-agent\nCapInh:\t0000000000000000\nCapPrm:\t000000c000080004\nCapEff:\t000000c000080004\nCapBnd:\t000000c000080004\n"
	eff, ok := parseCapEff([]byte(status))
	if !ok || eff != 0xc000080004 {
		t.Fatalf("CapEff %#x %v", eff, ok)
	}
	if _, ok := parseCapEff([]byte("Name:\tx\n")); ok {
		t.Error("a status without CapEff parsed")
	}
	if _, ok := parseCapEff([]byte("CapEff:\tzz\n")); ok {
		t.Error("a bad CapEff parsed")
	}
}

func TestMissingCaps(t *testing.T) {
	const daemonSet = 1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON | 1<<unix.CAP_SYS_PTRACE | 1<<unix.CAP_DAC_READ_SEARCH | 1<<unix.CAP_SYS_RESOURCE
	tests := []struct {
		eff  uint64
		want []string
	}{
		{daemonSet, nil},
		{daemonSet &^ (1 << unix.CAP_BPF), []string{"CAP_BPF"}},
		{daemonSet &^ (1 << unix.CAP_PERFMON), []string{"CAP_PERFMON"}},
		{daemonSet &^ (1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON), []string{"CAP_BPF", "CAP_PERFMON"}},
		{1 << unix.CAP_SYS_ADMIN, []string{"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}}, // SYS_ADMIN covers BPF and PERFMON
		{0, []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}},
	}
	for _, tc := range tests {
		got := missingCaps(tc.eff, unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("missingCaps(%#x) = %v, want %v", tc.eff, got, tc.want)
		}
	}
}

func TestPermission(t *testing.T) {
	const all = 1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON | 1<<unix.CAP_SYS_PTRACE | 1<<unix.CAP_DAC_READ_SEARCH | 1<<unix.CAP_SYS_RESOURCE
	plain := errors.New("map create: invalid argument")
	if got := permissionError(plain, 0, true, unix.CAP_BPF); got != plain {
		t.Errorf("a non-permission error was changed: %v", got)
	}
	cause := fmt.Errorf("load program: %w", unix.EPERM)
	tests := []struct {
		eff   uint64
		known bool
		want  string // prefix of the message
	}{
		{all &^ (1 << unix.CAP_PERFMON), true, "missing CAP_PERFMON: permission denied: "},
		{all &^ (1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON), true, "missing CAP_BPF and CAP_PERFMON: permission denied: "},
		{all, true, "permission denied: "}, // something else refused (seccomp, LSM): no name to give
		{0, false, "permission denied: "},  // capabilities unreadable
	}
	for _, tc := range tests {
		got := permissionError(cause, tc.eff, tc.known, unix.CAP_BPF, unix.CAP_PERFMON)
		if !errors.Is(got, ErrPermission) {
			t.Errorf("%#x: %v is not ErrPermission", tc.eff, got)
		}
		if !strings.HasPrefix(got.Error(), tc.want) || !strings.HasSuffix(got.Error(), cause.Error()) {
			t.Errorf("%#x: %q, want it to start with %q and end with the cause", tc.eff, got, tc.want)
		}
	}
	// Without CAP_BPF the memlock probe itself fails; with it, only SYS_RESOURCE can be missing.
	if got := memlockNeedOf(all&^(1<<unix.CAP_BPF), true); got != unix.CAP_BPF {
		t.Errorf("memlock without CAP_BPF: names %s", capNames[got])
	}
	if got := memlockNeedOf(all&^(1<<unix.CAP_SYS_RESOURCE), true); got != unix.CAP_SYS_RESOURCE {
		t.Errorf("memlock with CAP_BPF: names %s", capNames[got])
	}
}
