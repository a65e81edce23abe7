/* aclsim.h: internal state and helpers of libascendcl.so's sources (core, mem, vmm, stream, ops, hazard).
 * Nothing here is exported: the library is built with -fvisibility=hidden and only the ACL API (and the
 * aclsim_internal_* entry points of internal.h) carry default visibility. Internal code never calls a public
 * ACL function, so an interposer (the shim) sees exactly the calls the application made. */
#ifndef SIM_ACL_ACLSIM_H_
#define SIM_ACL_ACLSIM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "internal.h"

#define SIM_GIB (1024ull * 1024 * 1024)

/* ---- core.c: init state, errors, faults, env ---- */
struct sim_config {
  size_t device_mem;      /* ACLSIM_DEVICE_MEM */
  double copy_gbps;       /* ACLSIM_COPY_GBPS, 0 = unthrottled */
  size_t quarantine;      /* ACLSIM_QUARANTINE */
  uint32_t device_count;  /* ACLSIM_DEVICE_COUNT */
  bool check_hazards;     /* ACLSIM_CHECK_HAZARDS */
  uint32_t jitter_us;     /* ACLSIM_JITTER_US, 0 = no jitter */
  uint64_t seed;          /* ACLSIM_SEED */
};
extern struct sim_config sim_cfg;

/* sim_check and sim_fail are the entry points the other libraries reach too (internal.h). */
#define sim_check aclsim_internal_check
#define sim_fail aclsim_internal_fail
bool sim_initialized(void);
uint64_t sim_now_ns(void);
pid_t sim_gettid(void);
int32_t sim_device(void);

/* Faults. A worker that finds a bad address calls sim_fault_raise (once per fault: later ones while the
 * context is already poisoned are dropped). Waits call sim_wait_result after the stream drained. */
struct sim_fault {
  aclError code;
  uint32_t stream_id, task_id, thread_id;
  const char *lines; /* newline separated, the device log shape */
};
void sim_fault_raise(const struct sim_fault *f);
bool sim_poisoned(void);
/* sim_wait_result: 0 if no fault; the fault code for the first wait on the faulting stream; else 507899.
 * stream_id UINT32_MAX means "not a stream" (event waits). */
aclError sim_wait_result(uint32_t stream_id);
void sim_fault_reset(void);

/* ---- vec.c: growable arrays of records that start with a uintptr_t key, kept sorted by it ---- */
struct sim_vec {
  void *p;
  size_t n, cap;
};
/* sim_vec_insert: false when out of host memory. */
bool sim_vec_insert(struct sim_vec *v, size_t elem, size_t at, const void *item);
void sim_vec_remove(struct sim_vec *v, size_t elem, size_t at);
void sim_vec_free(struct sim_vec *v);
/* sim_vec_upper: the index of the first record whose key is > key. */
size_t sim_vec_upper(const struct sim_vec *v, size_t elem, uintptr_t key);

/* ---- mem.c: the device address space, aclrtMalloc memory and pinned host memory ---- */
int sim_mem_init(size_t capacity, size_t quarantine);
void sim_mem_fini(void);
aclError sim_dev_malloc(void **p, size_t size, bool align32_only);
aclError sim_dev_free(void *p);
aclError sim_host_malloc(void **p, size_t size);
aclError sim_host_free(void *p);
bool sim_in_arena(const void *p);
/* sim_dev_range_ok: [addr, addr+len) is live device memory (see sim_alloc_base). */
bool sim_dev_range_ok(uintptr_t addr, size_t len);
/* sim_pinned_check: 0 not pinned memory, 1 inside one pinned allocation, -1 pinned but overruns it. */
int sim_pinned_check(const void *p, size_t len);
/* sim_alloc_base: the base of what holds [addr, addr+len): one live device (or pinned) allocation, or for
 * device memory the first of the mappings covering it (sim_vmm_base); else 0. */
uintptr_t sim_alloc_base(uintptr_t addr, size_t len, bool pinned);
void sim_mem_info(size_t *free_bytes, size_t *total);
/* Address space for VMM reservations: len bytes aligned to align, at exactly `at` unless it is 0. A
 * released range must be PROT_NONE again; it goes through the quarantine like a freed allocation. */
