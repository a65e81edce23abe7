/* sa_heap.c: the agent's control calls leave the host's heap alone. A framework calls the ABI for every layer
 * of every step; a malloc and free per call would hand the framework's own next small allocations pieces of
 * the chunk just freed, moving where its objects land (the host pointers a trace records scatter, and the
 * trace grows by half). This program counts the mallocs of its process while it runs the plain control calls
 * of many layer steps under the agent (policy off: nothing moves) on the emulator, after warm-up rounds that
 * let the agent start its threads. One `ok`/`FAIL` line, then `N passed, N failed`; exit 1 on a failure, 2
 * when the agent or the runtime is missing. Usage: sa-heap [rounds]   (default 2000). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"
#include "swapagent.h"
#include "test/sa_test.h"

/* glibc's allocator under its own name: this program's malloc counts and passes every call to it. */
extern void *__libc_malloc(size_t n);

static atomic_long mallocs;

void *malloc(size_t n) {
  atomic_fetch_add_explicit(&mallocs, 1, memory_order_relaxed);
  return __libc_malloc(n);
}

#define SAVES 8

/* One layer's forward and backward through the plain ABI functions. */
static int layer_step(const char *g, const uintptr_t *storages) {
  int64_t h[SAVES];
  int bad = abi.enter(g, storages, 1) != 0;
  for (int i = 0; i < SAVES; i++) bad |= (h[i] = abi.save(g, storages[i], 1u << 20, 0)) <= 0;
  bad |= abi.exit(g, storages + SAVES - 1, 1) != 0;
  bad |= abi.bwd_enter(g) != 0;
  for (int i = SAVES - 1; i >= 0; i--) bad |= abi.unpack(h[i]) != storages[i];
  bad |= abi.bwd_exit(g) != 0;
  return bad;
}

int main(int argc, char **argv) {
  long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 2000;
  if (sa_abi_load("sa-heap") != 0) return 2;
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) {
    fprintf(stderr, "sa-heap: the runtime did not start\n");
    return 2;
  }
  uintptr_t storages[SAVES];
  for (int i = 0; i < SAVES; i++) {
    void *p = NULL;
    if (aclrtMalloc(&p, 1u << 20, ACL_MEM_MALLOC_HUGE_FIRST) != 0) return 2;
    storages[i] = (uintptr_t)p;
  }
  int bad = 0;
  for (int i = 0; i < 50; i++) bad |= layer_step("layer.0", storages);
  long before = atomic_load(&mallocs);
  for (long i = 0; i < rounds; i++) bad |= layer_step(i % 2 ? "layer.1" : "layer.0", storages);
  long n = atomic_load(&mallocs) - before, calls = rounds * (4 + 2 * SAVES);
  check(!bad, "calls", "%ld layer steps through the plain functions", rounds);
  /* A few come from the runtime (a thread the agent starts late); one per call would be thousands. */
  check(n <= rounds / 20, "heap", "%ld mallocs during %ld control calls", n, calls);
  printf("%d passed, %d failed\n", sa_passed, sa_failed);
  return sa_failed > 0;
}
