package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Accelerator choices for -accel (KERNELS_ACCEL in the Makefile).
const (
	accelAuto = "auto" // KVM where it is seen to boot a guest, else TCG
	accelKVM  = "kvm"  // KVM or fail
	accelTCG  = "tcg"  // qemu's emulated CPU, everywhere
)

// The bounds' defaults (-kvm-bound, -silent, -stall). A working KVM guest prints within a
// second; a TCG guest within seconds even on a loaded machine.
const (
	defaultKVMBound    = 20 * time.Second
	defaultSilentBound = 2 * time.Minute
	defaultStallBound  = 4 * time.Minute
)

// qemu boots guests with an accelerator chosen as -accel says. Some hosts expose a /dev/kvm
// whose guests never run (a nested kvm-pvm host logs "INTERNAL_ERROR in batch emul" and the
// guest prints nothing), so in auto mode KVM is kept only once a guest is seen to print: a
// KVM guest whose console stays empty for kvmBound is stopped and the same boot runs under TCG,
// and KVM is not tried again for that architecture in this run.
type qemu struct {
	accel       string        // accelAuto, accelKVM or accelTCG
	kvmDevice   string        // the KVM device; tests point it at a stand-in
	kvmBound    time.Duration // auto: how long a KVM guest may print nothing before TCG takes over
	silentBound time.Duration // any guest: how long it may print nothing before it is stopped
	stallBound  time.Duration // any guest: how long its console may stop growing before it is stopped
	log         io.Writer
	kvmGivenUp  map[string]string // architecture → why auto mode gave KVM up in this run
}

func newQemu(accel, kvmDevice string) (*qemu, error) {
	switch accel {
	case accelAuto, accelKVM, accelTCG:
	default:
		return nil, fmt.Errorf("-accel %q: want auto, kvm or tcg", accel)
	}
	return &qemu{accel: accel, kvmDevice: kvmDevice, kvmBound: defaultKVMBound,
		silentBound: defaultSilentBound, stallBound: defaultStallBound, log: os.Stdout,
		kvmGivenUp: map[string]string{}}, nil
}

// silentError is a guest stopped early because its console stayed empty or stopped growing.
type silentError struct {
	accel  string
	waited time.Duration
	what   string // "printed nothing", "printed nothing new"
	tail   string // the console's last bytes
	qemu   string // what qemu itself printed
}

func (e *silentError) Error() string {
	msg := fmt.Sprintf("the guest %s for %s under %s and was stopped", e.what, e.waited.Round(time.Second), e.accel)
	if e.tail == "" {
		msg += "; the console is empty"
	} else {
		msg += "; the console's last bytes:\n" + e.tail
	}
	if q := strings.TrimSpace(e.qemu); q != "" {
		msg += "\nqemu said: " + q
	}
	return msg
}

// exitError is qemu ending with an error; printed says whether the guest had written to its
// console first.
type exitError struct {
	accel   string
	err     error
	printed bool
	qemu    string
	tail    string // the console's last bytes
}

func (e *exitError) Error() string {
	msg := fmt.Sprintf("qemu under %s: %v", e.accel, e.err)
	if q := strings.TrimSpace(e.qemu); q != "" {
		msg += ": " + q
	}
	if e.tail != "" {
		msg += "; the console's last bytes:\n" + e.tail
	}
	return msg
}

// kvmUsable says whether KVM can be tried for arch, and why not.
func (q *qemu) kvmUsable(arch string) (bool, string) {
	if arch != runtime.GOARCH {
		return false, fmt.Sprintf("the guest is %s, the host %s", arch, runtime.GOARCH)
	}
	if _, err := os.Stat(q.kvmDevice); err != nil {
		return false, fmt.Sprintf("no %s", q.kvmDevice)
	}
	if why, ok := q.kvmGivenUp[arch]; ok {
		return false, why
	}
	return true, ""
}

// run boots one guest: bin with args (which must not name an accelerator), its serial
// console written to console. accelArgs gives the arguments that depend on the accelerator.
// It returns the accelerator that ran the guest.
func (q *qemu) run(ctx context.Context, arch, bin string, args func(accel string) []string, console string) (string, error) {
	if q.accel == accelTCG {
		return accelTCG, q.attempt(ctx, accelTCG, bin, args(accelTCG), console, q.silentBound)
	}
	ok, why := q.kvmUsable(arch)
	if q.accel == accelKVM {
		if !ok {
			return accelKVM, fmt.Errorf("-accel kvm: KVM cannot run this guest: %s", why)
		}
		return accelKVM, q.attempt(ctx, accelKVM, bin, args(accelKVM), console, q.silentBound)
	}
	if !ok {
		return accelTCG, q.attempt(ctx, accelTCG, bin, args(accelTCG), console, q.silentBound)
	}
	err := q.attempt(ctx, accelKVM, bin, args(accelKVM), console, q.kvmBound)
	var silent *silentError
	var exit *exitError
	switch {
	case err == nil:
		return accelKVM, nil
	case errors.As(err, &silent) && silent.tail == "":
		why = fmt.Sprintf("a KVM guest printed nothing in %s", silent.waited.Round(time.Second))
	case errors.As(err, &exit) && !exit.printed:
		why = fmt.Sprintf("qemu failed under KVM before the guest printed anything (%s)", firstLine(exit.qemu))
	default:
		return accelKVM, err // the guest ran under KVM and failed: a real failure
	}
	q.kvmGivenUp[arch] = why
	fmt.Fprintf(q.log, "%s exists but does not run guests here: %s; using TCG for %s guests (KERNELS_ACCEL=kvm|tcg chooses)\n", q.kvmDevice, why, arch)
	return accelTCG, q.attempt(ctx, accelTCG, bin, args(accelTCG), console, q.silentBound)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "no message"
	}
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// attempt runs qemu once until it exits, watching the console: a guest that prints nothing
// for silent, or stops printing for q.stallBound, is stopped with a *silentError; qemu ending
// with an error is an *exitError; ctx ending is ctx.Err().
func (q *qemu) attempt(ctx context.Context, accel, bin string, args []string, console string, silent time.Duration) error {
	os.Remove(console)
	fmt.Fprintf(q.log, "booting %s (%s)\n", bin, accel)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second // a child that keeps qemu's output open does not hold us
	if err := cmd.Start(); err != nil {
		return &exitError{accel: accel, err: err}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var size int64
	grew := start
	stop := func(what string, waited time.Duration) error {
		cmd.Process.Kill()
		<-done
		return &silentError{accel: accel, waited: waited, what: what, tail: consoleTail(console, 2000), qemu: out.String()}
	}
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				return &exitError{accel: accel, err: err, printed: consoleSize(console) > 0, qemu: out.String(), tail: consoleTail(console, 2000)}
			}
			if consoleSize(console) == 0 {
				return &exitError{accel: accel, err: errors.New("exited without the guest printing anything"), qemu: out.String()}
			}
			return nil
		case now := <-tick.C:
			if s := consoleSize(console); s != size {
				size, grew = s, now
			}
			switch {
			case size == 0 && now.Sub(start) >= silent:
				return stop("printed nothing", now.Sub(start))
			case size > 0 && now.Sub(grew) >= q.stallBound:
				return stop("printed nothing new", now.Sub(grew))
			}
		}
	}
}

func consoleSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func consoleTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
