/* resident.c: the handles whose storage stays on the device until the agent forgets them (every handle
 * under policy off; under safe the kept ones whose storage nothing moves, from their region's exit: the
 * engine's EvResident). swapagent_unpack answers those here, with their base, and records the call in
 * the ring (SA_FN_UNPACK) for the drainer to trace as the unpack it is, without entering Go: an unpack
 * under off, or of a storage that stays, costs a table lookup instead of a call into the agent. The agent
 * fills and empties the table (sa_resident_set, from Go, under its own calls); a miss goes to Go. An
 * open-addressing table (linear probing, deletion by backward shift) under one mutex. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdlib.h>

#include "sa.h"
#include "sa_go.h"

typedef struct {
  int64_t h; /* 0: empty */
  uintptr_t base;
} sa_res_slot;

static pthread_mutex_t res_mu = PTHREAD_MUTEX_INITIALIZER;
static sa_res_slot *res_tab;
static size_t res_cap; /* a power of two, or 0 */
static size_t res_n;
static _Atomic size_t res_live; /* res_n, read without the lock: an empty table costs no lock */

static inline size_t res_slot(int64_t h, size_t mask) {
  return (size_t)(((uint64_t)h * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/* res_grow doubles the table (a first one of 1024 slots); 0 when memory is short (the handle then
 * simply stays out of the table: its unpacks go to Go). */
static int res_grow(void) {
  size_t cap = res_cap ? res_cap * 2 : 1024;
  sa_res_slot *tab = calloc(cap, sizeof *tab);
  if (tab == NULL) return 0;
  for (size_t i = 0; i < res_cap; i++) {
    if (res_tab[i].h == 0) continue;
    size_t j = res_slot(res_tab[i].h, cap - 1);
    while (tab[j].h != 0) j = (j + 1) & (cap - 1);
    tab[j] = res_tab[i];
  }
  free(res_tab);
  res_tab = tab;
  res_cap = cap;
  return 1;
}

static void res_put(int64_t h, uintptr_t base) {
  if ((res_n + 1) * 2 > res_cap && !res_grow()) return;
  size_t m = res_cap - 1, i = res_slot(h, m);
  while (res_tab[i].h != 0 && res_tab[i].h != h) i = (i + 1) & m;
  if (res_tab[i].h == 0) res_n++;
  res_tab[i].h = h;
  res_tab[i].base = base;
}

static void res_del(int64_t h) {
  if (res_cap == 0) return;
  size_t m = res_cap - 1, i = res_slot(h, m);
  while (res_tab[i].h != h) {
    if (res_tab[i].h == 0) return;
    i = (i + 1) & m;
  }
  /* Backward shift: move later entries of the run into the hole when their home slot allows it. */
  for (size_t j = (i + 1) & m; res_tab[j].h != 0; j = (j + 1) & m) {
    size_t home = res_slot(res_tab[j].h, m);
    if (((j - home) & m) >= ((j - i) & m)) {
      res_tab[i] = res_tab[j];
      i = j;
    }
  }
  res_tab[i].h = 0;
  res_tab[i].base = 0;
  res_n--;
}

void sa_resident_set(int64_t handle, uintptr_t base) {
  if (handle <= 0) return;
  pthread_mutex_lock(&res_mu);
  if (base != 0)
    res_put(handle, base);
  else
    res_del(handle);
  atomic_store_explicit(&res_live, res_n, memory_order_relaxed);
  pthread_mutex_unlock(&res_mu);
}

void sa_resident_set_n(int64_t first, const uint64_t *bases, size_t n) {
  if (first <= 0 || n == 0) return;
  pthread_mutex_lock(&res_mu);
  for (size_t i = 0; i < n; i++)
    if (bases[i] != 0) res_put(first + (int64_t)i, (uintptr_t)bases[i]);
  atomic_store_explicit(&res_live, res_n, memory_order_relaxed);
  pthread_mutex_unlock(&res_mu);
}

uintptr_t sa_resident_get(int64_t handle) {
  if (handle <= 0 || atomic_load_explicit(&res_live, memory_order_relaxed) == 0) return 0;
  uintptr_t base = 0;
  pthread_mutex_lock(&res_mu);
  if (res_cap != 0) {
    size_t m = res_cap - 1;
    for (size_t i = res_slot(handle, m); res_tab[i].h != 0; i = (i + 1) & m) {
      if (res_tab[i].h == handle) {
        base = res_tab[i].base;
        break;
      }
    }
  }
  pthread_mutex_unlock(&res_mu);
  return base;
}
