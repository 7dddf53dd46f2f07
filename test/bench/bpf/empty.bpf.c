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
 * without strings sends (struct event_head).
 *
 * The rec_* programs take that cost apart (section 1's "what a record costs"): the clock read
 * alone, the record's size, reserve and discard, the wakeup logic, bpf_ringbuf_output from a
 * per-CPU scratch record, a perf event array instead of a ring buffer, and the map lookups an
 * early exit makes. The pieces reconscope's program is built of come from its own header
 * (bpf/include/hit.h: the ring buffer, the PID filter, the counters, the site table, the
 * goroutine states), so what is measured of them is that code.
 *
 * The *_twice_* programs do one piece's work twice in one hit: the second pass finds the pages
 * the first touched in the TLB, so twice − once is what the piece costs where the TLB survives
 * the trap (a kernel with PCID, or without page-table isolation). */

#include "types.h"
#include "bpf_helpers.h"
#include "events.h"
#include "go_abi.h"
#include "hit.h"

char __license[] SEC("license") = "Dual MIT/GPL";

/* Between the two passes of a *_twice_* program: the compiler may not merge them. */
#define PASS_BARRIER() asm volatile("" ::: "memory")

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

/* The clock read every record is stamped with, alone. */
SEC("uprobe.multi")
int rec_ktime_multi(void *ctx)
{
	volatile __u64 t = bpf_ktime_get_ns();
	(void)t;
	return 0;
}

/* RECORD reserves, stamps and submits (no wakeup) a record of the type's size: 16 and 64 bytes
 * below, struct event_head (136) and struct event (920) */
#define RECORD(type)                                                        \
	do {                                                                \
		type *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);      \
		if (!e)                                                     \
			return 0;                                           \
		e->kind = EVENT_ENTRY;                                      \
		e->ktime = bpf_ktime_get_ns();                              \
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);                    \
	} while (0)

struct rec16 {
	__u8 kind;
	__u8 _pad[7];
	__u64 ktime;
};

struct rec64 {
	__u8 kind;
	__u8 _pad[7];
	__u64 ktime;
	__u64 w[6];
};

#define REC_SUBMIT(name, type)                                              \
	SEC("uprobe.multi")                                                 \
	int name(void *ctx)                                                 \
	{                                                                   \
		RECORD(type);                                               \
		return 0;                                                   \
	}

REC_SUBMIT(event_only_multi, struct event)
REC_SUBMIT(event_head_only_multi, struct event_head)
REC_SUBMIT(rec_16_multi, struct rec16)
REC_SUBMIT(rec_64_multi, struct rec64)

/* the 136-byte record twice in one hit: the second finds the ring buffer's pages in the TLB */
SEC("uprobe.multi")
int rec_twice_head_multi(void *ctx)
{
	RECORD(struct event_head);
	PASS_BARRIER();
	RECORD(struct event_head);
	return 0;
}

/* reserve the 136-byte record and discard it: the reservation without the commit's data */
SEC("uprobe.multi")
int rec_discard_multi(void *ctx)
{
	struct event_head *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	bpf_ringbuf_discard(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* the 136-byte record with the wakeup logic reconscope's program had before: query the data
 * waiting, wake the reader past a threshold */
SEC("uprobe.multi")
int rec_wakeup_multi(void *ctx)
{
	struct event_head *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->kind = EVENT_ENTRY;
	e->ktime = bpf_ktime_get_ns();
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	return 0;
}

/* the 136-byte record with reconscope's wakeup logic now (hit.h's submit_flags: a byte count
 * next to the counters) */
SEC("uprobe.multi")
int rec_wakeup_count_multi(void *ctx)
{
	struct event_head *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->kind = EVENT_ENTRY;
	e->ktime = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e)));
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event_head);
} scratch SEC(".maps");

/* scratch_record stamps the per-CPU scratch record and returns it */
static __always_inline struct event_head *scratch_record(void)
{
	__u32 zero = 0;
	struct event_head *e = bpf_map_lookup_elem(&scratch, &zero);
	if (e) {
		e->kind = EVENT_ENTRY;
		e->ktime = bpf_ktime_get_ns();
	}
	return e;
}

