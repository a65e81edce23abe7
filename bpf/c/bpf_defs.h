/* bpf_defs.h owns the few BPF definitions probe.bpf.c needs (types, map-definition macros, helper ids),
 * written out here so regenerating needs only clang, not libbpf-dev or a vmlinux.h. Values are the
 * kernel's stable UAPI numbers (include/uapi/linux/bpf.h). */
#ifndef SWAPAGENT_BPF_DEFS_H
#define SWAPAGENT_BPF_DEFS_H

typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))

/* BTF-defined maps: the loader reads these shapes from the object's BTF. */
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_LRU_HASH = 9,
};
enum { BPF_ANY = 0 };

/* Helpers are called through their stable ids. */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static __u64 (*bpf_get_attach_cookie)(void *ctx) = (void *)174;

#endif
