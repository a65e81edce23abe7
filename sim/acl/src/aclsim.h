/* aclsim.h: internal state and helpers shared by the emulator's sources (core, mem, stream, ops).
 * Nothing here is exported: the library is built with -fvisibility=hidden and only the ACL API carries
 * ACL_FUNC_VISIBILITY. Internal code never calls a public ACL function, so an interposer (the shim)
 * sees exactly the calls the application made. */
#ifndef SIM_ACL_ACLSIM_H_
#define SIM_ACL_ACLSIM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

#define SIM_MAX_DIMS 8
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

/* sim_check: 100001 before aclInit, 507899 once the host has been told of a fault, else 0. */
aclError sim_check(void);
bool sim_initialized(void);
/* sim_fail records a one-line message for aclGetRecentErrMsg and returns code. */
aclError sim_fail(aclError code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
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

/* A small open-addressing set of live handles, so stale or foreign handles are rejected. */
struct sim_ptrset {
  pthread_mutex_t mu;
  uintptr_t *slots;
  size_t cap, used, live;
};
#define SIM_PTRSET_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0}
bool sim_ptrset_add(struct sim_ptrset *s, const void *p);
bool sim_ptrset_del(struct sim_ptrset *s, const void *p);
bool sim_ptrset_has(struct sim_ptrset *s, const void *p);
void sim_ptrset_clear(struct sim_ptrset *s);

/* ---- mem.c: the device arena and pinned host memory ---- */
int sim_mem_init(size_t capacity, size_t quarantine);
void sim_mem_fini(void);
aclError sim_dev_malloc(void **p, size_t size, bool align32_only);
aclError sim_dev_free(void *p);
aclError sim_host_malloc(void **p, size_t size);
aclError sim_host_free(void *p);
bool sim_in_arena(const void *p);
/* sim_dev_range_ok: [addr, addr+len) lies inside ONE live device allocation. */
bool sim_dev_range_ok(uintptr_t addr, size_t len);
/* sim_pinned_check: 0 not pinned memory, 1 inside one pinned allocation, -1 pinned but overruns it. */
int sim_pinned_check(const void *p, size_t len);
/* sim_alloc_base: the base of the live device (or pinned) allocation holding [addr, addr+len), else 0. */
uintptr_t sim_alloc_base(uintptr_t addr, size_t len, bool pinned);
void sim_mem_info(size_t *free_bytes, size_t *total);
/* Tasks touching memory hold the map lock shared; frees take it exclusive before dropping protection. */
void sim_mem_rdlock(void);
void sim_mem_unlock(void);

/* ---- stream.c: streams, tasks, events ---- */
struct sim_exec;
int sim_streams_init(void);
void sim_streams_fini(void);
aclError sim_launch_kernel(struct sim_exec *e, aclrtStream stream);
aclError sim_sync_all(void);

/* ---- ops.c: kernels ---- */
/* sim_exec_run validates every tensor range and runs the kernel; on a bad range it raises the fault. */
void sim_exec_run(struct sim_exec *e, uint32_t stream_id, uint32_t task_id, uint32_t thread_id);
void sim_exec_free(struct sim_exec *e);
struct sim_access {
  uintptr_t addr;
  size_t len;
  bool write;
  uintptr_t base; /* the allocation holding the range (set by the stream code for the hazard checker) */
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
/* Host waits: snapshot what the wait covers at the call, join it into the host clock once the wait saw it
 * complete (host_join consumes the snapshot; free it instead when the wait gave up). */
void sim_hz_snap_stream(uint32_t stream, struct sim_vc *out);
void sim_hz_snap_event(const struct sim_vc *event_clock, struct sim_vc *out);
void sim_hz_host_join(struct sim_vc *snap);
/* sim_hz_stream_gone: the stream was drained and destroyed; the host has seen all its work. */
void sim_hz_stream_gone(uint32_t stream);
/* sim_hz_free: the host frees the allocation [base, base+len) (aclrtFree / aclrtFreeHost). */
void sim_hz_free(const char *fn, uintptr_t base, size_t len);
uint64_t sim_hz_count(void);
/* sim_hz_reset forgets all state and the count (aclFinalize). */
void sim_hz_reset(void);

#endif
