/* ring.c: the lock-free bounded ring between interposers (many producers) and the Go drainer (one
 * consumer), after Vyukov's sequence-numbered cells. A producer never allocates or locks: when the ring
 * is full it waits (spin, yield, then short sleeps) for the drainer, and drops an event (counted, traced
 * as KindLost) only when the drainer has made no progress for SA_STALL_NS or the agent went inert. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sa.h"

#define SA_RING_SIZE (1u << SA_RING_BITS)
#define SA_RING_MASK (SA_RING_SIZE - 1)
#define SA_STALL_NS 2000000000LL

/* A cell's sequence is stored minus its index, so the zero-filled ring is already initialised (an
 * interposer may run before any constructor of ours). */
typedef struct sa_cell {
  _Atomic uint64_t seq;
  sa_event ev;
} sa_cell;

/* Producer and consumer positions on their own cache lines. */
static struct {
  _Alignas(64) _Atomic uint64_t head; /* next position a producer claims */
  _Alignas(64) _Atomic uint64_t tail; /* next position the consumer reads; producers watch it for progress */
  _Alignas(64) _Atomic int stalled;   /* the drainer made no progress for SA_STALL_NS: drop instead of waiting */
  _Alignas(64) sa_cell cells[SA_RING_SIZE];
} ring;

_Atomic uint64_t sa_lost;
static SA_TLS uint32_t tls_tid;

static inline uint64_t seq_load(sa_cell *c, uint64_t pos) {
  return atomic_load_explicit(&c->seq, memory_order_acquire) + (pos & SA_RING_MASK);
}
static inline void seq_store(sa_cell *c, uint64_t pos, uint64_t v) {
  atomic_store_explicit(&c->seq, v - (pos & SA_RING_MASK), memory_order_release);
}

int64_t sa_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint32_t sa_tid(void) {
  if (__builtin_expect(tls_tid == 0, 0)) tls_tid = (uint32_t)syscall(SYS_gettid);
  return tls_tid;
}

/* Claims a cell; 0 when the ring is full. */
static sa_cell *sa_claim(uint64_t *posp) {
  uint64_t pos = atomic_load_explicit(&ring.head, memory_order_relaxed);
  for (;;) {
    sa_cell *c = &ring.cells[pos & SA_RING_MASK];
    uint64_t seq = seq_load(c, pos);
    int64_t dif = (int64_t)(seq - pos);
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&ring.head, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        *posp = pos;
        return c;
      }
    } else if (dif < 0) {
      return 0;
    } else {
      pos = atomic_load_explicit(&ring.head, memory_order_relaxed);
    }
  }
}

/* Waits for room; returns 0 when the event must be dropped. */
static int sa_wait_room(void) {
  if (atomic_load_explicit(&ring.stalled, memory_order_relaxed)) {
    /* Drop at once while the drainer is known to be stuck, unless it moved again. */
    return 0;
  }
  uint64_t seen = atomic_load_explicit(&ring.tail, memory_order_relaxed);
  int64_t since = 0;
  for (unsigned i = 0;; i++) {
    if (atomic_load_explicit(&sa_mode, memory_order_relaxed) == SA_INERT) return 0;
    if (i < 64) {
      sa_cpu_relax();
    } else if (i < 256) {
      sched_yield();
    } else {
      struct timespec d = {0, 50000};
      nanosleep(&d, 0);
    }
    uint64_t now_tail = atomic_load_explicit(&ring.tail, memory_order_relaxed);
    if (now_tail != seen) return 1; /* progress: try again */
    if (i == 256) since = sa_now();
    if (i > 256 && (i & 63) == 0 && sa_now() - since > SA_STALL_NS) {
      atomic_store_explicit(&ring.stalled, 1, memory_order_relaxed);
      return 0;
    }
  }
}

void sa_record(int fn, int64_t ret, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5) {
  uint64_t pos;
  sa_cell *c;
  while ((c = sa_claim(&pos)) == 0) {
    if (!sa_wait_room()) {
      atomic_fetch_add_explicit(&sa_lost, 1, memory_order_relaxed);
      return;
    }
  }
  c->ev.ts = sa_now();
  c->ev.tid = sa_tid();
  c->ev.fn = (uint16_t)fn;
  c->ev.flags = 0;
  c->ev.ret = ret;
  c->ev.args[0] = a0;
  c->ev.args[1] = a1;
  c->ev.args[2] = a2;
  c->ev.args[3] = a3;
  c->ev.args[4] = a4;
  c->ev.args[5] = a5;
  seq_store(c, pos, pos + 1);
}

/* Single consumer (the agent serialises drains): copies up to max published events in ring order. A cell
 * claimed but not yet published stops the drain there; the next drain picks it up. */
int sa_ring_drain(sa_event *out, int max) {
  uint64_t tail = atomic_load_explicit(&ring.tail, memory_order_relaxed);
  int n = 0;
  while (n < max) {
    sa_cell *c = &ring.cells[tail & SA_RING_MASK];
    if (seq_load(c, tail) != tail + 1) break;
    memcpy(&out[n], &c->ev, sizeof(sa_event));
    seq_store(c, tail, tail + SA_RING_SIZE);
    tail++;
    n++;
  }
  if (n > 0) {
    atomic_store_explicit(&ring.tail, tail, memory_order_release);
    atomic_store_explicit(&ring.stalled, 0, memory_order_relaxed);
  }
  return n;
}

uint64_t sa_take_lost(void) { return atomic_exchange_explicit(&sa_lost, 0, memory_order_relaxed); }
