/* san_agent.c: the C stand-in for the Go half of libswapagent.so in the sanitizer builds (shim/sanitize.mk).
 * The Go runtime cannot run under AddressSanitizer or ThreadSanitizer inside a C process, so these builds
 * link the shim's own C objects (interposers, ring, dl hooks, launch check, tensor table, control ABI
 * wrappers, crash handler) with this file into libsan-agent.so, preloaded like the real library. It does
 * what the Go side does to the C side, from the same threads: a drainer thread (marked as the agent's)
 * empties the ring every 100 us, checks each event, acknowledges a pending fatal signal, and rewrites the
 * launch check's watched ranges every few drains (addresses no launch uses, so the seqlock's readers and
 * its writer race without a fault); the control calls answer as policy off does (handles numbered from 1,
 * unpack returns the saved pointer, nothing moves) after reading every argument array the way the Go side
 * does; the deferred calls are answered as under policy off, and the drain gives their copies back. At exit it drains what is left and prints, on stderr:
 *   san-agent: events N lost L bad B launch-faults F sync-faults S
 *   san-agent: fn NAME COUNT        (one line per function seen)
 * bad counts events with an unknown function id, no timestamp, or a timestamp older than the same thread's
 * previous event. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sa.h"
#include "swapagent.h"

static pthread_t drainer;
static _Atomic int drainer_started, stop;
static _Atomic uint64_t launch_faults, sync_faults;
/* Only the drainer (and, after it stopped, the exit drain) touches these. */
static uint64_t events, bad, per_fn[SA_TRAMP_BASE + SA_TRAMP_SLOTS];

/* Last timestamp per thread id (open addressing; a full table stops checking new threads). */
#define SAN_TIDS 4096
static struct {
  uint32_t tid;
  int64_t ts;
} last_ts[SAN_TIDS];

static void check(const sa_event *e) {
  events++;
  if (e->fn == SA_FN_DEFER) { /* a deferred control call: the Go side would run it; its copy goes back */
    sa_deferred_free((uintptr_t)e->args[0]);
    return;
  }
  if (e->fn == SA_FN_UNPACK) return; /* an unpack the resident table answered */
  int known = (e->fn > 0 && e->fn < SA_NFN) || (e->fn >= SA_TRAMP_BASE && e->fn < SA_TRAMP_BASE + SA_TRAMP_SLOTS);
  if (!known || e->ts <= 0) {
    bad++;
    return;
  }
  per_fn[e->fn]++;
  for (uint32_t i = 0, h = e->tid * 2654435761u; i < SAN_TIDS; i++) {
    uint32_t slot = (h + i) % SAN_TIDS;
    if (last_ts[slot].tid == 0) last_ts[slot].tid = e->tid;
    if (last_ts[slot].tid != e->tid) continue;
    if (e->ts < last_ts[slot].ts) bad++;
    last_ts[slot].ts = e->ts;
    break;
  }
}

static int drain_once(void) {
  sa_event buf[1024];
  int n = sa_ring_drain(buf, 1024);
  for (int i = 0; i < n; i++) check(&buf[i]);
  return n;
}

static void *drain_loop(void *arg) {
  (void)arg;
  sa_drainer_thread();
  sa_set_active(); /* as the Go side does once it started; an inert agent (msrun scheduler) stays inert */
  static const uint64_t ranges[] = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x8000};
  for (unsigned i = 0; !atomic_load(&stop); i++) {
    if (drain_once() == 0) {
      struct timespec d = {0, 100000};
      nanosleep(&d, NULL);
    }
    if (sa_crash_pending()) {
      while (drain_once() > 0) {
      }
      sa_crash_ack();
    }
    if (i % 16 == 0) sa_set_dead(ranges, (int)(i / 16 % 5) * 2); /* 0 to 4 ranges */
  }
  return NULL;
}

__attribute__((constructor)) static void san_start(void) {
  if (pthread_create(&drainer, NULL, drain_loop, NULL) == 0) atomic_store(&drainer_started, 1);
}

/* ---- The Go exports the C side calls (shim/exports.go, declared in control.c and check.c). ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *saved; /* handle h's pointer at saved[h-1] */
static size_t nsaved, capsaved;
static _Atomic uintptr_t ops_release, ops_restore;

