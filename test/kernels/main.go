// Command kernels (`make kernels`) boots Debian's kernels under qemu and runs reconscope's
// guest tests (test/kernels/guest) inside each, one kernel after the other:
//
//  1. fetches the kernel package (Debian's cloud flavour, the newest build of the series) and
//     busybox-static for the kernel's architecture with apt-get download, unpacks them with
//     dpkg-deb (nothing is installed) and caches them by version under
//     ${RECONSCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reconscope}/kernels;
//  2. cross-builds the guest test binary (go test -c) and the programs it traces (fakectl plain
//     and stripped, hitloop) for that architecture;
//  3. packs them with busybox into an initramfs whose /init mounts proc, sysfs, devtmpfs and
//     a tmpfs, runs the tests and powers off;
//  4. boots it with qemu-system-x86_64 or qemu-system-aarch64 (-M virt -cpu max), the serial
//     console written to a file, under the accelerator -accel chooses (accel.go): auto tries
//     KVM where /dev/kvm exists and the guest is the host's architecture, and boots the guest
//     again under TCG when a KVM guest prints nothing within -kvm-bound (hosts exist whose
//     /dev/kvm runs no guest); a guest that prints nothing for -silent, or nothing new for
//     -stall, is stopped early with the console's last bytes;
//  5. reads the tests' result line from the console and, with -doc, rewrites the kernels
//     table of docs/compatibility.md (between <!-- kernels:begin --> and <!-- kernels:end -->),
//     keeping the rows of kernels not run this time.
//
// It needs root for apt-get (arm64 also needs `dpkg --add-architecture arm64`, which it does)
// and qemu-system-x86 / qemu-system-arm installed.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/reconscope/reconscope/test/kernels/guest"
)

// A kernel is one cell of the matrix: a Debian kernel series on an architecture.
type kernel struct {
	Series string // "6.1", "6.12"
	Arch   string // Debian and Go architecture: "amd64", "arm64"
}

func (k kernel) String() string { return k.Series + "-" + k.Arch }

// pkgPattern matches the kernel packages of the series (Debian's cloud flavour, unsigned:
// vmlinuz as built), e.g. linux-image-6.1.0-57-cloud-amd64-unsigned or
// linux-image-6.12.117+deb12-cloud-arm64-unsigned.
func (k kernel) pkgPattern() *regexp.Regexp {
	return regexp.MustCompile(`^linux-image-` + regexp.QuoteMeta(k.Series) + `[.][0-9]+[-+][a-z0-9.+-]*?-?cloud-` + k.Arch + `-unsigned$`)
}

var allKernels = "6.1-amd64,6.12-amd64,6.1-arm64,6.12-arm64"

func main() {
	list := flag.String("kernels", allKernels, "comma-separated kernels to boot: SERIES-ARCH (6.1-amd64, 6.12-amd64, 6.1-arm64, 6.12-arm64)")
	doc := flag.String("doc", "", "rewrite the kernels table of this Markdown file (docs/compatibility.md)")
	timeout := flag.Duration("timeout", 12*time.Minute, "stop a guest that runs longer than this")
	accel := flag.String("accel", accelAuto, "qemu's accelerator: auto (KVM where a guest is seen to print within -kvm-bound, else TCG), kvm or tcg")
	kvmDevice := flag.String("kvm-device", "/dev/kvm", "the KVM device whose presence makes auto try KVM")
	kvmBound := flag.Duration("kvm-bound", defaultKVMBound, "auto: a KVM guest that prints nothing this long is stopped and booted again under TCG")
	silent := flag.Duration("silent", defaultSilentBound, "stop a guest that prints nothing this long")
	stall := flag.Duration("stall", defaultStallBound, "stop a guest whose console stops growing this long")
	flag.Parse()
	q, err := newQemu(*accel, *kvmDevice)
	if err != nil {
		fail(err)
	}
	q.kvmBound, q.silentBound, q.stallBound = *kvmBound, *silent, *stall
	start := time.Now()
	cache := filepath.Join(cacheRoot(), "kernels")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		fail(err)
	}
	work, err := os.MkdirTemp("", "reconscope-kernels-")
	if err != nil {
		fail(err)
	}
	var results []result
	bad := 0
	for _, s := range strings.Split(*list, ",") {
		k, err := parseKernel(strings.TrimSpace(s))
		if err != nil {
			fail(err)
		}
		r := runKernel(q, k, cache, work, *timeout)
		results = append(results, r)
		if r.Err != "" || r.Report.Tests != "PASS" {
			bad++
		}
	}
	total := time.Since(start).Round(time.Second)
	fmt.Printf("\n== %d kernels in %s (%d failed)\n", len(results), total, bad)
	for _, r := range results {
		fmt.Println(r.summary())
	}
	if *doc != "" {
		if err := updateDoc(*doc, results); err != nil {
			fail(err)
		}
		fmt.Printf("wrote the kernels table of %s\n", *doc)
	}
	if bad == 0 {
		os.RemoveAll(work)
	} else {
		fmt.Printf("guest consoles kept in %s\n", work)
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "kernels: %v\n", err)
	os.Exit(1)
}

