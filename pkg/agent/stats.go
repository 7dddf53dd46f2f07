package agent

import (
	"github.com/reconscope/reconscope/pkg/exporter"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// SelfStats returns what fills in the tracer's part of the agent's self-metrics at a scrape
// (exporter.AgentStats: events lost, probe hits, probes attached, processes traced, reconciles
// in flight, exclusions, hand-offs, spans held for a writer, gated hits); the exporters count
// the rest themselves.
func SelfStats(t *tracer.Tracer) func(*exporter.AgentStats) {
	return func(a *exporter.AgentStats) {
		st := t.Stats()
		a.EventsLostRingBuffer, a.EventsLostState = st.Kernel.LostRingBuffer, st.Kernel.LostState
		a.KernelProbeHits = st.Kernel.Hits
		a.ProbesAttached, a.ProcessesTraced, a.ReconcilesInFlight = st.Sites, st.Processes, st.Open
		a.ExcludedKernel, a.ExcludedAgent = st.Kernel.Excluded, st.Excluded
		a.Handoffs, a.HandoffsLost = st.Assembler.Handoffs, st.Assembler.HandoffsLost
		a.HeldForWriter = st.Assembler.HeldForWriter
		a.GatedHits = st.Kernel.Gated
	}
}
