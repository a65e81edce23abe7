/* sa.h: the shim's internal C interface shared by its files and the cgo glue (the Go files of shim/): function ids,
 * the fixed-size event and ring, the process mode (starting / active / inert, forked), real-function
 * resolution, the per-thread tensor list, and the helpers Go calls (storage ops, real runtime calls).
 * Nothing here allocates or locks on the hot path. */
#ifndef SWAPAGENT_SA_H_
#define SWAPAGENT_SA_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"
#include "sa_go.h"

#define SA_EXPORT __attribute__((visibility("default")))

/* Every call from a host thread into Go goes through SA_GO (signals.c, sa_altstack_lend): Go code must not
 * run on a thread whose alternate signal stack the host disabled. */
int sa_altstack_lend(void);
void sa_altstack_return(int lent);
#define SA_GO(call)                              \
  __extension__({                                \
    int sa_lent_ = sa_altstack_lend();           \
    __typeof__(call) sa_r_ = (call);             \
    sa_altstack_return(sa_lent_);                \
    sa_r_;                                       \
  })
#define SA_GO_VOID(call)                         \
  do {                                           \
    int sa_lent_ = sa_altstack_lend();           \
    call;                                        \
    sa_altstack_return(sa_lent_);                \
  } while (0)
#define SA_HIDDEN __attribute__((visibility("hidden")))
#define SA_TLS __thread __attribute__((tls_model("initial-exec")))

/* Returned by an interposer when no runtime defines the real function. */
#define SA_NORT ACL_ERROR_UNINITIALIZE

/* Function ids: table order from 1; then the pseudo function recorded by the exception callback; the
 * dlsym trampolines of other aclnn ops use SA_TRAMP_BASE + slot. */
enum {
  SA_ID_NONE = 0,
#define SA_HOOK(rt, name, ...) SA_ID_##name,
#define SA_CUSTOM(rt, name, ...) SA_ID_##name,
#define SA_LAUNCH(name) SA_ID_##name,
#define SA_REAL(rt, name, ...) SA_ID_##name,
#include "hooks.def"
  SA_ID_EXCEPTION, /* "aclrtExceptionCallback": Args = task, stream, thread, device, error code */
  SA_NFN
};
#define SA_TRAMP_BASE 256
#define SA_TRAMP_SLOTS 512

/* Modes. Recording happens while starting (Go not ready yet) and active. */
enum { SA_STARTING = 0, SA_ACTIVE = 1, SA_INERT = 2 };
SA_HIDDEN extern _Atomic int sa_mode;
SA_HIDDEN extern _Atomic int sa_forked;
SA_HIDDEN extern _Atomic int sa_go_ready;
SA_HIDDEN extern SA_TLS int sa_depth; /* >0 while this thread is inside an interposer or a hook */

/* Control calls are refused in a forked child (it must never enter Go) and once the agent is inert (msrun's
 * scheduler, a contained internal error, process exit). */
static inline int sa_refuse(void) {
  return atomic_load_explicit(&sa_forked, memory_order_relaxed) != 0 ||
         atomic_load_explicit(&sa_mode, memory_order_relaxed) == SA_INERT;
}

/* Real functions and names, indexed by id (< SA_NFN). */
SA_HIDDEN extern void *_Atomic sa_real[SA_NFN];
SA_HIDDEN extern void *const sa_interposer[SA_NFN];
SA_HIDDEN extern const char *const sa_names[SA_NFN];
SA_HIDDEN void *sa_resolve(int id);
SA_HIDDEN int sa_lookup_name(const char *name);

/* A spin-wait hint: pause on x86-64, yield on AArch64 (a no-op elsewhere). */
static inline void sa_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

static inline void *sa_real_fn(int id) {
  void *p = atomic_load_explicit(&sa_real[id], memory_order_acquire);
  return p ? p : sa_resolve(id);
}

/* The real dl functions (bootstrapped with dlvsym, never _dl_sym). */
SA_HIDDEN void sa_dl_bootstrap(void);
SA_HIDDEN void *sa_real_dlsym(void *handle, const char *name);

