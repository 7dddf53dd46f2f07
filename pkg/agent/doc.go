// Package agent is the node's orchestration: the path of a new process from discovery to
// attach. A Loop watches the node's processes (discovery.Watcher), asks the Admission whether
// to trace each new one and what its spans carry of its pod, and traces those kept
// (tracer.Tracer.TracePID). The same Admission decides on the processes the kernel admits at
// exec (Admission.AdmitExec, given to tracer.Options.Admit), so a process is judged one way
// however it was found. SelfStats reads the tracer's figures for the agent's self-metrics.
// `reconscope-agent run` and `reconscope-agent trace --exe` both run a Loop; cmd/agent keeps
// the flags, the wiring and the output.
package agent
