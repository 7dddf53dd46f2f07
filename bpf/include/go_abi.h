/* go_abi.h — the one place that knows how Go's register ABI (ABIInternal, Go >= 1.17)
 * maps onto the registers a uprobe sees, for amd64 and arm64.
 *
 * Integer arguments and results use these registers, in order ("slots"):
 *   amd64: RAX RBX RCX RDI RSI R8 R9 R10 R11
 *   arm64: R0 .. R15
 * The current goroutine's g pointer lives in R14 (amd64) / R28 (arm64) at every
 * instruction of Go code, so it identifies the goroutine a probe fires on. */
#ifndef RECONSCOPE_GO_ABI_H
#define RECONSCOPE_GO_ABI_H

#define GO_ARG_SLOTS 9

#if defined(__TARGET_ARCH_x86)
/* The kernel's struct pt_regs for x86_64, as a uprobe program sees it. */
struct go_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

static __always_inline void go_args(const struct go_regs *r, __u64 out[GO_ARG_SLOTS])
{
	out[0] = r->ax;
	out[1] = r->bx;
	out[2] = r->cx;
	out[3] = r->di;
	out[4] = r->si;
	out[5] = r->r8;
	out[6] = r->r9;
	out[7] = r->r10;
	out[8] = r->r11;
}

#define GO_G(r) ((r)->r14)
#define GO_PC(r) ((r)->ip)
/* The caller's frame pointer, at a function's entry (before it pushes its own): [fp] is its
 * caller's frame pointer, [fp+8] its return address, as on arm64. */
#define GO_FP(r) ((r)->bp)

/* go_entry_ret reads the return address at a function's entry, before its prologue: CALL
 * pushed it at [SP]. */
static __always_inline __u64 go_entry_ret(const struct go_regs *r)
{
	__u64 ret = 0;
	bpf_probe_read_user(&ret, sizeof(ret), (const void *)r->sp);
	return ret;
}

#elif defined(__TARGET_ARCH_arm64)
/* The kernel's struct pt_regs for arm64 starts with struct user_pt_regs. */
struct go_regs {
	__u64 regs[31];
	__u64 sp, pc, pstate;
};

static __always_inline void go_args(const struct go_regs *r, __u64 out[GO_ARG_SLOTS])
{
#pragma unroll
	for (int i = 0; i < GO_ARG_SLOTS; i++)
		out[i] = r->regs[i];
}

#define GO_G(r) ((r)->regs[28])
#define GO_PC(r) ((r)->pc)
/* R29: [fp] is the caller's caller's frame pointer, [fp+8] the caller's return address (its
 * LR, stored at its SP by its prologue). */
#define GO_FP(r) ((r)->regs[29])

/* go_entry_ret is the return address at a function's entry, before its prologue stores it:
 * BL left it in the link register R30. */
static __always_inline __u64 go_entry_ret(const struct go_regs *r)
{
	return r->regs[30];
}

#else
#error "reconscope supports amd64 (__TARGET_ARCH_x86) and arm64 (__TARGET_ARCH_arm64)"
#endif

#endif /* RECONSCOPE_GO_ABI_H */
