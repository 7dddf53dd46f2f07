// Package reliability holds reconscope's privileged failure tests (issue 10): what happens
// when the traced process is killed mid-reconcile, when the agent itself is killed, when the
// traced binary is deleted or replaced on disk, when the ring buffer overflows, when the
// OTLP collector is unreachable, when the agent runs with only the capabilities the DaemonSet
// grants (or one fewer), and when traced strings are far longer than what the kernel copies.
// Each test needs real eBPF (bpftest.Require) and builds its programs itself: test/fakectl
// (a controller-runtime-shaped reconciler) and the agent (cmd/agent, as `make build` does).
// SECURITY.md cites these tests for its claims.
package reliability
