/* sa_bench.c: the shim's cost per intercepted call, measured in one process: the same loop of
 * aclrtSynchronizeEvent on a completed event through the pointer dlsym gives (the interposer, when
 * libswapagent.so is preloaded) and through the real function (dladdr on an interposer names the real
 * function, so dli_saddr is its address). Prints one line of figures; never asserts. */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

#include "acl/acl.h"

typedef aclError (*sync_t)(aclrtEvent);

static double ns_per_call(sync_t f, aclrtEvent ev, long n) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n; i++) f(ev);
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
}

int main(void) {
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) return 1;
  aclrtEvent ev = NULL;
  aclrtStream st = NULL;
  if (aclrtCreateStream(&st) != 0 || aclrtCreateEvent(&ev) != 0 || aclrtRecordEvent(ev, st) != 0 ||
      aclrtSynchronizeStream(st) != 0)
    return 1;
  sync_t hooked = (sync_t)dlsym(RTLD_DEFAULT, "aclrtSynchronizeEvent");
  Dl_info info;
  if (hooked == NULL || dladdr((void *)hooked, &info) == 0 || info.dli_saddr == NULL) return 1;
  sync_t real = (sync_t)info.dli_saddr;
  const long n = 2000000;
  double best_real = 1e9, best_hooked = 1e9;
  for (int r = 0; r < 5; r++) {
    double x = ns_per_call(real, ev, n), y = ns_per_call(hooked, ev, n);
    if (x < best_real) best_real = x;
    if (y < best_hooked) best_hooked = y;
  }
  printf("shim: %.1f ns per intercepted call added (aclrtSynchronizeEvent: real %.1f ns, through the shim %.1f ns;"
         " best of 5 x %ld calls, %s)\n",
         best_hooked - best_real, best_real, best_hooked, n,
         (void *)hooked == (void *)real ? "NOT PRELOADED" : "preloaded");
  return 0;
}
