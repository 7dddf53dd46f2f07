/* types.h — the few kernel types and UAPI constants the programs need, so that the
 * objects build for every target without the host's Linux UAPI headers (a compact stand-in for
 * vmlinux.h, in the manner of cilium/ebpf's examples/headers/common.h). */
#ifndef RECONSCOPE_TYPES_H
#define RECONSCOPE_TYPES_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef short int __s16;
typedef short unsigned int __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long int __s64;
typedef long long unsigned int __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

/* map_flags */
enum {
	BPF_F_MMAPABLE = (1U << 10),
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

/* bpf_ringbuf_submit/output flags and bpf_ringbuf_query selectors. */
enum {
	BPF_RB_NO_WAKEUP = (1ULL << 0),
	BPF_RB_FORCE_WAKEUP = (1ULL << 1),
};

enum {
	BPF_RB_AVAIL_DATA = 0,
	BPF_RB_RING_SIZE = 1,
	BPF_RB_CONS_POS = 2,
	BPF_RB_PROD_POS = 3,
};

#endif /* RECONSCOPE_TYPES_H */
