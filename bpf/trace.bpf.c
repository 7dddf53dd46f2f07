//go:build ignore

/* trace.bpf.c — generic entry and return programs for Go function probe sites.
 *
 * The maps and the pieces every hit goes through first (PID filter, counters, wakeups) are in
 * include/hit.h, which the overhead benchmark's programs share.
 *
 * Every attach point carries a cookie: the index of its struct site_config in `sites`,
 * written by user space from the probe catalog. The programs read the Go ABI registers,
 * the strings the site names, the goroutine's identity, and (for spans) the reconcile ID
 * or the returned error's message, and submit one struct event to the ring buffer.
 * They never write to the traced process and every read is bounded.
 *
 * Over 500 lines, on purpose: this file is one BPF object, compiled as one unit, and most of it
 * is one algorithm, the path of one probe hit (handle and the static inline steps it calls in
 * turn: the registers and strings a site names, the goroutine's state, the span's exclusion, the
 * deferred records, the error's message), which the verifier checks as one program. The two
 * exec-time programs (on_exec, identify) share its maps and counters. What another object shares
 * (the maps and first steps of every hit) is already apart, in include/hit.h; moving the rest
 * into headers only this file includes would split one pass across files. */

#include "include/types.h"
#include "include/bpf_helpers.h"
#include "include/bpf_core_read.h"
#include "include/go_abi.h"
#include "include/events.h"
#include "include/hit.h"

char __license[] SEC("license") = "Dual MIT/GPL";

/* The attached executables whose new processes on_exec admits to traced_pids. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct exe_id);
	__type(value, __u32);
} traced_exes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct err_key);
	__type(value, struct err_layout);
} err_layouts SEC(".maps");

/* A goroutine being created inside a span, per thread: runtime.newproc1 runs on the
 * thread's system stack from its entry to its return, so the thread identifies it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct g_state);
} spawning SEC(".maps");

/* The controller instances whose spans are excluded (trace --controller, config rules'
 * controllers), written by user space once it has named one: their span entries exit at once. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ctl_key);
	__type(value, __u32);
} excluded SEC(".maps");

/* Per-controller detail (SITE_F_GATED sites): the controller instances whose spans record their
 * calls (value CALL_DETAIL_CALLS) or do not (CALL_DETAIL_RECONCILE), keyed like `excluded`;
 * an instance not in the map takes the value of key {0, 0}, none meaning reconcile. Read once
 * per span, at its entry: a span keeps the detail it began with. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ctl_key);
	__type(value, __u32);
} call_detail SEC(".maps");

/* The values of `call_detail`. */
enum call_detail_mode {
	CALL_DETAIL_CALLS = 1,
	CALL_DETAIL_RECONCILE = 2,
};

/* Set by user space at load (collector.Options.PerControllerDetail): whether any site may be
 * SITE_F_GATED. Off, span entries skip the call_detail lookups (the verifier drops them). */
volatile const __u32 per_controller_detail = 0;

/* span_calls says whether a span of instance (pid, key) records its gated calls. */
static __always_inline __u32 span_calls(__u32 pid, __u64 key)
{
	struct ctl_key ck = {.pid = pid, .ptr = key};
	__u32 *v = bpf_map_lookup_elem(&call_detail, &ck);
	if (!v) {
		struct ctl_key dk = {};
		v = bpf_map_lookup_elem(&call_detail, &dk);
	}
	return v && *v == CALL_DETAIL_CALLS;
}

/* Unused globals that make bpf2go emit Go types for these structs (-type). */
const struct event *unused_event __attribute__((unused));
const struct event_head *unused_event_head __attribute__((unused));
const struct site_config *unused_site __attribute__((unused));
const struct err_key *unused_err_key __attribute__((unused));
const struct err_layout *unused_err_layout __attribute__((unused));
const struct g_key *unused_g_key __attribute__((unused));
const struct g_state *unused_g_state __attribute__((unused));
const struct exe_id *unused_exe_id __attribute__((unused));
const struct ctl_key *unused_ctl_key __attribute__((unused));
const struct exec_event *unused_exec_event __attribute__((unused));
/* ... and Go constants for these enums. */
const enum event_kind *unused_event_kind __attribute__((unused));
const enum event_flag *unused_event_flag __attribute__((unused));
const enum site_role *unused_site_role __attribute__((unused));
const enum site_kind *unused_site_kind __attribute__((unused));
const enum site_flag *unused_site_flag __attribute__((unused));
const enum counter *unused_counter __attribute__((unused));
const enum exec_flag *unused_exec_flag __attribute__((unused));
const enum slot *unused_slot __attribute__((unused));
const enum call_detail_mode *unused_call_detail_mode __attribute__((unused));

