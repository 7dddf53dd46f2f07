/* hit.h — what every hit of a probe goes through first: the PID filter, the counters, the site
 * table, the goroutine states and the ring buffer with its wakeup decision. trace.bpf.c's
 * programs are built on it; the overhead benchmark's programs (test/bench/bpf/empty.bpf.c)
 * include it too, so what the benchmark measures of these pieces is this code.
 *
 * On a machine whose kernel flushes the TLB at every trap (page-table isolation without PCID),
 * a hit pays for every page it touches first far more than for its instructions: each piece
 * below touches as few pages as it can, and none calls a helper it can do without. */
#ifndef RECONSCOPE_HIT_H
#define RECONSCOPE_HIT_H

#include "types.h"
#include "bpf_helpers.h"
#include "events.h"
#include "go_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

/* Force a wakeup of the reader once this many bytes were submitted since the last forced one;
 * below it, records are submitted without a wakeup and the reader polls on a short deadline. */
volatile const __u64 wakeup_bytes = 256 * 1024;

/* The PID filter: one bit per host PID (tgid), set for the traced processes. It covers every PID
 * the kernel can give (PID_MAX_LIMIT, 4 Mi on 64-bit: pid_max cannot be set higher), so it
 * needs no fallback; 512 KiB. A hit reads one word of it: no helper call, one page. User space
 * maps it (BPF_F_MMAPABLE) and sets and clears bits with atomic ORs and ANDs, as on_exec does,
 * so neither side's write can undo the other's in a shared word. */
#define PID_LIMIT (1 << 22)
#define PID_WORDS (PID_LIMIT / 64)

struct pid_bitmap {
	__u64 w[PID_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pid_bitmap);
} traced_pids SEC(".maps");

/* The counters (enum counter), one array shared by the CPUs and added to atomically: one
 * cache line for all of them, where a per-CPU array costs a lookup of the CPU's own area. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

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

/* pid_word returns the word of the PID filter that holds pid's bit (pid_bit), or 0. */
static __always_inline __u64 *pid_word(__u32 pid)
{
	__u32 zero = 0;
	struct pid_bitmap *b = bpf_map_lookup_elem(&traced_pids, &zero);
	if (!b)
		return 0;
	return &b->w[(pid / 64) & (PID_WORDS - 1)];
}

static __always_inline __u64 pid_bit(__u32 pid)
{
	return 1ULL << (pid & 63);
}

/* pid_traced reports whether process pid is in the PID filter. */
static __always_inline int pid_traced(__u32 pid)
{
	__u64 *w = pid_word(pid);
	return w && (*w & pid_bit(pid));
}

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

/* hit_site begins every hit of process pid: nothing (0) unless the process is traced; else the hit
 * is counted and the site's configuration returned (its index, the attach cookie, in *site). */
static __always_inline struct site_config *hit_site(struct go_regs *regs, __u32 pid, __u32 *site)
{
	if (!pid_traced(pid))
		return 0;
	count(COUNTER_HITS);
	*site = (__u32)bpf_get_attach_cookie(regs);
	return bpf_map_lookup_elem(&sites, site);
}

/* submit_flags decides the wakeup of a record of size bytes: forced once wakeup_bytes were
 * submitted since the last forced one, so the reader, asleep until its deadline, is never more
 * than that behind; none otherwise. The count lives next to the counters (one cache line) and
 * is added to without a lock: two CPUs adding at once can lose one record's bytes, which
 * delays a wakeup by a record, never skips one for good. It replaces a bpf_ringbuf_query of
 * the bytes waiting, a helper call and a read of the ring buffer's consumer page per record. */
static __always_inline __u64 submit_flags(__u32 size)
{
	__u32 idx = COUNTER_UNWOKEN_BYTES;
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (!v)
		return 0; /* cannot happen (an array's index in range): the kernel's own wakeup rule */
	__u64 n = *v + size;
	if (n >= wakeup_bytes) {
		*v = 0;
		return BPF_RB_FORCE_WAKEUP;
	}
	*v = n;
	return BPF_RB_NO_WAKEUP;
}

#endif /* RECONSCOPE_HIT_H */
