// Package guest holds the privileged tests that `make kernels` (test/kernels) compiles with
// `go test -c`, cross-built for the guest's architecture, and runs as part of a virtual
// machine's init under qemu, one kernel at a time: the kernel's features and the floor, the
// programs load (verifier), the attach mode, exact spans of the fake controller (test/fakectl,
// plain and stripped, against its own ground truth: no API server runs in the guest), the cost
// of one probe hit on an entry site and on a RET, and exec notifications.
//
// In the guest the programs they trace are prebuilt (RECONSCOPE_GUEST_BIN names their folder:
// there is no Go toolchain inside); on a host the tests build them, so `go test` runs them on
// the host's kernel too. TestMain prints one line, "RECONSCOPE-RESULT {json}", with what was
// measured: test/kernels reads it from the serial console.
package guest

// BinEnv names the folder holding the prebuilt programs (fakectl, fakectl-stripped, hitloop).
const BinEnv = "RECONSCOPE_GUEST_BIN"

// ResultPrefix starts the line TestMain prints with the Report.
const ResultPrefix = "RECONSCOPE-RESULT "

// Report is what one kernel showed. test/kernels decodes it from the console.
type Report struct {
	Kernel   string            `json:"kernel"`
	Arch     string            `json:"arch"`
	Features map[string]string `json:"features"` // key → "yes", "no", or the probe's error
	Floor    string            `json:"floor"`    // "" when above it
	Load     string            `json:"load"`     // "ok" or the load error
	Mode     string            `json:"mode"`     // "uprobe_multi" or "single uprobes"
	// Traces: build name → what tracing the fake controller showed.
	Traces map[string]Trace `json:"traces"`
	// EntryInsn and RetInsn are the probed instructions; the costs are ns per hit (the
	// traced run's time per call minus the untraced one's, medians of 3 interleaved runs).
	EntryInsn   string  `json:"entry_insn"`
	RetInsn     string  `json:"ret_insn"`
	EntryHitNs  float64 `json:"entry_hit_ns"`
	RetHitNs    float64 `json:"ret_hit_ns"`
	BaseCallNs  float64 `json:"base_call_ns"`
	Execs       string  `json:"execs"`        // "n/m seen"
	Tests       string  `json:"tests"`        // PASS or FAIL
	FailedTests string  `json:"failed_tests"` // names
}

// Trace is one traced run of the fake controller.
type Trace struct {
	Mode       string `json:"mode"`
	Reconciles int    `json:"reconciles"`
	Exact      int    `json:"exact"`
	Spans      int    `json:"spans"`
	Lost       uint64 `json:"lost"`
}