/* read_go_string copies at most STR_MAX bytes of a Go string into dst. */
static __always_inline void read_go_string(char *dst, __u16 *len_out, __u64 ptr, __u64 len)
{
	*len_out = len > 0xffff ? 0xffff : (__u16)len;
	if (ptr == 0 || len == 0)
		return;
	__u32 n = len > STR_MAX ? STR_MAX : (__u32)len;
	n &= (STR_MAX * 2 - 1); /* bound for the verifier: n <= STR_MAX */
	if (n > STR_MAX)
		return;
	if (bpf_probe_read_user(dst, n, (const void *)ptr) != 0)
		*len_out = 0;
}

/* base_of returns the base pointer a spec names: a register, or the call's saved pointer. */
static __always_inline __u64 base_of(const __u64 *args, __s8 base_slot, const struct g_state *gs)
{
	if (base_slot == SLOT_SAVED)
		return gs ? gs->saved : 0;
	__u32 slot = (__u8)base_slot;
	if (slot >= GO_ARG_SLOTS)
		return 0;
	return args[slot & 15]; /* the mask keeps the verifier's bound when clang copies slot */
}

/* frame_returns fills vals with the return addresses of the innermost frames at a function's
 * entry site (before the function pushes its frame): the function's own, then its callers'
 * up the frame-pointer chain, each as its address in the ELF file (the hit's address minus the
 * site's is the load bias; Go's code lies below 4 GiB), two 32-bit addresses per val, the
 * innermost in the low half; 0 where the chain ends. One read per frame, no trap. */
static __always_inline void frame_returns(const struct go_regs *regs, const struct site_config *cfg, __u64 vals[VAL_SPECS])
{
	__u64 bias = GO_PC(regs) - cfg->vaddr;
	__u64 fp = GO_FP(regs);
	__u32 rets[2 * VAL_SPECS] = {};
	rets[0] = (__u32)(go_entry_ret(regs) - bias);
#pragma unroll
	for (int i = 1; i < 2 * VAL_SPECS; i++) {
		__u64 frame[2] = {}; /* the saved frame pointer, the return address */
		if (fp == 0 || bpf_probe_read_user(frame, sizeof(frame), (const void *)fp) != 0)
			break;
		rets[i] = (__u32)(frame[1] - bias);
		fp = frame[0];
	}
#pragma unroll
	for (int i = 0; i < VAL_SPECS; i++)
		vals[i] = rets[2 * i] | (__u64)rets[2 * i + 1] << 32;
}

/* spec_used reports whether a string spec names a string. */
static __always_inline int spec_used(const struct str_spec *s)
{
	return s->base_slot >= 0 || s->base_slot == SLOT_SAVED || s->ptr_slot >= 0;
}

static __always_inline void read_spec(struct event *e, const __u64 *args, const struct str_spec *s, int i, const struct g_state *gs)
{
	__u64 ptr = 0, len = 0;
	if (s->base_slot >= 0 || s->base_slot == SLOT_SAVED) {
		__u64 hdr[2] = {};
		__u64 base = base_of(args, s->base_slot, gs);
		if (base == 0)
			return;
		if (bpf_probe_read_user(hdr, sizeof(hdr), (const void *)(base + s->off)) != 0)
			return;
		ptr = hdr[0];
		len = hdr[1];
	} else if (s->ptr_slot >= 0) {
		__u32 ps = (__u32)s->ptr_slot, ls = (__u32)s->len_slot;
		if (ps >= GO_ARG_SLOTS || ls >= GO_ARG_SLOTS)
			return;
		ptr = args[ps & 15];
		len = args[ls & 15];
	} else {
		return;
	}
	read_go_string(e->str[i], &e->str_len[i], ptr, len);
}

