/* check.c: the fault checks of the shim (issue 5). The launch check's watched ranges (set by the agent:
 * external storages a policy released, and storages while an agent copy of them is in flight), the report of a suspicious launch to the agent before the kernel
 * runs, the report of a sync that failed with a device exception (with the runtime's error message, which
 * is kept for the application's own aclGetRecentErrMsg), all on cold paths: a launch only pays a load of
 * the range count and a test of each tensor's address. Never after fork: a forked child is inert. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <string.h>

#include "sa.h"

/* Implemented in Go (shim/exports.go). */
extern void sa_go_launch_fault(int fn, int index, uint64_t addr, uint64_t size);
extern void sa_go_sync_fault(int fn, int code);
extern void sa_go_runtime_final(void);

/* The watched ranges are read by every launch while any is set, so readers take no lock: a sequence
 * lock (odd while a writer is at work; readers retry when it moved), with the ranges as relaxed atomics.
 * Writers (the agent, rarely) serialize on a mutex. */
#define SA_DEAD_MAX 1024
static pthread_mutex_t dead_writer = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t dead_seq;
static _Atomic uint64_t dead[2 * SA_DEAD_MAX];
_Atomic int sa_dead_n;

void sa_set_dead(const uint64_t *ranges, int n) {
  int pairs = n / 2 > SA_DEAD_MAX ? SA_DEAD_MAX : n / 2;
  pthread_mutex_lock(&dead_writer);
  uint64_t seq = atomic_load_explicit(&dead_seq, memory_order_relaxed);
  atomic_store_explicit(&dead_seq, seq + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release); /* the odd sequence is visible before any range changes */
  for (int i = 0; i < 2 * pairs; i++) atomic_store_explicit(&dead[i], ranges[i], memory_order_relaxed);
  atomic_store_explicit(&sa_dead_n, pairs, memory_order_relaxed);
  atomic_store_explicit(&dead_seq, seq + 2, memory_order_release);
  pthread_mutex_unlock(&dead_writer);
}

int sa_dead_hit(uint64_t addr) {
  for (;;) {
    uint64_t s1 = atomic_load_explicit(&dead_seq, memory_order_acquire);
    if (s1 & 1) {
      sa_cpu_relax();
      continue;
    }
    int n = atomic_load_explicit(&sa_dead_n, memory_order_relaxed), hit = 0;
    for (int i = 0; i < n && !hit; i++)
      hit = addr >= atomic_load_explicit(&dead[2 * i], memory_order_relaxed) &&
            addr < atomic_load_explicit(&dead[2 * i + 1], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire); /* the ranges are read before the sequence is checked */
    if (atomic_load_explicit(&dead_seq, memory_order_relaxed) == s1) return hit;
  }
}

static int sa_can_report(void) {
  return atomic_load(&sa_go_ready) && !atomic_load(&sa_forked) && atomic_load(&sa_mode) == SA_ACTIVE;
}

void sa_launch_fault(int fn, int index, uint64_t addr, uint64_t size) {
  if (!sa_can_report()) return;
  sa_depth++; /* the agent's own runtime calls are not the application's */
  SA_GO_VOID(sa_go_launch_fault(fn, index, addr, size));
  sa_depth--;
}

/* Before the application's aclFinalize the agent finishes its copies and measures its waits on the job's
 * streams, while the runtime can still answer; from then on it makes no runtime call. */
void sa_runtime_final(void) {
  if (sa_can_report()) {
    sa_depth++;
    SA_GO_VOID(sa_go_runtime_final());
    sa_depth--;
  }
  sa_real_calls_end();
}

/* The error message of the last failed sync, read once from the runtime. */
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static char err_msg[8192];
static int err_pending; /* not yet handed to the application */

const char *sa_err_msg(void) { return err_msg; }

void sa_sync_check(int fn, aclError r) {
  switch (r) {
    case ACL_ERROR_RT_AICORE_EXCEPTION: case ACL_ERROR_RT_VECTOR_CORE_EXCEPTION: case 507011:
    case ACL_ERROR_RT_DEVICE_MEM_ERROR: case ACL_ERROR_RT_DRV_INTERNAL_ERROR:
      break;
    default:
      return;
  }
  if (!sa_can_report()) return;
  const char *(*get)(void) = (const char *(*)(void))sa_real_fn(SA_ID_aclGetRecentErrMsg);
  const char *m = get ? get() : NULL;
  pthread_mutex_lock(&err_lock);
  if (m != NULL && *m != '\0') {
    strncpy(err_msg, m, sizeof err_msg - 1);
    err_pending = 1;
  }
  pthread_mutex_unlock(&err_lock);
  sa_depth++;
  SA_GO_VOID(sa_go_sync_fault(fn, r));
  sa_depth--;
}

/* A runtime that clears its message once read would otherwise lose it to the agent: the application gets
 * the captured text when the runtime has nothing newer (the aclGetRecentErrMsg interposer calls this). */
const char *sa_err_for_app(const char *r) {
  pthread_mutex_lock(&err_lock);
  if (err_pending && (r == NULL || *r == '\0')) r = err_msg;
  err_pending = 0;
  pthread_mutex_unlock(&err_lock);
  return r;
}
