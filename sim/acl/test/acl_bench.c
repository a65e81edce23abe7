/* acl_bench.c: the emulator's host-link copy bandwidth. Times D2H and H2D async copies of 64 MiB between
 * device memory and pinned host memory, unthrottled and throttled (ACLSIM_COPY_GBPS=25, and 2; read at aclInit).
 * Prints figures only; never asserts timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acl/acl.h"

#define SIZE (64ul << 20)
#define REPS 8

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run(const char *label) {
  if (aclInit(NULL)) return 1;
  void *d = NULL, *h = NULL;
  aclrtStream s = NULL;
  if (aclrtMalloc(&d, SIZE, ACL_MEM_MALLOC_HUGE_FIRST) || aclrtMallocHost(&h, SIZE) || aclrtCreateStream(&s)) {
    fprintf(stderr, "acl-bench: setup failed: %s\n", aclGetRecentErrMsg());
    return 1;
  }
  memset(h, 1, SIZE);
  /* warm the pages on both sides */
  aclrtMemcpy(d, SIZE, h, SIZE, ACL_MEMCPY_HOST_TO_DEVICE);
  aclrtMemcpy(h, SIZE, d, SIZE, ACL_MEMCPY_DEVICE_TO_HOST);
  const aclrtMemcpyKind kinds[2] = {ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE};
  const char *names[2] = {"D2H", "H2D"};
  for (int k = 0; k < 2; k++) {
    double t0 = now_s();
    for (int r = 0; r < REPS; r++) {
      void *dst = kinds[k] == ACL_MEMCPY_DEVICE_TO_HOST ? h : d;
      void *src = kinds[k] == ACL_MEMCPY_DEVICE_TO_HOST ? d : h;
      if (aclrtMemcpyAsync(dst, SIZE, src, SIZE, kinds[k], s)) return 1;
    }
    if (aclrtSynchronizeStream(s)) return 1;
    double dt = now_s() - t0;
    printf("acl-bench: %-12s %s async copy of 64 MiB: %7.2f GB/s\n", label, names[k],
           (double)SIZE * REPS / dt / 1e9);
  }
  aclrtDestroyStream(s);
  aclrtFreeHost(h);
  aclrtFree(d);
  return aclFinalize() != 0;
}

int main(void) {
  unsetenv("ACLSIM_COPY_GBPS");
  if (run("unthrottled")) return 1;
  setenv("ACLSIM_COPY_GBPS", "25", 1);
  if (run("throttled@25")) return 1;
  /* Where the host's own memcpy is slower than 25 GB/s the line above shows memcpy; this one shows the
   * throttle at work on any host. */
  setenv("ACLSIM_COPY_GBPS", "2", 1);
  if (run("throttled@2")) return 1;
  return 0;
}