/* is_uuid reports whether the 36 bytes look like a UUID's text form. */
static __always_inline int is_uuid(const char *s)
{
	return s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-';
}

/* find_reconcile_id walks up a context chain (each context embeds its parent as the first
 * field, an interface whose data word is at +8) looking for a valueCtx whose value (an
 * interface at +32) holds a 36-byte string: controller-runtime's reconcileID. */
static __always_inline void find_reconcile_id(struct event *e, __u64 ctx)
{
	for (int depth = 0; depth < 6; depth++) {
		if (ctx == 0)
			return;
		__u64 val_data = 0;
		if (bpf_probe_read_user(&val_data, sizeof(val_data), (const void *)(ctx + 40)) == 0 &&
		    val_data != 0) {
			__u64 hdr[2] = {};
			if (bpf_probe_read_user(hdr, sizeof(hdr), (const void *)val_data) == 0 &&
			    hdr[1] == 36 && hdr[0] != 0) {
				if (bpf_probe_read_user(e->str[STR_EXTRA], 36, (const void *)hdr[0]) == 0 &&
				    is_uuid(e->str[STR_EXTRA])) {
					e->str_len[STR_EXTRA] = 36;
					e->flags |= EVENT_F_RECONCILE_ID;
					return;
				}
			}
		}
		__u64 parent = 0;
		if (bpf_probe_read_user(&parent, sizeof(parent), (const void *)(ctx + 8)) != 0)
			return;
		ctx = parent;
	}
}

/* error_layout finds the layout of the returned error's concrete type, when known. Layouts are
 * keyed by executable and the itab's address in the ELF file: the load bias (0 unless PIE) is
 * where the probe hit minus where the site is in the file. */
static __always_inline struct err_layout *error_layout(const __u64 *args, const struct go_regs *regs, const struct site_config *cfg)
{
	__u32 slot = (__u32)cfg->err_slot;
	if (slot + 1 >= GO_ARG_SLOTS)
		return 0;
	__u64 itab = args[slot & 15];
	if (itab == 0 || args[(slot + 1) & 15] == 0)
		return 0;
	struct err_key k = {.exe = cfg->exe, .itab = itab - (GO_PC(regs) - cfg->vaddr)};
	return bpf_map_lookup_elem(&err_layouts, &k);
}

/* read_error_message reads the message of the returned error whose layout error_layout found. */
static __always_inline void read_error_message(struct event *e, const __u64 *args, const struct site_config *cfg, const struct err_layout *l)
{
	__u64 data = args[((__u32)cfg->err_slot + 1) & 15];
	__u64 hdr[2] = {};
	if (bpf_probe_read_user(hdr, sizeof(hdr), (const void *)(data + l->msg_off)) != 0)
		return;
	read_go_string(e->str[STR_EXTRA], &e->str_len[STR_EXTRA], hdr[0], hdr[1]);
	if (e->str_len[STR_EXTRA] > 0)
		e->flags |= EVENT_F_ERROR_MSG;
}

/* handle_spawn: at the entry site (newproc1's entry, or its call in newproc's closure),
 * remember the span of the creating goroutine; at the return site (newproc1's RET, or the call
 * of runqput that follows), give the new goroutine an inherited state, so its calls join that
 * span. Both run on g0, on one thread; save_slot is the register holding the g the site is
 * about: the creating goroutine (callergp) at the entry, the new one at the return. */
