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
 * alone, the record's size, reserve and discard, the wakeup logic reconscope's program adds,
 * bpf_ringbuf_output from a per-CPU scratch record, a perf event array instead of a ring
 * buffer, and the map lookups an early exit makes. */

#include "types.h"
#include "bpf_helpers.h"
#include "events.h"
#include "go_abi.h"

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

/* The clock read every record is stamped with, alone. */
SEC("uprobe.multi")
int rec_ktime_multi(void *ctx)
{
	volatile __u64 t = bpf_ktime_get_ns();
	(void)t;
	return 0;
}

struct rec16 {
	__u64 ktime;
	__u64 g;
};

struct rec64 {
	__u64 ktime;
	__u64 w[7];
};

/* reserve, stamp and submit (no wakeup) a record of SIZE bytes */
#define REC_SUBMIT(name, type)                                              \
	SEC("uprobe.multi")                                                 \
	int name(void *ctx)                                                 \
	{                                                                   \
		type *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);      \
		if (!e)                                                     \
			return 0;                                           \
		e->ktime = bpf_ktime_get_ns();                              \
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);                    \
		return 0;                                                   \
	}

REC_SUBMIT(rec_16_multi, struct rec16)
REC_SUBMIT(rec_64_multi, struct rec64)

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

volatile const __u64 wakeup_bytes = 256 * 1024;

/* the 136-byte record with reconscope's wakeup logic: query the data waiting, wake the reader
 * past a threshold */
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

/* The lookups an early exit makes, each alone: a hash map (the PID filter) that misses, and a
 * per-CPU array (the counters) updated. */
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

/* the PID filter as a bitmap in a global array: one load, no helper call */
__u64 pid_bits[1 << 16];

SEC("uprobe.multi")
int rec_bitmap_miss_multi(void *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (pid_bits[(pid >> 6) & 0xffff] & (1ULL << (pid & 63)))
		return 1;
	return 0;
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

/* the same counter in a small array map shared by the CPUs (one allocation with the map, no
 * per-CPU area), incremented atomically */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} shared_counters SEC(".maps");

SEC("uprobe.multi")
int rec_counter_shared_multi(void *ctx)
{
	__u32 idx = 3;
	__u64 *v = bpf_map_lookup_elem(&shared_counters, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}

/* A call site's early exit as reconscope's program makes it (the process traced, no span open on
 * the goroutine): the PID filter's hash lookup that hits (user space puts the harness's PID in
 * pids), a hit counter, the site table, the goroutine-state lookup that misses, and a second
 * counter; once with per-CPU counters, once with the shared ones. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct site_config);
} sites SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct g_key);
	__type(value, struct g_state);
} goroutines SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} percpu_counters SEC(".maps");

static __always_inline int call_exit(struct go_regs *regs, void *counters, int shared)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&pids, &pid))
		return 0;
	__u32 idx = 3;
	__u64 *v = bpf_map_lookup_elem(counters, &idx);
	if (v) {
		if (shared)
			__sync_fetch_and_add(v, 1);
		else
			*v += 1;
	}
	__u32 site = 0;
	struct site_config *cfg = bpf_map_lookup_elem(&sites, &site);
	if (!cfg)
		return 0;
	struct g_key gk = {.pid = pid, .g = GO_G(regs)};
	if (bpf_map_lookup_elem(&goroutines, &gk))
		return 1;
	idx = 2;
	v = bpf_map_lookup_elem(counters, &idx);
	if (v) {
		if (shared)
			__sync_fetch_and_add(v, 1);
		else
			*v += 1;
	}
	return 0;
}

SEC("uprobe.multi")
int rec_exit_percpu_multi(struct go_regs *regs)
{
	return call_exit(regs, &percpu_counters, 0);
}

SEC("uprobe.multi")
int rec_exit_shared_multi(struct go_regs *regs)
{
	return call_exit(regs, &shared_counters, 1);
}
