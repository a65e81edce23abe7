// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* probe.bpf.c owns the in-kernel half of `swapagent probe`: an entry uprobe stamps the start time of a
 * call per (thread, function), the return uprobe turns it into a latency and adds it to that function's
 * log2 histogram. The function id is the attach cookie, so one pair of programs serves every function. */
#include "bpf_defs.h"

#define MAX_FUNCS 128
#define NBUCKETS 40 /* bucket i counts latencies in [2^i, 2^(i+1)) ns; the last one also everything longer */

struct start_key {
	__u64 pid_tgid;
	__u64 fn;
};

struct hist {
	__u64 calls;
	__u64 total_ns;
	__u64 buckets[NBUCKETS];
};

/* LRU: a call that never returns (longjmp, exception, exit) must not fill the map for good. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct start_key);
	__type(value, __u64);
} starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_FUNCS);
	__type(key, __u32);
	__type(value, struct hist);
} hists SEC(".maps");

/* Process to watch (its tgid); 0 watches every process that maps the library. Set by the loader. */
const volatile __u32 target_tgid = 0;

static __always_inline int wanted(__u64 pid_tgid)
{
	return target_tgid == 0 || (__u32)(pid_tgid >> 32) == target_tgid;
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, s;
	s = (v > 0xFFFFFFFFULL) << 5; v >>= s; r |= s;
	s = (v > 0xFFFF) << 4; v >>= s; r |= s;
	s = (v > 0xFF) << 3; v >>= s; r |= s;
	s = (v > 0xF) << 2; v >>= s; r |= s;
	s = (v > 0x3) << 1; v >>= s; r |= s;
	r |= (__u32)(v >> 1);
	return r;
}

SEC("uprobe")
int call_enter(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!wanted(id))
		return 0;
	struct start_key k = {.pid_tgid = id, .fn = bpf_get_attach_cookie(ctx)};
	__u64 now = bpf_ktime_get_ns();
	bpf_map_update_elem(&starts, &k, &now, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int call_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!wanted(id))
		return 0;
	struct start_key k = {.pid_tgid = id, .fn = bpf_get_attach_cookie(ctx)};
	__u64 *start = bpf_map_lookup_elem(&starts, &k);
	if (!start)
		return 0; /* attached while the call was running, or the entry was evicted */
	__u64 delta = bpf_ktime_get_ns() - *start;
	bpf_map_delete_elem(&starts, &k);

	__u32 fn = (__u32)k.fn;
	struct hist *h = bpf_map_lookup_elem(&hists, &fn);
	if (!h)
		return 0;
	__u32 b = log2_u64(delta);
	if (b >= NBUCKETS)
		b = NBUCKETS - 1;
	__sync_fetch_and_add(&h->calls, 1);
	__sync_fetch_and_add(&h->total_ns, delta);
	__sync_fetch_and_add(&h->buckets[b], 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
