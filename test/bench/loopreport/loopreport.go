// Package loopreport is the JSON line the benchmarks' traced process
// (test/bench/testdata/reconcileloop) prints at the end, in one place for the program that
// writes it and the benchmarks that read it (test/bench).
package loopreport

// Report is what reconcileloop measured of itself in one run.
type Report struct {
	Mode       string  `json:"mode"` // "loop", "paced" or "spawn"
	N          int     `json:"n"`    // reconciles (goroutines in spawn mode) that ran
	Workers    int     `json:"workers"`
	WallNs     int64   `json:"wall_ns"`
	CPUNs      int64   `json:"cpu_ns"` // the process's CPU time over the timed part (not in paced mode)
	WallPerRec float64 `json:"wall_ns_per_reconcile"`
	CPUPerRec  float64 `json:"cpu_ns_per_reconcile"`
	Rate       float64 `json:"reconciles_per_s"`
	Instrument bool    `json:"instrumented"` // built with -tags otel: every reconcile instrumented by hand
}

// Timed sets the wall and CPU time the N reconciles took, and the figures per reconcile and per
// second that follow from them.
func (r *Report) Timed(wallNs, cpuNs int64) {
	r.WallNs, r.CPUNs = wallNs, cpuNs
	r.WallPerRec = float64(wallNs) / float64(r.N)
	r.CPUPerRec = float64(cpuNs) / float64(r.N)
	r.Rate = float64(r.N) / (float64(wallNs) / 1e9)
}
