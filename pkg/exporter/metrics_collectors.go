package exporter

// The Metrics' two custom collectors: the agent's own figures, read once per scrape
// (agentCollector), and the most reconciled objects of each controller over a sliding window
// (hotObjects).

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// agentCollector exposes AgentStats, calling the callback once per scrape so the values are
// one consistent snapshot. A scrape only reads: it sets nothing another collector reports.
type agentCollector struct {
	stats                                                                                         func() AgentStats
	inFlight, eventsLost, probes, processes, exported, dropped, unsam, outputLost, redacted, hits *prometheus.Desc
	excluded, handoffs, gated, held                                                               *prometheus.Desc
}

func newAgentCollector(stats func() AgentStats) *agentCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &agentCollector{
		stats:    stats,
		inFlight: d("reconscope_reconciles_in_flight", "Reconciles started and not yet finished, in all traced processes."),
		eventsLost: prometheus.NewDesc("reconscope_events_lost_total",
			"Probe events lost in the kernel, by cause: ring_buffer_full (an event dropped because the ring buffer was full), state (a span entry whose goroutine state could not be stored because the state map was full).",
			[]string{"cause"}, nil),
		probes:    d("reconscope_probes_attached", "Probes attached now."),
		processes: d("reconscope_processes_traced", "Processes traced now."),
		exported:  d("reconscope_spans_exported_total", "Spans (reconcile and call spans) the OTLP collector accepted."),
		dropped:   d("reconscope_spans_dropped_total", "Spans lost on the way to the OTLP collector (queue full, export failed, rejected)."),
		unsam:     d("reconscope_spans_sampled_out_total", "Reconciles not exported by choice of the sampler (not a loss)."),
		outputLost: d("reconscope_output_spans_dropped_total",
			"Spans not written to the agent's standard output (--output) because it did not keep up: its queue was full."),
		redacted: d("reconscope_error_messages_redacted_total",
			"Reconcile error messages dropped (--error-messages drop) or changed by a redaction pattern (--redact-errors) before any output saw them."),
		hits: d("reconscope_kernel_probe_hits_total", "Probe hits in traced processes as the kernel program counts them: every hit, with or without a record (goroutine starts and exits, calls outside any reconcile). reconscope_probe_hits_total is the part that joined a reconcile."),
		handoffs: prometheus.NewDesc("reconscope_workqueue_handoffs_total",
			"Work-queue items a worker handed to another goroutine (its Done on another goroutine than its Get), by outcome: paired (one span, from Get to Done) or lost (the item's identity is not known for its type: its span was abandoned). docs/probes.md, hand-offs.",
			[]string{"outcome"}, nil),
		gated: d("reconscope_detail_gated_hits_total",
			"Hits of the call probes attached for controllers at detail calls (--detail-for, switches) in reconciles of controllers of the same executable at detail reconcile: each a trap, no record. docs/probes.md, \"Per-controller detail\"."),
		held: d("reconscope_spans_held_for_writer_total",
			"Spans whose export waited (up to 250 ms) for a traced write in flight: one of their watch events delivered a version whose writer's call had not returned yet, and the wait lets the span name that writer. docs/json.md, triggers."),
		excluded: prometheus.NewDesc("reconscope_spans_excluded_total",
			"Work items and reconciles of controllers not selected (--controller, the config's controllers), by where they were dropped: kernel (skipped at their entry, no record written) or agent (recorded, dropped by the agent: those done before the agent read the first of their controller instance, the items of work queues whose name and worker are unknown: \"workqueue\").",
			[]string{"where"}, nil),
	}
}

func (a *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{a.inFlight, a.eventsLost, a.probes, a.processes, a.exported, a.dropped, a.unsam, a.outputLost, a.redacted, a.hits, a.excluded, a.handoffs, a.gated, a.held} {
		ch <- d
	}
}

func (a *agentCollector) Collect(ch chan<- prometheus.Metric) {
	s := a.stats()
	ch <- prometheus.MustNewConstMetric(a.inFlight, prometheus.GaugeValue, float64(s.ReconcilesInFlight))
	ch <- prometheus.MustNewConstMetric(a.eventsLost, prometheus.CounterValue, float64(s.EventsLostRingBuffer), "ring_buffer_full")
	ch <- prometheus.MustNewConstMetric(a.eventsLost, prometheus.CounterValue, float64(s.EventsLostState), "state")
	ch <- prometheus.MustNewConstMetric(a.probes, prometheus.GaugeValue, float64(s.ProbesAttached))
	ch <- prometheus.MustNewConstMetric(a.processes, prometheus.GaugeValue, float64(s.ProcessesTraced))
	ch <- prometheus.MustNewConstMetric(a.exported, prometheus.CounterValue, float64(s.SpansExported))
	ch <- prometheus.MustNewConstMetric(a.dropped, prometheus.CounterValue, float64(s.SpansDropped))
	ch <- prometheus.MustNewConstMetric(a.unsam, prometheus.CounterValue, float64(s.SpansSampledOut))
	ch <- prometheus.MustNewConstMetric(a.outputLost, prometheus.CounterValue, float64(s.OutputSpansDropped))
	ch <- prometheus.MustNewConstMetric(a.redacted, prometheus.CounterValue, float64(s.ErrorMessagesRedacted))
	ch <- prometheus.MustNewConstMetric(a.hits, prometheus.CounterValue, float64(s.KernelProbeHits))
	ch <- prometheus.MustNewConstMetric(a.excluded, prometheus.CounterValue, float64(s.ExcludedKernel), "kernel")
	ch <- prometheus.MustNewConstMetric(a.excluded, prometheus.CounterValue, float64(s.ExcludedAgent), "agent")
	ch <- prometheus.MustNewConstMetric(a.handoffs, prometheus.CounterValue, float64(s.Handoffs), "paired")
	ch <- prometheus.MustNewConstMetric(a.handoffs, prometheus.CounterValue, float64(s.HandoffsLost), "lost")
	ch <- prometheus.MustNewConstMetric(a.gated, prometheus.CounterValue, float64(s.GatedHits))
	ch <- prometheus.MustNewConstMetric(a.held, prometheus.CounterValue, float64(s.HeldForWriter))
}

