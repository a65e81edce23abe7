/* ptrset.c: the set of live handles (see internal.h), built into each library that keeps handles. */
#include <stdlib.h>

#include "internal.h"

#define TOMB ((uintptr_t)1)

static void ptrset_grow(struct sim_ptrset *s) {
  size_t ncap = s->cap ? (s->live * 4 > s->cap ? s->cap * 2 : s->cap) : 64;
  uintptr_t *old = s->slots;
  size_t ocap = s->cap;
  uintptr_t *slots = calloc(ncap, sizeof *slots);
  if (!slots) return; /* keep probing the old table; add reports failure when it is full */
  s->slots = slots;
  s->cap = ncap;
  s->used = s->live;
  for (size_t i = 0; i < ocap; i++) {
    uintptr_t v = old[i];
    if (v <= TOMB) continue;
    size_t h = (size_t)((v >> 4) * 0x9E3779B97F4A7C15ull) & (ncap - 1);
    while (slots[h]) h = (h + 1) & (ncap - 1);
    slots[h] = v;
  }
  free(old);
}

static size_t ptrset_find(const struct sim_ptrset *s, uintptr_t v, bool *found) {
  size_t h = (size_t)((v >> 4) * 0x9E3779B97F4A7C15ull) & (s->cap - 1), tomb = SIZE_MAX;
  for (size_t n = 0; n < s->cap; n++, h = (h + 1) & (s->cap - 1)) {
    if (s->slots[h] == v) {
      *found = true;
      return h;
    }
    if (s->slots[h] == 0) break;
    if (s->slots[h] == TOMB && tomb == SIZE_MAX) tomb = h;
  }
  *found = false;
  return tomb != SIZE_MAX ? tomb : h;
}

bool sim_ptrset_add(struct sim_ptrset *s, const void *p) {
  uintptr_t v = (uintptr_t)p;
  if (v <= TOMB) return false;
  pthread_mutex_lock(&s->mu);
  if ((s->used + 1) * 2 > s->cap) ptrset_grow(s);
  bool ok = false;
  if (s->cap && s->used < s->cap) {
    bool found;
    size_t i = ptrset_find(s, v, &found);
    if (!found) {
      if (s->slots[i] == 0) s->used++;
      s->slots[i] = v;
      s->live++;
    }
    ok = true;
  }
  pthread_mutex_unlock(&s->mu);
  return ok;
}

bool sim_ptrset_del(struct sim_ptrset *s, const void *p) {
  uintptr_t v = (uintptr_t)p;
  if (v <= TOMB) return false;
  pthread_mutex_lock(&s->mu);
  bool found = false;
  if (s->cap) {
    size_t i = ptrset_find(s, v, &found);
    if (found) {
      s->slots[i] = TOMB;
      s->live--;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return found;
}

bool sim_ptrset_has(struct sim_ptrset *s, const void *p) {
  uintptr_t v = (uintptr_t)p;
  if (v <= TOMB) return false;
  pthread_mutex_lock(&s->mu);
  bool found = false;
  if (s->cap) ptrset_find(s, v, &found);
  pthread_mutex_unlock(&s->mu);
  return found;
}

void sim_ptrset_clear(struct sim_ptrset *s) {
  pthread_mutex_lock(&s->mu);
  free(s->slots);
  s->slots = NULL;
  s->cap = s->used = s->live = 0;
  pthread_mutex_unlock(&s->mu);
}
