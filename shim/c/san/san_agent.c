/* san_agent.c: the C stand-in for the Go half of libswapagent.so in the sanitizer builds (shim/sanitize.mk).
 * The Go runtime cannot run under AddressSanitizer or ThreadSanitizer inside a C process, so these builds
 * link the shim's own C objects (interposers, ring, dl hooks, launch check, tensor table, control ABI
 * wrappers, crash handler) with this file into libsan-agent.so, preloaded like the real library. It does
 * what the Go side does to the C side, from the same threads: a drainer thread (marked as the agent's)
 * empties the ring every 100 us, checks each event, acknowledges a pending fatal signal, and rewrites the
 * launch check's watched ranges every few drains (addresses no launch uses, so the seqlock's readers and
 * its writer race without a fault); the control calls answer as policy off does (handles numbered from 1,
 * unpack returns the saved pointer, nothing moves) after reading every part of the C side's copy of the call
 * as the Go side does; the calls are queued as under policy off, and the drain gives their copies back. At
 * exit it drains what is left and prints, on stderr:
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
  if (e->fn == SA_FN_QUEUED) { /* a queued control call: the Go side would run it; its copy goes back */
    sa_call_free((uintptr_t)e->args[0]);
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

int sa_go_set_storage_ops(uintptr_t release, uintptr_t restore, uintptr_t ctx) {
  (void)ctx;
  if ((release == 0) != (restore == 0)) return SWAPAGENT_EINVAL;
  atomic_store(&ops_release, release);
  atomic_store(&ops_restore, restore);
  return SWAPAGENT_OK;
}

static int64_t save(uintptr_t ptr, size_t nbytes) {
  if (ptr == 0 || nbytes == 0) return SWAPAGENT_EINVAL;
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

/* Runs a call from the C side's copy as policy off would: every part read where the copy says it lies, the
 * saves given handles. */
int64_t sa_go_run(uintptr_t addr) {
  sa_call *d = (sa_call *)addr;
  const unsigned char *data = (const unsigned char *)d->data;
  static const size_t size[SA_NPARTS] = {
#define SA_PART(NAME, field, count, sz, how) [SA_PART_##NAME] = sz,
#include "calls.def"
  };
  volatile uint64_t sum = 0;
  for (int p = 0; p < SA_NPARTS; p++)
    for (size_t i = 0; i < d->part_n[p] * size[p]; i++) sum += data[d->part_off[p] + i];
  if (d->has_group && strlen((const char *)data + d->group_off) != d->group_len) return SWAPAGENT_EINVAL;
  if (d->has_group && d->group_len == 0) return SWAPAGENT_EINVAL;
  if (d->kind == SWAPAGENT_CALL_REGION_ENTER && d->n_pos > d->part_n[SA_PART_PTRS]) return SWAPAGENT_EINVAL;
  const uint64_t *ptrs = (const uint64_t *)(data + d->part_off[SA_PART_SAVE_PTRS]),
                 *sizes = (const uint64_t *)(data + d->part_off[SA_PART_SAVE_NBYTES]);
  int64_t *handles = (int64_t *)(d->data + d->part_off[SA_PART_HANDLES] / 8);
  int64_t rc = SWAPAGENT_OK;
  for (uint64_t i = 0; i < d->part_n[SA_PART_SAVE_PTRS]; i++) {
    handles[i] = save((uintptr_t)ptrs[i], (size_t)sizes[i]);
    if (handles[i] < 0 && rc == SWAPAGENT_OK) rc = handles[i];
  }
  if (d->kind == SWAPAGENT_CALL_GUARD_RELEASE) d->token = 0, rc = SWAPAGENT_RELEASE_ALLOW;
  return d->kind == SWAPAGENT_CALL_REGION_EXIT ? SWAPAGENT_OK : rc;
}

/* Queued as under policy off (nothing runs them later but the free above). */
int sa_go_queueing(uint64_t *keep_below) {
  *keep_below = 0;
  return SA_QUEUE_ALL;
}
int sa_go_refused(int kind, char *call, char *detail) {
  (void)kind, (void)call, (void)detail;
  return SWAPAGENT_EINVAL;
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

char *sa_go_stats_json(size_t *len) {
  pthread_mutex_lock(&mu);
  size_t saves = nsaved;
  pthread_mutex_unlock(&mu);
  char *js = malloc(128);
  if (js == NULL) return NULL;
  int n = snprintf(js, 128, "{\"policy\":\"off\",\"saves\":%zu,\"faults\":[]}", saves);
  *len = n > 0 ? (size_t)n : 0;
  return js;
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