/* Ring: a bounded MPSC queue of sequence-numbered cells (Vyukov). */
#define SA_RING_BITS 16
SA_HIDDEN void sa_record(int fn, int64_t ret, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4,
                         uint64_t a5);
SA_HIDDEN int64_t sa_now(void);
SA_HIDDEN extern _Atomic uint64_t sa_lost;

/* Resident handles (resident.c): the base of a handle whose storage stays on device, 0 when unknown. An
 * unpack answered from it is recorded as the pseudo function SA_FN_UNPACK (trace.FnUnpack, generated): args[0] the
 * handle, ret the base. */
#define SA_FN_UNPACK 0xFFFF
SA_HIDDEN uintptr_t sa_resident_get(int64_t handle);
/* Puts handles first..first+n-1 in the table with their bases (0: left out), under one lock. */
SA_HIDDEN void sa_resident_set_n(int64_t first, const uint64_t *bases, size_t n);

/* Queued control calls (calls.c): recorded in the ring as SA_FN_QUEUED (trace.FnQueued, generated), args[0]
 * the sa_call copy of their arguments. */
#define SA_FN_QUEUED 0xFFFE
/* Runs a control call described by a record the library itself built (control.c's v1 forms; its pointers are
 * the caller's, read by opts' rule). */
struct swapagent_call;
SA_HIDDEN int64_t sa_call_run(const struct swapagent_call *c, uint32_t opts);
/* A refusal found outside a record's path (the v1 stats call): the agent logs and counts it; its code. */
SA_HIDDEN int sa_call_refused(const char *call, const char *detail);
/* Copies n bytes to the caller's dst, through the kernel: 1 when dst was writable memory (calls.c). */
SA_HIDDEN int sa_mem_write(void *dst, const void *src, size_t n);

/* The tensors a launch reads and writes (tensors.c): its executor's, else those its thread created since
 * its previous launch. At most SA_TENSORS per launch are checked. */
#define SA_TENSORS 16
SA_HIDDEN void sa_tensor_note(const aclTensor *t, const void *addr, uint64_t extent);
SA_HIDDEN void sa_exec_bind(const aclOpExecutor *ex);
SA_HIDDEN void sa_exec_repeatable(const aclOpExecutor *ex);
SA_HIDDEN void sa_exec_set_addr(const aclOpExecutor *ex, const aclTensor *t, const void *addr);
SA_HIDDEN void sa_exec_forget(const aclOpExecutor *ex);
SA_HIDDEN uint32_t sa_launch_tensors(const aclOpExecutor *ex, sa_tensor *out);
SA_HIDDEN uint64_t sa_extent(const int64_t *dims, uint64_t n, aclDataType dt);
SA_HIDDEN uint64_t sa_elems(const int64_t *dims, uint64_t n);

/* Fault checks (issue 5): a launch on a tensor at address 0 or in a released external storage, and a sync
 * that failed with a device exception, are reported to the agent before the call returns. */
SA_HIDDEN extern _Atomic int sa_dead_n; /* watched ranges: 0 on the common path */
SA_HIDDEN int sa_dead_hit(uint64_t addr);
SA_HIDDEN void sa_launch_fault(int fn, int index, uint64_t addr, uint64_t size);
SA_HIDDEN void sa_sync_check(int fn, aclError r);
SA_HIDDEN const char *sa_err_for_app(const char *r);

/* The application's aclFinalize (check.c): the agent finishes with the runtime, then the mover's real
 * calls find none (control.c). */
SA_HIDDEN void sa_runtime_final(void);
SA_HIDDEN void sa_real_calls_end(void);

/* Trampolines of aclnn launches reached through dlsym. */
SA_HIDDEN void *sa_tramp_for(const char *name, void *real);
SA_HIDDEN int sa_tramp_real(const void *addr, void **real);
SA_HIDDEN void sa_tramp_after_fork(void);
/* Restores the loading thread's signal mask, blocked around the Go runtime's start (signals.c). */
SA_HIDDEN void sa_restore_loader_mask(void);

#endif
