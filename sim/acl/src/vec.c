/* vec.c: growable arrays of records kept sorted by a leading uintptr_t key (mem.c's allocations and spans,
 * vmm.c's reservations, mappings and physical allocations). */
#include <stdlib.h>
#include <string.h>

#include "aclsim.h"

static bool vec_reserve(struct sim_vec *v, size_t elem, size_t n) {
  if (v->cap >= n) return true;
  size_t ncap = v->cap ? v->cap * 2 : 64;
  while (ncap < n) ncap *= 2;
  void *p = realloc(v->p, ncap * elem);
  if (!p) return false;
  v->p = p;
  v->cap = ncap;
  return true;
}

bool sim_vec_insert(struct sim_vec *v, size_t elem, size_t at, const void *item) {
  if (!vec_reserve(v, elem, v->n + 1)) return false;
  char *b = v->p;
  memmove(b + (at + 1) * elem, b + at * elem, (v->n - at) * elem);
  memcpy(b + at * elem, item, elem);
  v->n++;
  return true;
}

void sim_vec_remove(struct sim_vec *v, size_t elem, size_t at) {
  char *b = v->p;
  memmove(b + at * elem, b + (at + 1) * elem, (v->n - at - 1) * elem);
  v->n--;
}

void sim_vec_free(struct sim_vec *v) {
  free(v->p);
  v->p = NULL;
  v->n = v->cap = 0;
}

size_t sim_vec_upper(const struct sim_vec *v, size_t elem, uintptr_t key) {
  size_t lo = 0, hi = v->n;
  const char *b = v->p;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (*(const uintptr_t *)(b + mid * elem) <= key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
