/* sa_bench.c: the shim's cost per intercepted call, measured in one process: the same loop of
 * aclrtSynchronizeEvent on a completed event through the pointer dlsym gives (the interposer, when
 * libswapagent.so is preloaded) and through the real function (dladdr on an interposer names the real
 * function, so dli_saddr is its address). Then the same for MindSpore's executor-cache hit: three
 * aclSetTensorAddr and the launch of a repeatable executor, where the launch check reads the executor
 * table. Prints one line of figures each; never asserts. */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

typedef aclError (*sync_t)(aclrtEvent);
typedef aclnnStatus (*setaddr_t)(aclOpExecutor *, const size_t, aclTensor *, void *);
typedef aclnnStatus (*launch_t)(void *, uint64_t, aclOpExecutor *, aclrtStream);

/* real_of returns the runtime's function behind what dlsym gives for name (itself when not preloaded). */
static void *real_of(void *hooked) {
  Dl_info info;
  return hooked != NULL && dladdr(hooked, &info) != 0 && info.dli_saddr != NULL ? info.dli_saddr : NULL;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ns_per_hit times n cache hits (re-point three tensors, launch) through setaddr and launch. */
static double ns_per_hit(setaddr_t setaddr, launch_t launch, aclOpExecutor *ex, aclTensor **t, void **p,
                         aclrtStream st, long n) {
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    for (int k = 0; k < 3; k++) setaddr(ex, (size_t)k, t[k], p[k]);
    launch(NULL, 0, ex, st);
    if (i % 1024 == 1023) aclrtSynchronizeStream(st); /* keep the queue short */
  }
  aclrtSynchronizeStream(st);
  return (now_ns() - t0) / (double)n;
}

/* bench_cached_launch prints the cost the shim adds to an executor-cache hit. */
static int bench_cached_launch(aclrtStream st) {
  void *p[3];
  aclTensor *t[3];
  int64_t dims[1] = {16}, strides[1] = {1};
  for (int k = 0; k < 3; k++) {
    if (aclrtMalloc(&p[k], 64, ACL_MEM_MALLOC_HUGE_FIRST) != 0 || aclrtMemset(p[k], 64, 0, 64) != 0) return 1;
    t[k] = aclCreateTensor(dims, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, dims, 1, p[k]);
  }
  uint64_t ws = 0;
  aclOpExecutor *ex = NULL;
  if (aclnnMulGetWorkspaceSize(t[0], t[1], t[2], &ws, &ex) != 0 || aclSetAclOpExecutorRepeatable(ex) != 0) return 1;
  setaddr_t setaddr = (setaddr_t)dlsym(RTLD_DEFAULT, "aclSetTensorAddr");
  launch_t launch = (launch_t)dlsym(RTLD_DEFAULT, "aclnnMul");
  setaddr_t real_setaddr = (setaddr_t)real_of((void *)setaddr);
  launch_t real_launch = (launch_t)real_of((void *)launch);
  if (!setaddr || !launch || !real_setaddr || !real_launch) return 1;
  const long n = 100000;
  double best_real = 1e12, best_hooked = 1e12;
  for (int r = 0; r < 5; r++) {
    double x = ns_per_hit(real_setaddr, real_launch, ex, t, p, st, n);
    double y = ns_per_hit(setaddr, launch, ex, t, p, st, n);
    if (x < best_real) best_real = x;
    if (y < best_hooked) best_hooked = y;
  }
  printf("shim: %.1f ns added per executor-cache hit (3 aclSetTensorAddr + a launch of a repeatable executor: "
         "real %.1f ns, through the shim %.1f ns; best of 5 x %ld)\n",
         best_hooked - best_real, best_real, best_hooked, n);
  return 0;
}

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
  return bench_cached_launch(st);
}