func parseKernel(s string) (kernel, error) {
	series, arch, ok := strings.Cut(s, "-")
	if !ok || (arch != "amd64" && arch != "arm64") || !regexp.MustCompile(`^[0-9]+\.[0-9]+$`).MatchString(series) {
		return kernel{}, fmt.Errorf("kernel %q: want SERIES-ARCH, e.g. 6.1-amd64 or 6.12-arm64", s)
	}
	return kernel{series, arch}, nil
}

func cacheRoot() string {
	if d := os.Getenv("RECONSCOPE_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "reconscope")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "reconscope")
}

// result is one kernel's run.
type result struct {
	Kernel   kernel
	Package  string // Debian package and version
	Report   guest.Report
	Boot     time.Duration // kernel start to /init, from the guest's uptime
	Guest    time.Duration // qemu's wall time
	Prepare  time.Duration // download, build, pack
	Err      string
	Console  string // path of the serial console log
	Accel    string
	Timeout  bool
	ExitCode int
}

func (r result) summary() string {
	if r.Err != "" {
		return fmt.Sprintf("%-11s FAIL %s (console: %s)", r.Kernel, r.Err, r.Console)
	}
	return fmt.Sprintf("%-11s %s  kernel %s, %s, tests %s, boot %s, guest %s, prepare %s",
		r.Kernel, r.Package, r.Report.Kernel, r.Report.Mode, r.Report.Tests, r.Boot.Round(100*time.Millisecond), r.Guest.Round(time.Second), r.Prepare.Round(time.Second))
}

func runKernel(q *qemu, k kernel, cache, work string, timeout time.Duration) (r result) {
	r.Kernel = k
	t0 := time.Now()
	fmt.Printf("\n== %s\n", k)
	step := func(err error, what string) bool {
		if err != nil {
			r.Err = fmt.Sprintf("%s: %v", what, err)
			return false
		}
		return true
	}
	if !step(ensureArch(k.Arch), "dpkg architecture") {
		return r
	}
	pkg, ver, err := newestPackage(k)
	if !step(err, "find the kernel package") {
		return r
	}
	r.Package = pkg + " " + ver
	vmlinuz, err := fetchKernel(cache, pkg, ver, k.Arch)
	if !step(err, "fetch the kernel") {
		return r
	}
	busybox, err := fetchBusybox(cache, k.Arch)
	if !step(err, "fetch busybox-static") {
		return r
	}
	bins, err := buildGuest(work, k.Arch)
	if !step(err, "build the guest programs") {
		return r
	}
	initrd := filepath.Join(work, k.String()+".cpio")
	if !step(packInitramfs(initrd, busybox, bins), "pack the initramfs") {
		return r
	}
	r.Prepare = time.Since(t0)
	r.Console = filepath.Join(work, k.String()+".console")
	t1 := time.Now()
	r.Accel, err = boot(q, k, vmlinuz, initrd, r.Console, timeout)
	r.Guest = time.Since(t1)
	if errors.Is(err, context.DeadlineExceeded) {
		r.Timeout = true
		err = fmt.Errorf("no power-off within %s", timeout)
	}
	if !step(err, "qemu") {
		return r
	}
	if !step(parseConsole(r.Console, &r), "read the console") {
		return r
	}
	fmt.Println(r.summary())
	return r
}

func run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ensureArch adds a foreign dpkg architecture (and updates the package lists) when needed.
func ensureArch(arch string) error {
	native, err := run("dpkg", "--print-architecture")
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(native)) == arch {
		return nil
	}
	foreign, err := run("dpkg", "--print-foreign-architectures")
	if err != nil {
		return err
	}
	for _, a := range strings.Fields(string(foreign)) {
		if a == arch {
			return nil
		}
	}
	fmt.Printf("adding dpkg architecture %s and updating the package lists\n", arch)
	if _, err := run("dpkg", "--add-architecture", arch); err != nil {
		return err
	}
	_, err = run("apt-get", "update", "-qq")
	return err
}