bool sim_va_reserve(size_t len, size_t align, uintptr_t at, uintptr_t *out);
void sim_va_release(uintptr_t base, size_t len);
/* Capacity for VMM physical memory, counted like aclrtMalloc's. */
bool sim_mem_charge(size_t n);
void sim_mem_uncharge(size_t n);
/* Tasks touching memory hold the map lock shared; frees and unmaps take it exclusive before dropping
 * protection. */
void sim_mem_rdlock(void);
void sim_mem_wrlock(void);
void sim_mem_unlock(void);

/* ---- vmm.c: reservations, physical memory and mappings (aclrtReserveMemAddress ... aclrtUnmapMem) ---- */
/* sim_vmm_base: the base of the mapping holding addr when [addr, addr+len) is covered by mappings that
 * follow each other in one reservation, else 0. */
uintptr_t sim_vmm_base(uintptr_t addr, size_t len);
/* sim_vmm_fini forgets every reservation, mapping and physical allocation (aclFinalize, before the address
 * space is unmapped). */
void sim_vmm_fini(void);

/* ---- stream.c: streams, tasks, events ---- */
#define SIM_FOREVER UINT64_MAX
int sim_streams_init(void);
void sim_streams_fini(void);
/* sim_sync_all waits for every stream until deadline (CLOCK_MONOTONIC ns, or SIM_FOREVER): 507046 when it
 * passed, else the fault state's answer. */
aclError sim_sync_all(uint64_t deadline);
/* sim_deadline: the deadline timeout_ms (-1: forever, 0: poll) gives from now. */
uint64_t sim_deadline(int32_t timeout_ms);

/* ---- ops.c: the kernels of the aclnn ops, run on the stream workers like device code ---- */
/* sim_exec_run validates every tensor range and runs the kernel; on a bad range it raises the fault. */
void sim_exec_run(struct sim_exec *e, uint32_t stream_id, uint32_t task_id, uint32_t thread_id);
struct sim_access {
  uintptr_t addr;
  size_t len;
  bool write;
  uintptr_t base; /* sim_alloc_base of the range (set by the stream code for the hazard checker) */
};
/* sim_exec_accesses fills out (room for 3) with the kernel's tensor byte ranges, inputs read and the
 * output written, names the launch API (e.g. "aclnnMul") and returns the count. */
int sim_exec_accesses(const struct sim_exec *e, struct sim_access *out, const char **name);

/* ---- hazard.c: the hazard checker (ACLSIM_CHECK_HAZARDS); every call is a no-op when it is off ---- */
/* A vector clock indexed by stream id; entries past n are 0. */
struct sim_vc {
  uint64_t *v;
  uint32_t n;
};
/* Called at enqueue, in queue order (under the stream's lock). A record stores the stream's clock in the
 * event's; a wait joins the event's clock into the stream's. */
void sim_hz_task(uint32_t stream, uint32_t task, const char *name, const struct sim_access *acc, int n);
void sim_hz_record(uint32_t stream, struct sim_vc *event_clock);
void sim_hz_wait(uint32_t stream, const struct sim_vc *event_clock);
/* sim_hz_unrecord: the event was reset, so a later wait on it orders nothing. */
void sim_hz_unrecord(struct sim_vc *event_clock);
/* Host waits: snapshot what the wait covers at the call, join it into the host clock once the wait saw it
 * complete (host_join consumes the snapshot; free it instead when the wait gave up). */
void sim_hz_snap_stream(uint32_t stream, struct sim_vc *out);
void sim_hz_snap_event(const struct sim_vc *event_clock, struct sim_vc *out);
void sim_hz_host_join(struct sim_vc *snap);
/* sim_hz_stream_gone: the stream was drained and destroyed; the host has seen all its work. */
void sim_hz_stream_gone(uint32_t stream);
/* sim_hz_free: the host frees the allocation (or unmaps the mapping) [base, base+len) (aclrtFree,
 * aclrtFreeHost, aclrtUnmapMem). */
void sim_hz_free(const char *fn, uintptr_t base, size_t len);
uint64_t sim_hz_count(void);
/* sim_hz_reset forgets all state and the count (aclFinalize). */
void sim_hz_reset(void);

#endif
