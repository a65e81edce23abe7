/* san_ring.c: the shim's event ring (ring.c) on its own, for the sanitizer builds (shim/sanitize.mk).
 * Phase 1: P producer threads record N events each (args: producer, sequence, and a pattern) while one
 * consumer drains in batches of varying size; every event must arrive once, each producer's in its order,
 * with its fields intact, and none may be lost. Phase 2: with no consumer the ring fills; once the agent
 * is inert a producer drops at once (counted in sa_lost) instead of waiting, and the full ring then drains
 * in order. Usage: san-ring P N. Prints "ok ..." and exits 0, or names the first failure and exits 1. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "sa.h"

/* hooks.c defines the mode; this program links ring.c alone. */
_Atomic int sa_mode = SA_ACTIVE;

#define FN 1
static long per;
static _Atomic int producing;

static void *producer(void *arg) {
  uint64_t p = (uint64_t)(uintptr_t)arg;
  for (long i = 0; i < per; i++) sa_record(FN, (int64_t)i, p, (uint64_t)i, p ^ (uint64_t)i, ~(uint64_t)i, 7, 8);
  atomic_fetch_sub(&producing, 1);
  return NULL;
}

static int fail(const char *what, const sa_event *e) {
  fprintf(stderr, "san-ring: %s (fn %u tid %u ret %lld args %llu %llu %llu %llu)\n", what, e->fn, e->tid,
          (long long)e->ret, (unsigned long long)e->args[0], (unsigned long long)e->args[1],
          (unsigned long long)e->args[2], (unsigned long long)e->args[3]);
  return 1;
}

int main(int argc, char **argv) {
  int np = argc > 1 ? atoi(argv[1]) : 4;
  per = argc > 2 ? atol(argv[2]) : 100000;
  if (np < 1 || np > 64 || per < 1) return 2;

  /* Phase 1: many producers, one consumer. */
  pthread_t th[64];
  atomic_store(&producing, np);
  for (int i = 0; i < np; i++) pthread_create(&th[i], NULL, producer, (void *)(uintptr_t)i);
  static sa_event buf[4096];
  long next[64] = {0}, total = 0;
  for (unsigned round = 0;; round++) {
    int stopped = atomic_load(&producing) == 0; /* read before the drain: nothing is published after it */
    int n = sa_ring_drain(buf, 1 + (int)(round * 7919 % 4096));
    for (int i = 0; i < n; i++) {
      const sa_event *e = &buf[i];
      uint64_t p = e->args[0], s = e->args[1];
      if (e->fn != FN || p >= (uint64_t)np) return fail("unknown event", e);
      if ((long)s != next[p]) return fail("event out of its producer's order", e);
      if (e->ret != (int64_t)s || e->args[2] != (p ^ s) || e->args[3] != ~s || e->args[4] != 7 || e->args[5] != 8 ||
          e->ts <= 0 || e->tid == 0)
        return fail("fields changed", e);
      next[p]++;
    }
    total += n;
    if (stopped && n == 0) break;
  }
  for (int i = 0; i < np; i++) pthread_join(th[i], NULL);
  uint64_t lost = sa_take_lost();
  if (total != np * per || lost != 0) {
    fprintf(stderr, "san-ring: %ld events of %ld, %llu lost\n", total, np * per, (unsigned long long)lost);
    return 1;
  }

  /* Phase 2: a full ring drops once the agent is inert, then drains whole. */
  long size = 1L << SA_RING_BITS;
  for (long i = 0; i < size; i++) sa_record(FN, i, 0, (uint64_t)i, (uint64_t)i, ~(uint64_t)i, 7, 8);
  atomic_store(&sa_mode, SA_INERT);
  for (int i = 0; i < 10; i++) sa_record(FN, -1, 0, 0, 0, 0, 0, 0);
  uint64_t dropped = sa_take_lost();
  long drained = 0, n;
  while ((n = sa_ring_drain(buf, 4096)) > 0) {
    for (long i = 0; i < n; i++) {
      if ((long)buf[i].args[1] != drained + i) return fail("full ring out of order", &buf[i]);
    }
    drained += n;
  }
  if (dropped != 10 || drained != size) {
    fprintf(stderr, "san-ring: full ring: %llu dropped (want 10), %ld drained (want %ld)\n",
            (unsigned long long)dropped, drained, size);
    return 1;
  }
  printf("ok %ld events from %d producers in order, none lost; a full ring drops when inert\n", total, np);
  return 0;
}