// hotObjects counts reconciles per object over a sliding window and exposes, at each scrape,
// the K most reconciled objects of each controller as reconscope_hot_objects. Series of
// objects that left the top K simply stop being reported: at most K series per controller.
type hotObjects struct {
	desc       *prometheus.Desc
	k          int
	slot       time.Duration
	maxTracked int
	now        func() time.Time

	mu   sync.Mutex
	ctrl map[hotController]*hotCounts
}

type hotKey struct{ namespace, name string }

// hotController is one controller of one workload: same-named controllers of different
// operators are counted apart.
type hotController struct{ controller, namespace, workload string }

type hotCounts struct {
	slots  [hotObjectSlots]hotSlot
	totals map[hotKey]int // sum of the live slots' counts
}

type hotSlot struct {
	epoch  int64 // which slot-long interval of time it counts; 0: unused
	counts map[hotKey]int
}

func newHotObjects(opts MetricsOptions) *hotObjects {
	window := positive(opts.HotObjectsWindow, DefaultHotObjectsWindow)
	return &hotObjects{
		desc: prometheus.NewDesc("reconscope_hot_objects",
			"Reconciles of each of the most reconciled objects of a controller over the recent window (top K per controller).",
			[]string{"controller", "k8s_namespace_name", "k8s_workload_name", "object_namespace", "object_name"}, nil),
		k:          positive(opts.HotObjectsK, DefaultHotObjectsK),
		slot:       max(window/hotObjectSlots, time.Nanosecond),
		maxTracked: positive(opts.HotObjectsMaxTracked, DefaultHotObjectsMaxTracked),
		now:        time.Now,
		ctrl:       map[hotController]*hotCounts{},
	}
}

// advance forgets the slots that left the window ending at epoch.
func (h *hotObjects) advance(c *hotCounts, epoch int64) {
	for i := range c.slots {
		sl := &c.slots[i]
		if sl.epoch != 0 && sl.epoch <= epoch-hotObjectSlots {
			for k, n := range sl.counts {
				if c.totals[k] -= n; c.totals[k] <= 0 {
					delete(c.totals, k)
				}
			}
			sl.epoch, sl.counts = 0, nil
		}
	}
}

func (h *hotObjects) observe(controller hotController, namespace, name string) {
	epoch := h.now().UnixNano()/int64(h.slot) + 1
	k := hotKey{namespace, name}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.ctrl[controller]
	if c == nil {
		c = &hotCounts{totals: map[hotKey]int{}}
		h.ctrl[controller] = c
	}
	h.advance(c, epoch)
	if _, seen := c.totals[k]; !seen && len(c.totals) >= h.maxTracked {
		return
	}
	sl := &c.slots[epoch%hotObjectSlots]
	if sl.epoch != epoch {
		sl.epoch, sl.counts = epoch, map[hotKey]int{}
	}
	sl.counts[k]++
	c.totals[k]++
}

func (h *hotObjects) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

func (h *hotObjects) Collect(ch chan<- prometheus.Metric) {
	epoch := h.now().UnixNano()/int64(h.slot) + 1
	type hot struct {
		controller hotController
		key        hotKey
		n          int
	}
	var out []hot
	h.mu.Lock()
	for name, c := range h.ctrl {
		h.advance(c, epoch)
		if len(c.totals) == 0 {
			delete(h.ctrl, name)
			continue
		}
		top := make([]hot, 0, len(c.totals))
		for k, n := range c.totals {
			top = append(top, hot{name, k, n})
		}
		slices.SortFunc(top, func(a, b hot) int {
			return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.key.namespace, b.key.namespace), cmp.Compare(a.key.name, b.key.name))
		})
		out = append(out, top[:min(h.k, len(top))]...)
	}
	h.mu.Unlock()
	for _, o := range out {
		ch <- prometheus.MustNewConstMetric(h.desc, prometheus.GaugeValue, float64(o.n),
			o.controller.controller, o.controller.namespace, o.controller.workload, o.key.namespace, o.key.name)
	}
}