static __always_inline int handle_spawn(struct go_regs *regs, const struct site_config *cfg, __u64 pid_tgid, __u32 pid)
{
	__u64 args[16] = {};
	go_args(regs, args);
	__u32 slot = (__u8)cfg->save_slot;
	if (slot >= GO_ARG_SLOTS)
		return 0;
	if (cfg->kind == SITE_ENTRY) {
		struct g_key parent = {.pid = pid, .g = args[slot & 15]};
		struct g_state *ps = bpf_map_lookup_elem(&goroutines, &parent);
		if (ps && ps->start != 0) {
			if ((cfg->flags & SITE_F_GATED) && !ps->calls) {
				count(COUNTER_GATED);
				return 0;
			}
			bpf_map_update_elem(&spawning, &pid_tgid, ps, BPF_ANY);
		}
		return 0;
	}
	struct g_state *ps = bpf_map_lookup_elem(&spawning, &pid_tgid);
	if (!ps)
		return 0;
	struct g_state child = {.start = ps->start, .saved = 0, .site = ps->site, .depth = 0, .goid = -1, .calls = ps->calls};
	struct g_key ck = {.pid = pid, .g = args[slot & 15]};
	bpf_map_delete_elem(&spawning, &pid_tgid);
	if (ck.g == 0)
		return 0;
	if (bpf_map_update_elem(&goroutines, &ck, &child, BPF_ANY) != 0)
		count(COUNTER_LOST_STATE);
	else
		count(COUNTER_INHERITED);
	return 0;
}

/* exclude_span opens an excluded span on the goroutine (state gs, or none yet): nothing is
 * recorded until its return. */
static __always_inline int exclude_span(struct g_state *gs, const struct g_key *gk)
{
	count(COUNTER_EXCLUDED);
	if (gs) {
		gs->start = 0;
		gs->saved = 0;
		gs->depth = 0;
		gs->goid = -1;
		gs->skip = 1;
		gs->calls = 0;
		return 0;
	}
	struct g_state ns = {.goid = -1, .skip = 1};
	if (bpf_map_update_elem(&goroutines, gk, &ns, BPF_ANY) != 0)
		count(COUNTER_LOST_STATE);
	return 0;
}

/* fill_head writes the fields every record has. */
static __always_inline void fill_head(struct event_head *h, __u8 kind, __u8 flags, __u32 site, __u64 pid_tgid,
				      __u64 now, __u64 g, __s64 goid, __u64 span_start, const __u64 *args)
{
	h->kind = kind;
	h->flags = flags;
	h->_pad0 = 0;
	h->site = site;
	h->pid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->ktime = now;
	h->g = g;
	h->goid = goid;
	h->span_start = span_start;
#pragma unroll
	for (int i = 0; i < GO_ARG_SLOTS; i++)
		h->args[i] = args[i];
}

/* flush_deferred sends the deferred read waiting on goroutine state gs (site_config.deferred):
 * the strings its site names, read now through the pointer its entry kept, as an EVENT_DEFERRED
 * record. It runs at the goroutine's next hit, whatever its site: the call whose entry asked
 * for the read has returned by then (a goroutine runs one call at a time), so the object it was
 * given to fill is filled, and no return site was needed. */
static __always_inline void flush_deferred(struct g_state *gs, __u64 pid_tgid, __u64 g)
{
	__u32 site = gs->deferred - 1;
	gs->deferred = 0;
	struct site_config *dc = bpf_map_lookup_elem(&sites, &site);
	if (!dc)
		return;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_LOST_RINGBUF);
		return;
	}
	__u64 args[16] = {};
	fill_head((struct event_head *)e, EVENT_DEFERRED, 0, site, pid_tgid, bpf_ktime_get_ns(), g, gs->goid, gs->start, args);
	e->vals[0] = 0;
	e->vals[1] = 0;
#pragma unroll
	for (int i = 0; i < STR_COUNT; i++)
		e->str_len[i] = 0;
#pragma unroll
	for (int i = 0; i < STR_SPECS; i++)
		read_spec(e, args, &dc->str[i], i, gs);
	bpf_ringbuf_submit(e, submit_flags(sizeof(*e)));
}