/* the 136-byte record built in a per-CPU scratch value and copied by bpf_ringbuf_output */
SEC("uprobe.multi")
int rec_output_multi(void *ctx)
{
	struct event_head *e = scratch_record();
	if (e)
		bpf_ringbuf_output(&events, e, sizeof(*e), BPF_RB_NO_WAKEUP);
	return 0;
}

/* UAPI constants types.h leaves out (reconscope's own program uses no perf event array) */
#define BPF_MAP_TYPE_PERF_EVENT_ARRAY 4
#define BPF_F_CURRENT_CPU 0xffffffffULL

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} perf_events SEC(".maps");

/* the 136-byte record through a perf event array (one buffer per CPU, no shared lock) */
SEC("uprobe.multi")
int rec_perf_multi(void *ctx)
{
	struct event_head *e = scratch_record();
	if (e)
		bpf_perf_event_output(ctx, &perf_events, BPF_F_CURRENT_CPU, e, sizeof(*e));
	return 0;
}

/* The lookups an early exit makes, each alone: the PID filter reconscope had before, a hash map
 * that misses; the one it has (hit.h), a bit of a global bitmap, that misses (the harness is not
 * in it); and a counter in a per-CPU array as it had, or in the shared one (hit.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} pids SEC(".maps");

SEC("uprobe.multi")
int rec_hash_miss_multi(void *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (bpf_map_lookup_elem(&pids, &pid))
		return 1;
	return 0;
}

SEC("uprobe.multi")
int rec_bitmap_miss_multi(void *ctx)
{
	return pid_traced(bpf_get_current_pid_tgid() >> 32);
}

/* the early exit of a process that is not traced, twice in one hit */
SEC("uprobe.multi")
int rec_twice_bitmap_miss_multi(void *ctx)
{
	int t = pid_traced(bpf_get_current_pid_tgid() >> 32);
	PASS_BARRIER();
	return t + pid_traced(bpf_get_current_pid_tgid() >> 32);
}

SEC("uprobe.multi")
int rec_counter_multi(void *ctx)
{
	__u32 zero = 0;
	struct event_head *e = bpf_map_lookup_elem(&scratch, &zero);
	if (e)
		e->ktime += 1;
	return 0;
}

SEC("uprobe.multi")
int rec_counter_shared_multi(void *ctx)
{
	count(COUNTER_HITS);
	return 0;
}

/* Reads of the traced process's memory (bpf_probe_read_user), as the programs read strings and
 * their headers: here from the goroutine's stack, which the process just used. */
SEC("uprobe.multi")
int rec_read1_multi(struct go_regs *regs)
{
	__u64 buf[2];
	bpf_probe_read_user(buf, sizeof(buf), (const void *)regs->sp);
	return buf[0] == 1;
}

SEC("uprobe.multi")
int rec_read5_multi(struct go_regs *regs)
{
	__u64 buf[2], sum = 0;
#pragma unroll
	for (int i = 0; i < 5; i++) {
		bpf_probe_read_user(buf, sizeof(buf), (const void *)(regs->sp + 16 * i));
		sum += buf[0];
	}
	return sum == 1;
}

SEC("uprobe.multi")
int rec_read80_multi(struct go_regs *regs)
{
	__u64 buf[10];
	bpf_probe_read_user(buf, sizeof(buf), (const void *)regs->sp);
	return buf[0] == 1;
}

/* A call site's early exit as reconscope's program makes it (the process traced, no span open on
 * the goroutine): hit.h's hit_site (the PID filter, which user space sets for the harness, the
 * hit counter, the site table), the goroutine-state lookup that misses, and the counter of calls
 * outside a span. */
static __always_inline int call_exit(struct go_regs *regs)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u32 site = 0;
	struct site_config *cfg = hit_site(regs, pid, &site);
	if (!cfg)
		return 0;
	struct g_key gk = {.pid = pid, .g = GO_G(regs)};
	if (bpf_map_lookup_elem(&goroutines, &gk))
		return 1;
	count(COUNTER_CALL_OUTSIDE);
	return 0;
}

SEC("uprobe.multi")
int rec_exit_multi(struct go_regs *regs)
{
	return call_exit(regs);
}

/* the same early exit twice in one hit */
SEC("uprobe.multi")
int rec_twice_exit_multi(struct go_regs *regs)
{
	int r = call_exit(regs);
	PASS_BARRIER();
	return r + call_exit(regs);
}