// buildGuest cross-builds the guest test binary and the programs it traces for arch (once
// per arch per run) and returns their paths by name.
func buildGuest(work, arch string) (map[string]string, error) {
	dir := filepath.Join(work, "bin-"+arch)
	out := map[string]string{}
	for _, name := range []string{"guest.test", "fakectl", "fakectl-stripped", "hitloop"} {
		out[name] = filepath.Join(dir, name)
	}
	if _, err := os.Stat(out["hitloop"]); err == nil {
		return out, nil
	}
	t := time.Now()
	builds := [][]string{
		{"test", "-c", "-o", out["guest.test"], "./test/kernels/guest"},
		{"build", "-o", out["fakectl"], "./test/fakectl"},
		{"build", "-ldflags=-s -w", "-o", out["fakectl-stripped"], "./test/fakectl"},
		{"build", "-o", out["hitloop"], "./test/kernels/hitloop"},
	}
	for _, args := range builds {
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	fmt.Printf("guest programs for %s built in %s\n", arch, time.Since(t).Round(100*time.Millisecond))
	return out, nil
}

// initScript is the guest's /init: mount what the tests need, run them, power off.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
echo "RECONSCOPE-BOOTED $(cut -d' ' -f1 /proc/uptime)"
cd /reconscope
RECONSCOPE_GUEST_BIN=/reconscope RECONSCOPE_REQUIRE_BPF=1 TMPDIR=/tmp HOME=/tmp ./guest.test -test.v -test.timeout 10m
echo "RECONSCOPE-EXIT $?"
poweroff -f
`

func packInitramfs(path, busybox string, bins map[string]string) error {
	files := map[string]cpioEntry{
		"bin":          {mode: sIFDIR | 0o755},
		"bin/busybox":  {mode: sIFREG | 0o755, from: busybox},
		"dev":          {mode: sIFDIR | 0o755},
		"dev/console":  {mode: sIFCHR | 0o600, major: 5, minor: 1},
		"proc":         {mode: sIFDIR | 0o755},
		"sys":          {mode: sIFDIR | 0o755},
		"tmp":          {mode: sIFDIR | 0o1777},
		"init":         {mode: sIFREG | 0o755, data: []byte(initScript)},
		"reconscope":   {mode: sIFDIR | 0o755},
		"etc":          {mode: sIFDIR | 0o755},
		"etc/hostname": {mode: sIFREG | 0o644, data: []byte("guest\n")},
	}
	for name, p := range bins {
		files["reconscope/"+name] = cpioEntry{mode: sIFREG | 0o755, from: p}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := writeCPIO(w, files); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// boot runs the guest until it powers off, under the accelerator q chooses; it returns the
// accelerator that ran it.
func boot(q *qemu, k kernel, vmlinuz, initrd, console string, timeout time.Duration) (string, error) {
	var bin, con string
	switch k.Arch {
	case "amd64":
		bin, con = "qemu-system-x86_64", "ttyS0"
	case "arm64":
		bin, con = "qemu-system-aarch64", "ttyAMA0"
	}
	args := func(accel string) []string {
		a := []string{"-accel", accel, "-smp", "2", "-m", "1536", "-nodefaults", "-no-reboot",
			"-display", "none", "-monitor", "none", "-serial", "file:" + console,
			"-kernel", vmlinuz, "-initrd", initrd}
		switch k.Arch {
		case "amd64":
			a = append(a, "-M", "q35", "-cpu", "max")
		case "arm64":
			cpu := "max"
			if accel == accelTCG {
				cpu = "max,pauth-impdef=on" // pointer authentication with a cheap algorithm: TCG runs faster
			}
			a = append(a, "-M", "virt", "-cpu", cpu)
		}
		return append(a, "-append", "console="+con+" panic=-1 oops=panic loglevel=4")
	}
	if _, err := exec.LookPath(bin); err != nil {
		pkg := map[string]string{"amd64": "qemu-system-x86", "arm64": "qemu-system-arm"}[k.Arch]
		fmt.Printf("installing %s\n", pkg)
		install := func() error {
			_, err := run("apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
			return err
		}
		err := install()
		if err != nil { // stale or missing package lists: update once and retry
			if _, uerr := run("apt-get", "update", "-qq"); uerr == nil {
				err = install()
			}
		}
		if err != nil {
			return "", fmt.Errorf("%s is missing and could not be installed (apt-get install %s): %v", bin, pkg, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return q.run(ctx, k.Arch, bin, args, console)
}

// parseConsole reads the guest's boot time, exit code and Report from its console log.
func parseConsole(path string, r *result) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	gotReport, gotExit := false, false
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimRight(l, "\r")
		switch {
		case strings.HasPrefix(l, "RECONSCOPE-BOOTED "):
			if s, err := strconv.ParseFloat(strings.TrimPrefix(l, "RECONSCOPE-BOOTED "), 64); err == nil {
				r.Boot = time.Duration(s * float64(time.Second))
			}
		case strings.HasPrefix(l, guest.ResultPrefix):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(l, guest.ResultPrefix)), &r.Report); err != nil {
				return fmt.Errorf("result line: %v", err)
			}
			gotReport = true
		case strings.HasPrefix(l, "RECONSCOPE-EXIT "):
			r.ExitCode, _ = strconv.Atoi(strings.TrimPrefix(l, "RECONSCOPE-EXIT "))
			gotExit = true
		case strings.HasPrefix(l, "--- FAIL") || strings.HasPrefix(l, "    ") && strings.Contains(l, "_test.go:"):
			fmt.Println("  guest:", l)
		}
	}
	if !gotReport || !gotExit {
		tail := string(b)
		if len(tail) > 3000 {
			tail = tail[len(tail)-3000:]
		}
		return fmt.Errorf("the guest printed no result (report %v, exit %v); console tail:\n%s", gotReport, gotExit, tail)
	}
	if r.ExitCode != 0 && r.Report.Tests == "PASS" {
		r.Report.Tests = "FAIL"
	}
	return nil
}
