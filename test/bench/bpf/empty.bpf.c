//go:build ignore

/* empty.bpf.c — reference uprobe programs for the overhead benchmark (test/bench).
 *
 * `empty` and `empty_multi` do nothing: attached at the very sites reconscope's programs use,
 * what a reconcile costs with them is the bare cost of the probe hits (trap, uprobe dispatch,
 * program call), the floor reconscope's own work is measured against (DESIGN.md §6).
 *
 * `event_only_multi` only reserves reconscope's event record in a ring buffer, stamps it and
 * submits it without a wakeup: the part of reconscope's per-hit time that emitting one event
 * costs, whatever the event holds. `event_head_only_multi` does the same with the record a site
 * without strings sends (struct event_head). */

#include "types.h"
#include "bpf_helpers.h"
#include "events.h"

char __license[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

SEC("uprobe")
int empty(void *ctx)
{
	return 0;
}

SEC("uprobe.multi")
int empty_multi(void *ctx)
{
	return 0;
}

SEC("uprobe.multi")
int event_only_multi(void *ctx)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->kind = EVENT_ENTRY;
	e->ktime = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("uprobe.multi")
int event_head_only_multi(void *ctx)
{
	struct event_head *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->kind = EVENT_ENTRY;
	e->ktime = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
