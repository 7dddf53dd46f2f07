package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// standIn is a shell script standing in for qemu-system-*: it finds -accel and the console
// (-serial file:PATH) in its arguments and then does what body says with $accel and $console.
func standIn(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
accel= console=
while [ $# -gt 0 ]; do
  case "$1" in
    -accel) accel=$2; shift ;;
    -serial) console=${2#file:}; shift ;;
  esac
  shift
done
echo "$accel" >>"$(dirname "$0")/accels"
` + body + "\n"
	for _, name := range []string{"qemu-system-x86_64", "qemu-system-aarch64"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

// The stand-ins' behaviours.
const (
	boots     = `printf 'RECONSCOPE-BOOTED 1.5\nRECONSCOPE-EXIT 0\n' >"$console"; exit 0`
	kvmHangs  = `[ "$accel" = kvm ] && exec sleep 600` // a /dev/kvm whose guests never print
	kvmFails  = `[ "$accel" = kvm ] && { echo "qemu-system-x86_64: failed to initialize kvm: Permission denied" >&2; exit 1; }`
	hangs     = `exec sleep 600` // prints nothing under any accelerator
	stalls    = `printf 'Linux version 6.1.0\nRun /init as init process\n' >"$console"; exec sleep 600`
	crashes   = `printf 'Kernel panic - not syncing: VFS\n' >"$console"; exit 1`
	kvmDevice = "kvm"
)

// testQemu is a qemu runner with short bounds; withKVM makes its KVM device exist.
func testQemu(t *testing.T, accel string, withKVM bool) (*qemu, *bytes.Buffer) {
	t.Helper()
	dev := filepath.Join(t.TempDir(), kvmDevice)
	if withKVM {
		if err := os.WriteFile(dev, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	q, err := newQemu(accel, dev)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	q.log = &log
	q.kvmBound, q.silentBound, q.stallBound = 1*time.Second, 2*time.Second, 2*time.Second
	return q, &log
}

// bootStandIn boots a guest of the host's architecture with the stand-in on PATH.
func bootStandIn(t *testing.T, q *qemu) (string, string, error) {
	t.Helper()
	console := filepath.Join(t.TempDir(), "console")
	accel, err := boot(q, kernel{"6.1", runtime.GOARCH}, "vmlinuz", "initrd", console, time.Minute)
	b, _ := os.ReadFile(console)
	return accel, string(b), err
}

func accelsTried(t *testing.T, dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "accels"))
	return strings.Join(strings.Fields(string(b)), ",")
}

func TestAccelChoice(t *testing.T) {
	for _, c := range []struct {
		name      string
		accel     string
		kvm       bool   // the KVM device exists
		stand     string // the stand-in's behaviour
		wantAccel string // the accelerator that ran the guest
		wantTried string // the accelerators qemu was started with, in order
		wantErr   string // a substring of the error; "" for success
		wantLog   string // a substring of the log; "" for no fallback line
	}{
		{"no kvm device: tcg", accelAuto, false, boots, accelTCG, "tcg", "", ""},
		{"kvm boots: kvm", accelAuto, true, boots, accelKVM, "kvm", "", ""},
		{"kvm hangs: falls back to tcg", accelAuto, true, kvmHangs + "\n" + boots, accelTCG, "kvm,tcg", "", "printed nothing in 1s"},
		{"kvm fails at once: falls back to tcg", accelAuto, true, kvmFails + "\n" + boots, accelTCG, "kvm,tcg", "", "failed to initialize kvm"},
		{"tcg chosen: kvm never tried", accelTCG, true, kvmHangs + "\n" + boots, accelTCG, "tcg", "", ""},
		{"kvm chosen and hangs: error", accelKVM, true, kvmHangs + "\n" + boots, accelKVM, "kvm", "printed nothing for 2s under kvm", ""},
		{"kvm chosen without a device: error", accelKVM, false, boots, accelKVM, "", "KVM cannot run this guest: no ", ""},
		{"silent under tcg: stopped early", accelAuto, false, hangs, accelTCG, "tcg", "printed nothing for 2s under tcg and was stopped; the console is empty", ""},
		{"stalls: stopped with the console's tail", accelTCG, false, stalls, accelTCG, "tcg", "printed nothing new for 2s under tcg and was stopped; the console's last bytes:\nLinux version 6.1.0\nRun /init", ""},
		{"kvm guest printed then crashed: no fallback", accelAuto, true, crashes, accelKVM, "kvm", "Kernel panic", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := standIn(t, c.stand)
			q, log := testQemu(t, c.accel, c.kvm)
			accel, console, err := bootStandIn(t, q) // within boot's 1-minute timeout: the stand-ins sleep 600 s
			if accel != c.wantAccel {
				t.Errorf("accelerator %q, want %q", accel, c.wantAccel)
			}
			if got := accelsTried(t, dir); got != c.wantTried {
				t.Errorf("qemu started with %q, want %q", got, c.wantTried)
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("error %v, want one containing %q", err, c.wantErr)
			}
			if c.wantErr == "" && !strings.Contains(console, "RECONSCOPE-EXIT 0") {
				t.Errorf("the console of the guest that ran lacks its exit line: %q", console)
			}
			switch {
			case c.wantLog == "" && strings.Contains(log.String(), "using TCG"):
				t.Errorf("unexpected fallback: %s", log)
			case c.wantLog != "" && (!strings.Contains(log.String(), c.wantLog) || strings.Count(log.String(), "using TCG") != 1):
				t.Errorf("log %q lacks one fallback line with %q", log, c.wantLog)
			}
		})
	}
}

// TestAccelGivenUpOnce: once KVM printed nothing, the next guest of the run goes to TCG
// without waiting for KVM again.
func TestAccelGivenUpOnce(t *testing.T) {
	dir := standIn(t, kvmHangs+"\n"+boots)
	q, log := testQemu(t, accelAuto, true)
	for i := 0; i < 2; i++ {
		if accel, _, err := bootStandIn(t, q); err != nil || accel != accelTCG {
			t.Fatalf("guest %d: %s, %v", i, accel, err)
		}
	}
	if got := accelsTried(t, dir); got != "kvm,tcg,tcg" {
		t.Errorf("qemu started with %q, want kvm,tcg,tcg", got)
	}
	if n := strings.Count(log.String(), "using TCG"); n != 1 {
		t.Errorf("%d fallback lines, want 1: %s", n, log)
	}
}

func TestAccelFlag(t *testing.T) {
	if _, err := newQemu("hvf", "/dev/kvm"); err == nil || !strings.Contains(err.Error(), "want auto, kvm or tcg") {
		t.Errorf("newQemu(hvf): %v", err)
	}
}
