// Package scale measures what tracing costs a real controller under real load: the stripped
// kube-controller-manager (deployment and replicaset controllers) of the test bed, reconciling
// Deployments that are created, scaled and deleted in a loop, untraced and traced by
// reconscope-agent, side by side in one run. test/bench/run.sh (`make bench`) runs it and puts
// what it writes in BENCHMARKS.md (section 5); it is a benchmark, so `go test` without -bench
// does not run it:
//
//	go test -run '^$' -bench BenchmarkAtScale -benchtime 1x ./test/bench/scale
//
// RECONSCOPE_BENCH_SCALE_OUT names the Markdown file it writes (default: the test log only),
// RECONSCOPE_BENCH_VERDICTS the JSON-lines file its budget checks are appended to (the format of
// test/bench's Verdict), RECONSCOPE_BENCH_AGENT a built reconscope-agent (default: built here),
// RECONSCOPE_BENCH_SCALE_DEPLOYMENTS (500), _ROUNDS (2) and _IDLE (20s) the workload.
package scale