static __always_inline int handle(struct go_regs *regs)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	__u32 site = 0;
	struct site_config *cfg = hit_site(regs, pid, &site);
	if (!cfg)
		return 0;

	struct g_key gk = {.pid = pid, .g = GO_G(regs)};
	if (cfg->role == ROLE_SPAWN)
		return handle_spawn(regs, cfg, pid_tgid, pid);
	struct g_state *gs = bpf_map_lookup_elem(&goroutines, &gk);
	if (gs && gs->deferred != 0)
		flush_deferred(gs, pid_tgid, gk.g);
	if (cfg->role == ROLE_EXIT) {
		if (gs && gs->depth == 0)
			bpf_map_delete_elem(&goroutines, &gk);
		return 0;
	}
	/* Inside a span of an excluded controller nothing is recorded: its calls, its nested spans
	 * (a sync handler inside an excluded queue's item), its return. */
	if (gs && gs->skip != 0) {
		if (cfg->role == ROLE_SPAN) {
			if (cfg->kind == SITE_ENTRY)
				gs->skip++;
			else
				gs->skip--;
			return 0;
		}
		if (cfg->role == ROLE_CALL)
			return 0;
	}
	/* A work queue's Get on a goroutine whose open span is the previous item of a queue, with
	 * no Done for it: the worker handed that item to another goroutine, which ends it. The
	 * new item's span is the goroutine's own, not nested in the previous one. */
	if (gs && (cfg->flags & SITE_F_ITEM) && gs->start != 0 && gs->depth == 1) {
		__u32 prev_site = gs->site;
		struct site_config *prev = bpf_map_lookup_elem(&sites, &prev_site);
		if (prev && (prev->flags & SITE_F_ITEM)) {
			count(COUNTER_HANDED);
			gs->start = 0;
			gs->saved = 0;
			gs->depth = 0;
		}
	}
	/* live: a span is open on the goroutine, or it inherited one; otherwise gs, if any, is a
	 * state kept from an ended span, whose goroutine ID may be another goroutine's now. */
	int live = gs && gs->start != 0;
	if (cfg->role == ROLE_CALL && !live && !(cfg->flags & SITE_F_ITEM_CALL)) {
		count(COUNTER_CALL_OUTSIDE);
		return 0;
	}
	/* A call site (or a nested span's: a sync handler) attached for some controllers only, in
	 * a span of another one. */
	if ((cfg->flags & SITE_F_GATED) && (cfg->role == ROLE_CALL || cfg->role == ROLE_SPAN) && !(live && gs->calls)) {
		count(COUNTER_GATED);
		return 0;
	}
	__u64 args[16] = {};
	go_args(regs, args);
	/* A span of an excluded controller (not nested in a traced one) exits before any record. */
	if (cfg->role == ROLE_SPAN && cfg->kind == SITE_ENTRY && cfg->key_slot >= 0 && cfg->key_slot < GO_ARG_SLOTS &&
	    !(live && gs->depth > 0)) {
		struct ctl_key ck = {.pid = pid, .ptr = args[(__u32)cfg->key_slot & 15]};
		if (bpf_map_lookup_elem(&excluded, &ck))
			return exclude_span(gs, &gk);
	}

	int entry = cfg->kind == SITE_ENTRY;
	if (entry && cfg->deferred && live) {
		/* nothing to send yet: keep the out-parameter for the goroutine's next hit */
		__u32 slot = (__u8)cfg->save_slot;
		if (slot < GO_ARG_SLOTS) {
			gs->saved = args[slot & 15];
			gs->deferred = site + 1;
		}
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u8 flags = 0;
	/* A span site on a goroutine that only inherited a span has no span of its own. */
	__u64 span_start = (live && (cfg->role == ROLE_CALL || gs->depth > 0)) ? gs->start : 0;
	if (cfg->role == ROLE_SPAN) {
		if (entry && live && gs->depth > 0)
			flags |= EVENT_F_NESTED;
		if (!entry && (!gs || gs->depth == 0))
			flags |= EVENT_F_NO_ENTRY;
	}

	/* The goroutine ID is read once per span: the state of a live goroutine keeps it. */
	__s64 goid = -1;
	if (live && gs->goid != -1) {
		goid = gs->goid;
	} else if (cfg->goid_off != 0 && gk.g != 0) {
		if (bpf_probe_read_user(&goid, sizeof(goid), (const void *)(gk.g + cfg->goid_off)) != 0)
			goid = -1;
		if (live)
			gs->goid = goid;
	}

	/* Strings make a whole struct event; without them the record is its head alone. */
	struct err_layout *el = 0;
	if (!entry && cfg->err_slot >= 0)
		el = error_layout(args, regs, cfg);
	int strings = el != 0 || (entry && cfg->ctx_slot >= 0);
#pragma unroll
	for (int i = 0; i < STR_SPECS; i++)
		strings |= spec_used(&cfg->str[i]);

	__u64 vals[VAL_SPECS] = {};
#pragma unroll
	for (int i = 0; i < VAL_SPECS; i++) {
		const struct val_spec *v = &cfg->val[i];
		if (v->base_slot >= 0 || v->base_slot == SLOT_SAVED) {
			__u64 base = base_of(args, v->base_slot, gs);
			if (base != 0)
				bpf_probe_read_user(&vals[i], sizeof(__u64), (const void *)(base + v->off));
		}
	}
	if (cfg->val[0].base_slot == SLOT_FRAMES)
		frame_returns(regs, cfg, vals);

	__u8 kind = entry ? EVENT_ENTRY : EVENT_RETURN;
	if (!strings) {
		struct event_head *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
		if (h) {
			fill_head(h, kind, flags, site, pid_tgid, now, gk.g, goid, span_start, args);
			h->vals[0] = vals[0];
			h->vals[1] = vals[1];
			bpf_ringbuf_submit(h, submit_flags(sizeof(*h)));
		} else {
			count(COUNTER_LOST_RINGBUF);
		}
	} else {
		struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		if (e) {
			fill_head((struct event_head *)e, kind, flags, site, pid_tgid, now, gk.g, goid, span_start, args);
			e->vals[0] = vals[0];
			e->vals[1] = vals[1];
#pragma unroll
			for (int i = 0; i < STR_COUNT; i++)
				e->str_len[i] = 0;
#pragma unroll
			for (int i = 0; i < STR_SPECS; i++)
				read_spec(e, args, &cfg->str[i], i, gs);
			if (entry && cfg->ctx_slot >= 0 && cfg->ctx_slot < GO_ARG_SLOTS)
				find_reconcile_id(e, args[cfg->ctx_slot & 15]);
			if (el)
				read_error_message(e, args, cfg, el);
			bpf_ringbuf_submit(e, submit_flags(sizeof(*e)));
		} else {
			count(COUNTER_LOST_RINGBUF);
		}
	}

	/* Goroutine state, kept right whether or not the event was lost: a span whose entry event
	 * is lost still opens its state, so its calls are filtered as usual and its return
	 * reports the entry time (user space makes an incomplete span of it). */
	if (entry) {
		/* The span's detail, decided once at its entry (call_detail): gated calls record in it
		 * or not until its return, whatever user space changes meanwhile. */
		__u32 calls = 0;
		if (per_controller_detail && cfg->role == ROLE_SPAN && !(gs && gs->start != 0 && gs->depth > 0))
			calls = span_calls(pid, (cfg->key_slot >= 0 && cfg->key_slot < GO_ARG_SLOTS) ? args[(__u32)cfg->key_slot & 15] : 0);
		if (gs && cfg->role == ROLE_CALL && cfg->save_slot >= 0 && cfg->save_slot < GO_ARG_SLOTS)
			gs->saved = args[cfg->save_slot & 15];
		if (cfg->role == ROLE_SPAN) {
			if (gs && gs->start != 0 && gs->depth > 0) {
				gs->depth++;
			} else if (gs) {
				/* in place: a kept state, or one inherited (the span is the goroutine's own now) */
				gs->start = now;
				gs->saved = 0;
				gs->site = site;
				gs->depth = 1;
				gs->goid = goid;
				gs->calls = calls;
			} else {
				struct g_state ns = {.start = now, .saved = 0, .site = site, .depth = 1, .goid = goid, .calls = calls};
				if (bpf_map_update_elem(&goroutines, &gk, &ns, BPF_ANY) != 0)
					count(COUNTER_LOST_STATE);
			}
		}
	} else if (cfg->role == ROLE_SPAN && gs && gs->depth > 0) {
		if (gs->depth > 1) {
			gs->depth--;
		} else {
			/* the span ends: the state stays for the goroutine's next span */
			gs->start = 0;
			gs->saved = 0;
			gs->depth = 0;
			gs->goid = -1;
			gs->calls = 0;
		}
	}
	return 0;
}

