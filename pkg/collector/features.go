package collector

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	rbpf "github.com/reconscope/reconscope/bpf"
)

// ErrBelowFloor means the kernel lacks a feature reconscope cannot work without. Its message
// names the feature and the Linux release it exists from, in one line.
var ErrBelowFloor = errors.New("kernel below reconscope's floor")

// MinKernel is the oldest Linux release with every feature reconscope requires (attach
// cookies on uprobes came last).
const MinKernel = "5.15"

// PretendMissingEnv names features (comma-separated keys, e.g. "uprobe_multi,cookie") that
// ProbeFeatures reports as missing whatever the kernel has: the tests force each fallback and
// each refusal with it. Not for production use.
const PretendMissingEnv = "RECONSCOPE_PRETEND_MISSING"

// Feature is one kernel feature the agent uses, and whether this kernel has it.
type Feature struct {
	Key      string // short name, as PretendMissingEnv takes it
	Name     string // what it is, for a person
	Since    string // the Linux release it exists from
	Required bool   // false: the agent falls back (Fallback says how)
	Fallback string // what the agent does without it
	// Err is nil when the kernel has the feature; it wraps ebpf.ErrNotSupported when the
	// kernel lacks it; any other error means the probe itself failed (privileges, say).
	Err error
}

// Missing reports whether the kernel lacks the feature (the probe could tell).
func (f Feature) Missing() bool { return errors.Is(f.Err, ebpf.ErrNotSupported) }

// Features is what ProbeFeatures found.
type Features []Feature

// Get returns the feature with key k.
func (fs Features) Get(k string) Feature {
	for _, f := range fs {
		if f.Key == k {
			return f
		}
	}
	return Feature{Key: k, Err: fmt.Errorf("unknown feature %q", k)}
}

// Has reports whether the kernel has the feature with key k. A probe that failed for another
// reason than a missing feature counts as present: loading the programs will then say why.
func (fs Features) Has(k string) bool { return !fs.Get(k).Missing() }

// Floor returns nil when every required feature is there, else one line wrapping
// ErrBelowFloor that names each missing feature and the release it exists from.
func (fs Features) Floor() error {
	var miss []string
	for _, f := range fs {
		if f.Required && f.Missing() {
			miss = append(miss, fmt.Sprintf("%s (Linux %s+)", f.Name, f.Since))
		}
	}
	if len(miss) == 0 {
		return nil
	}
	return fmt.Errorf("%w: this kernel (%s) lacks %s; reconscope needs Linux %s or later", ErrBelowFloor, kernelRelease(), strings.Join(miss, ", "), MinKernel)
}

// ProbeFeatures asks the kernel, with small test programs and maps (cilium/ebpf's features
// package), for each feature reconscope uses. It needs the privileges loading does; the
// results are cached for the process's life by cilium/ebpf.
func ProbeFeatures() Features {
	fs := Features{
		{Key: "uprobe_pmu", Name: "uprobes (the uprobe perf event source)", Since: "4.17", Required: true, Err: haveUprobePMU()},
		{Key: "probe_read_user", Name: "bpf_probe_read_user", Since: "5.5", Required: true, Err: features.HaveProgramHelper(ebpf.Kprobe, asm.FnProbeReadUser)},
		{Key: "ringbuf", Name: "the BPF ring buffer", Since: "5.8", Required: true, Err: features.HaveMapType(ebpf.RingBuf)},
		{Key: "cookie", Name: "attach cookies on uprobes (bpf_get_attach_cookie)", Since: "5.15", Required: true, Err: features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie)},
		{Key: "uprobe_multi", Name: "uprobe_multi links", Since: "6.6", Fallback: "one uprobe per site", Err: features.HaveBPFLinkUprobeMulti()},
		{Key: "raw_tracepoint", Name: "raw tracepoints (exec notifications)", Since: "4.17", Fallback: "new processes are found by the /proc scan only", Err: features.HaveProgramType(ebpf.RawTracepoint)},
		{Key: "btf", Name: "kernel BTF (/sys/kernel/btf/vmlinux)", Since: "5.4", Fallback: "none needed: reconscope's programs use no CO-RE relocations", Err: haveKernelBTF()},
	}
	pretend := map[string]bool{}
	for _, k := range strings.Split(os.Getenv(PretendMissingEnv), ",") {
		pretend[strings.TrimSpace(k)] = true
	}
	for i := range fs {
		if pretend[fs[i].Key] {
			fs[i].Err = fmt.Errorf("pretended missing (%s): %w", PretendMissingEnv, ebpf.ErrNotSupported)
		}
	}
	return fs
}

func haveUprobePMU() error {
	_, err := os.Stat("/sys/bus/event_source/devices/uprobe/type")
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no uprobe event source (CONFIG_UPROBE_EVENTS): %w", ebpf.ErrNotSupported)
	}
	return err
}

func haveKernelBTF() error {
	_, err := btf.LoadKernelSpec()
	if errors.Is(err, btf.ErrNotFound) {
		return fmt.Errorf("%v: %w", err, ebpf.ErrNotSupported)
	}
	return err
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown release"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// fallbacks adapts spec to the optional features the kernel lacks, saying each in one line.
func fallbacks(feats Features, spec *ebpf.CollectionSpec, opts Options) {
	if f := feats.Get("uprobe_multi"); f.Missing() && !opts.ForceSingleUprobes {
		opts.Logger.Info(fmt.Sprintf("this kernel has no %s (Linux %s+): attaching %s", f.Name, f.Since, f.Fallback))
	}
	if f := feats.Get("raw_tracepoint"); f.Missing() {
		delete(spec.Programs, rbpf.TraceProgOnExec) // WatchExecs then says exec notifications are off
	}
}

// verifierError is the one line a user reads when the kernel's verifier rejects a program;
// the verifier's log goes to the debug level.
func verifierError(log *slog.Logger, ve *ebpf.VerifierError) error {
	log.Debug("verifier log", "log", fmt.Sprintf("%+v", ve))
	return fmt.Errorf("load eBPF programs: this kernel's (%s) verifier rejected them (its log: --log-level debug); please report it with the kernel version: %v", kernelRelease(), ve)
}