/* touch reads what the Go side reads: the group name and each array entry. */
static int touch(const char *group, const uintptr_t *ptrs, size_t n) {
  if (group == NULL || group[0] == 0) return SWAPAGENT_EINVAL;
  if (ptrs == NULL && n > 0) return SWAPAGENT_EINVAL;
  volatile uintptr_t sum = strlen(group);
  for (size_t i = 0; i < n; i++) sum += ptrs[i];
  return SWAPAGENT_OK;
}

int sa_go_set_storage_ops(uintptr_t release, uintptr_t restore, uintptr_t ctx) {
  (void)ctx;
  if ((release == 0) != (restore == 0)) return SWAPAGENT_EINVAL;
  atomic_store(&ops_release, release);
  atomic_store(&ops_restore, restore);
  return SWAPAGENT_OK;
}

int sa_go_region_enter(char *group, uintptr_t *ptrs, size_t n, size_t npos) {
  return npos > n ? SWAPAGENT_EINVAL : touch(group, ptrs, n);
}

int sa_go_region_enter_desc(char *group, uintptr_t *ptrs, char **descs, size_t n, size_t npos) {
  for (size_t i = 0; descs != NULL && i < n; i++) {
    if (descs[i] != NULL) (void)strlen(descs[i]);
  }
  return sa_go_region_enter(group, ptrs, n, npos);
}

int sa_go_describe(char *group, uintptr_t *ptrs, char **descs, size_t n) {
  return sa_go_region_enter_desc(group, ptrs, descs, n, n);
}

int64_t sa_go_save(char *group, uintptr_t ptr, size_t nbytes, uint32_t flags) {
  (void)flags;
  if (touch(group, NULL, 0) != SWAPAGENT_OK || ptr == 0 || nbytes == 0) return SWAPAGENT_EINVAL;
  pthread_mutex_lock(&mu);
  if (nsaved == capsaved) {
    size_t cap = capsaved ? capsaved * 2 : 1024;
    uintptr_t *p = realloc(saved, cap * sizeof *p);
    if (p == NULL) {
      pthread_mutex_unlock(&mu);
      return SWAPAGENT_ERUNTIME;
    }
    saved = p;
    capsaved = cap;
  }
  saved[nsaved++] = ptr;
  int64_t h = (int64_t)nsaved;
  pthread_mutex_unlock(&mu);
  return h;
}

int sa_go_save_n(char *group, uintptr_t *ptrs, size_t *nbytes, uint32_t *flags, size_t n, int64_t *handles) {
  if (touch(group, ptrs, n) != SWAPAGENT_OK || (n > 0 && (nbytes == NULL || handles == NULL)))
    return SWAPAGENT_EINVAL;
  int rc = SWAPAGENT_OK;
  for (size_t i = 0; i < n; i++) {
    handles[i] = sa_go_save(group, ptrs[i], nbytes[i], flags != NULL ? flags[i] : 0);
    if (handles[i] < 0 && rc == SWAPAGENT_OK) rc = (int)handles[i];
  }
  return rc;
}

