/* acl_bench.c: the emulator's host-link copy bandwidth. Times D2H and H2D async copies of 64 MiB between
 * device memory and pinned host memory, unthrottled and throttled (ACLSIM_COPY_GBPS=25, and 2; read at aclInit),
 * and the cost of the hazard checker on 50k small kernel launches (ACLSIM_CHECK_HAZARDS=0 and 1). `acl-bench
 * pairs N` times N aclrtMalloc + aclrtFree pairs instead (make bench-probe).
 * Prints figures only; never asserts timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

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

#define LAUNCHES 50000
#define BUFS 128 /* per stream: with the shared input, about 260 live shadow records between syncs */

/* launches: two streams each run Mul(buf, w, buf) over their own buffers (w is shared, read-only), hand an
 * event to each other every 10 launches and sync the device every 1000: race-free, so the checker only
 * costs time. */
static int launches(const char *check) {
  setenv("ACLSIM_CHECK_HAZARDS", check, 1);
  if (aclInit(NULL)) return 1;
  enum { R = 16, C = 16 };
  int64_t dims[2] = {R, C}, strides[2] = {C, 1};
  aclrtStream s[2];
  aclrtEvent ev[2];
  aclTensor *t[2][BUFS], *tw;
  void *w = NULL;
  if (aclrtMalloc(&w, sizeof(float) * R * C, ACL_MEM_MALLOC_HUGE_FIRST) || aclrtMemset(w, 1024, 0, 1024)) return 1;
  tw = aclCreateTensor(dims, 2, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, dims, 2, w);
  for (int k = 0; k < 2; k++) {
    if (aclrtCreateStream(&s[k]) || aclrtCreateEvent(&ev[k])) return 1;
    for (int i = 0; i < BUFS; i++) {
      void *d = NULL;
      if (aclrtMalloc(&d, sizeof(float) * R * C, ACL_MEM_MALLOC_HUGE_FIRST) || aclrtMemset(d, 1024, 0, 1024)) return 1;
      t[k][i] = aclCreateTensor(dims, 2, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, dims, 2, d);
    }
  }
  double t0 = now_s(), enq = 0;
  for (int n = 0; n < LAUNCHES; n++) {
    int k = n & 1;
    uint64_t ws;
    aclOpExecutor *ex;
    double e0 = now_s();
    if (aclnnMulGetWorkspaceSize(t[k][(n / 2) % BUFS], tw, t[k][(n / 2) % BUFS], &ws, &ex) ||
        aclnnMul(NULL, ws, ex, s[k]))
      return 1;
    if (n % 10 == 9 && (aclrtRecordEvent(ev[k], s[k]) || aclrtStreamWaitEvent(s[!k], ev[k]))) return 1;
    enq += now_s() - e0;
    if (n % 1000 == 999 && aclrtSynchronizeDevice()) return 1;
  }
  if (aclrtSynchronizeDevice()) return 1;
  double dt = now_s() - t0;
  printf("acl-bench: %d Mul launches on 2 streams, ACLSIM_CHECK_HAZARDS=%s: %.2f us each (%.2f us to enqueue)\n",
         LAUNCHES, check, dt / LAUNCHES * 1e6, enq / LAUNCHES * 1e6);
  return aclFinalize() != 0; /* tears down buffers, tensors and streams with the runtime */
}

/* pairs: N aclrtMalloc + aclrtFree pairs of 4 KiB, the cheapest calls there are, timed as a whole: the loop
 * `make bench-probe` runs with and without `swapagent probe` to price a probed call. */
static int pairs(long n) {
  if (aclInit(NULL)) return 1;
  for (int round = 0; round < 2; round++) { /* the first round warms the runtime's tables */
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
      void *p = NULL;
      if (aclrtMalloc(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST) || aclrtFree(p)) {
        fprintf(stderr, "acl-bench: pair %ld failed: %s\n", i, aclGetRecentErrMsg());
        return 1;
      }
    }
    if (round == 1) printf("pairs %ld: %.1f ns per aclrtMalloc+aclrtFree pair\n", n, (now_s() - t0) * 1e9 / (double)n);
  }
  return aclFinalize() != 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "pairs") == 0) return pairs(atol(argv[2]));
  if (argc != 1) {
    fprintf(stderr, "usage: acl-bench [pairs N]\n");
    return 2;
  }
  if (launches("0") || launches("1")) return 1;
  unsetenv("ACLSIM_CHECK_HAZARDS");
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
