// Package scale measures what tracing costs real controllers under real load, untraced and
// traced by reconscope-agent (as users run it, with --goroutine-inheritance=off, and for
// kube-controller-manager with goroutine creation at the sites used before, newproc1's entry and
// RETs), side by side in one run: the stripped kube-controller-manager
// (deployment and replicaset controllers) of the test bed, reconciling Deployments that are
// created, scaled and deleted, and a controller-runtime manager hosting many controllers
// (test/fixtures/scripted-controller --controllers N), reconciling ConfigMaps that are created,
// updated and deleted. test/bench/run.sh (`make bench`) runs it and puts what it writes in
// BENCHMARKS.md (section 5); it is a benchmark, so `go test` without -bench does not run it:
//
//	go test -run '^$' -bench BenchmarkAtScale -benchtime 1x ./test/bench/scale
//
// RECONSCOPE_BENCH_SCALE_OUT names the Markdown file it writes (default: the test log only),
// RECONSCOPE_BENCH_VERDICTS the JSON-lines file its budget checks are appended to
// (test/bench/verdict), RECONSCOPE_BENCH_AGENT a built reconscope-agent (default: built here);
// RECONSCOPE_BENCH_SCALE_DEPLOYMENTS (500), _CONFIGMAPS (100), _CONTROLLERS (50), _ROUNDS (2)
// and _IDLE (20s) set the workloads; _ONLY (kcm or manager) runs one of them, _VARIANTS
// (untraced,auto,off,newproc1,reconcile,baseline: untraced, the agent's --detail when the variant
// sets one, else its --goroutine-inheritance) keeps only the variants named; _PPROF names a folder
// where each traced cycle's agent profiles go (CPU over the steps, heap and memory maps at the end);
// _BASELINE_AGENT names another reconscope-agent (an earlier build) that traces too, as users
// run it, in each round (the variant "baseline"): before and after, side by side.
//
// BenchmarkAgentMemory, apart, measures where the node agent's own memory goes (resident,
// anonymous and file-backed, its heap profile, its eBPF maps) for several agents side by side,
// `reconscope-agent run` tracing kube-controller-manager and a controller-runtime manager:
//
//	go test -v -run '^$' -bench BenchmarkAgentMemory -benchtime 1x ./test/bench/scale
package scale