/* Processes that just called execve, so discovery can look at a new program at once instead of
 * at its next /proc scan. A full buffer loses a notification (counted): the periodic scan stays
 * the safety net, and nothing is admitted without its notification. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} execs SEC(".maps");

/* The few kernel types on_exec reads, by name and field: CO-RE relocates each access against the
 * running kernel's BTF, so the layouts below need not match any kernel's. */
struct super_block {
	__u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct linux_binprm {
	struct file *file;
} __attribute__((preserve_access_index));

struct mm_struct {
	unsigned long start_code;
} __attribute__((preserve_access_index));

struct task_struct {
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

struct vm_area_struct {
	struct file *vm_file;
} __attribute__((preserve_access_index));

struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

/* mapped_file reads the identity of the file a mapping maps (bpf_find_vma's callback). */
static long mapped_file(struct task_struct *task, struct vm_area_struct *vma, void *ctx)
{
	struct exe_id *id = ctx;
	struct inode *ino = BPF_CORE_READ(vma, vm_file, f_inode);
	if (!ino)
		return 0;
	id->ino = BPF_CORE_READ(ino, i_ino);
	id->dev = BPF_CORE_READ(ino, i_sb, s_dev);
	return 0;
}

/* on_exec runs at sched_process_exec (TP_PROTO(struct task_struct *p, pid_t old_pid,
 * struct linux_binprm *bprm)), after the new image is mapped and before its first instruction.
 * When the exec'd file is an attached executable, the process joins the PID filter here, so its
 * probes act from its first instruction; user space learns of it from the notification.
 *
 * The file is identified as uprobes identify it: by the inode its code is mapped from. On
 * overlayfs (every container) that is the real file in its layer, while the exec'd file is the
 * overlay's inode, whose device differs in every container of one image: so the identity comes
 * from the mapping of the first code address, and from the exec'd file only when the mapping
 * cannot be looked up (bpf_find_vma, Linux 5.17, may find its lock contended). */
SEC("raw_tracepoint/sched_process_exec")
int on_exec(struct bpf_raw_tracepoint_args *ctx)
{
	struct exec_event *ev = bpf_ringbuf_reserve(&execs, sizeof(*ev), 0);
	if (!ev) {
		count(COUNTER_LOST_EXEC);
		return 0;
	}
	struct exe_id id = {};
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 code = BPF_CORE_READ(task, mm, start_code);
	if (bpf_find_vma(task, code, mapped_file, &id, 0) != 0 || id.ino == 0) {
		struct linux_binprm *bprm = (struct linux_binprm *)ctx->args[2];
		struct inode *ino = BPF_CORE_READ(bprm, file, f_inode);
		id.ino = BPF_CORE_READ(ino, i_ino);
		id.dev = BPF_CORE_READ(ino, i_sb, s_dev);
	}
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	ev->pid = pid;
	ev->flags = 0;
	ev->dev = id.dev;
	ev->ino = id.ino;
	if (bpf_map_lookup_elem(&traced_exes, &id)) {
		__u64 *w = pid_word(pid);
		if (w) {
			__sync_fetch_and_or(w, pid_bit(pid));
			ev->flags |= EXEC_F_ADMITTED;
			count(COUNTER_ADMITTED);
		}
	}
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

/* The identity identify found, for user space to read. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct exe_id);
} file_ids SEC(".maps");

/* identify is run by user space (BPF_PROG_TEST_RUN, in its own context) with args[0] an address
 * where it mapped a file: it stores that file's identity as on_exec sees an exec'd one (the real
 * file on overlayfs, which stat cannot tell), so both sides compare the same thing. */
SEC("raw_tracepoint/identify")
int identify(struct bpf_raw_tracepoint_args *ctx)
{
	struct exe_id id = {};
	if (bpf_find_vma(bpf_get_current_task_btf(), ctx->args[0], mapped_file, &id, 0) != 0 || id.ino == 0)
		return 1;
	__u32 zero = 0;
	bpf_map_update_elem(&file_ids, &zero, &id, BPF_ANY);
	return 0;
}

SEC("uprobe")
int probe_site(struct go_regs *regs)
{
	return handle(regs);
}

SEC("uprobe.multi")
int probe_site_multi(struct go_regs *regs)
{
	return handle(regs);
}