int sa_go_region_exit(char *group, uintptr_t *ptrs, size_t n) { return touch(group, ptrs, n); }
int sa_go_region_end(char *group, uintptr_t *out, size_t n_out, uintptr_t *ptrs, size_t *nbytes, uint32_t *flags,
                     size_t n_save, int64_t *handles, uintptr_t *desc_ptrs, char **descs, size_t n_desc) {
  if (touch(group, desc_ptrs, n_desc) != SWAPAGENT_OK || (n_desc > 0 && descs == NULL)) return SWAPAGENT_EINVAL;
  int rc = sa_go_save_n(group, ptrs, nbytes, flags, n_save, handles);
  int exit_rc = sa_go_region_exit(group, out, n_out);
  return rc != SWAPAGENT_OK ? rc : exit_rc;
}
int sa_go_protect(char *group, uintptr_t *ptrs, size_t n) { return touch(group, ptrs, n); }
int sa_go_group_streams(char *group, uintptr_t *streams, size_t n) { return touch(group, streams, n); }
int sa_go_holders(char *group, uintptr_t *ptrs, int64_t *counts, size_t n) {
  int rc = touch(group, ptrs, n);
  if (rc == SWAPAGENT_OK) rc = touch(group, (const uintptr_t *)counts, n);
  return rc;
}
int sa_go_backward_enter(char *group) { return touch(group, NULL, 0); }
int sa_go_backward_exit(char *group) { return touch(group, NULL, 0); }
/* The deferred calls, answered in C as under policy off (nothing runs them later but the free above). */
int sa_go_deferred(uint64_t *min_bytes) {
  *min_bytes = 0;
  return 1;
}
int sa_go_defer_refused(char *call, char *detail) {
  (void)call;
  (void)detail;
  return SWAPAGENT_EINVAL;
}
int64_t sa_go_run_deferred(uintptr_t d) {
  sa_deferred_free(d);
  return SWAPAGENT_OK;
}
int sa_go_note(char *key, char *value) { return key != NULL && value != NULL ? SWAPAGENT_OK : SWAPAGENT_EINVAL; }
int sa_go_guard(char *group) { return touch(group, NULL, 0); }
int sa_go_guard_release(char *group, uintptr_t ptr, size_t nbytes, int64_t others, int64_t *token) {
  (void)ptr, (void)nbytes, (void)others;
  if (group != NULL) touch(group, NULL, 0);
  if (token != NULL) *token = 0;
  return SWAPAGENT_RELEASE_ALLOW;
}
int sa_go_guard_restore(int64_t token, uintptr_t new_ptr, size_t nbytes) {
  (void)token, (void)new_ptr, (void)nbytes;
  return SWAPAGENT_OK;
}

uintptr_t sa_go_unpack(int64_t handle) {
  pthread_mutex_lock(&mu);
  uintptr_t p = handle > 0 && (size_t)handle <= nsaved ? saved[handle - 1] : 0;
  pthread_mutex_unlock(&mu);
  return p;
}

int sa_go_state(int64_t handle) { return sa_go_unpack(handle) ? SWAPAGENT_STATE_DEVICE : SWAPAGENT_EHANDLE; }
int sa_go_keep_reason(int64_t handle) {
  return sa_go_unpack(handle) ? SWAPAGENT_KEEP_INTERNAL : SWAPAGENT_EHANDLE;
}

int sa_go_stats_json(char *buf, size_t cap) {
  if (buf == NULL && cap > 0) return SWAPAGENT_EINVAL;
  pthread_mutex_lock(&mu);
  size_t saves = nsaved;
  pthread_mutex_unlock(&mu);
  char js[128];
  int n = snprintf(js, sizeof js, "{\"policy\":\"off\",\"saves\":%zu,\"faults\":[]}", saves);
  if (n < 0) return SWAPAGENT_ERUNTIME;
  if ((size_t)n + 1 > cap) return n;
  memcpy(buf, js, (size_t)n + 1);
  return n;
}

void sa_go_launch_fault(int fn, int index, uint64_t addr, uint64_t size) {
  (void)fn, (void)index, (void)addr, (void)size;
  atomic_fetch_add(&launch_faults, 1);
}

void sa_go_sync_fault(int fn, int code) {
  (void)fn, (void)code;
  (void)sa_err_msg();
  atomic_fetch_add(&sync_faults, 1);
}

/* The Go half's runtime mover finishes before the application's aclFinalize; this stand-in has no mover. */
void sa_go_runtime_final(void) {}

void sa_go_shutdown(void) {
  if (atomic_load(&drainer_started)) {
    atomic_store(&stop, 1);
    pthread_join(drainer, NULL);
    atomic_store(&drainer_started, 0);
  }
  while (drain_once() > 0) {
  }
  fprintf(stderr, "san-agent: events %llu lost %llu bad %llu launch-faults %llu sync-faults %llu\n",
          (unsigned long long)events, (unsigned long long)sa_take_lost(), (unsigned long long)bad,
          (unsigned long long)atomic_load(&launch_faults), (unsigned long long)atomic_load(&sync_faults));
  for (int i = 0; i < SA_TRAMP_BASE + SA_TRAMP_SLOTS; i++) {
    const char *name = sa_fn_name(i);
    if (per_fn[i] > 0) fprintf(stderr, "san-agent: fn %s %llu\n", name ? name : "?", (unsigned long long)per_fn[i]);
  }
  pthread_mutex_lock(&mu);
  free(saved);
  saved = NULL;
  nsaved = capsaved = 0;
  pthread_mutex_unlock(&mu);
}
