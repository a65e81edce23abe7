/* sa_exec.c: the launch check follows executors, against the real agent on the emulator. Two launches
 * whose tensors the launching thread never made, each with a tensor at address 0 (a storage resized to
 * zero), must both be reported before the kernel runs:
 *   1. a cached executor (made repeatable, launched once) re-pointed with aclSetTensorAddr at address 0,
 *      then launched again with no new tensor at all (MindSpore's executor cache hit);
 *   2. tensors made and GetWorkspaceSize run on one thread, the launch on another (a launch thread).
 * The two cases use different sizes (1 and 2 MiB), so each is its own fault. Prints the agent's stats JSON;
 * exit 0 when the calls succeeded, 2 when the agent or the runtime is missing. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

#define N1 (256 * 1024) /* floats: 1 MiB */
#define N2 (512 * 1024) /* floats: 2 MiB */

static aclrtStream stream;

static aclTensor *tensor(void *p, int64_t n) {
  int64_t dims[1] = {n}, strides[1] = {1};
  return aclCreateTensor(dims, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, dims, 1, p);
}

static void *dev(size_t bytes) {
  void *p = NULL;
  if (aclrtMalloc(&p, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != 0) return NULL;
  return p;
}

static aclOpExecutor *launch_ex; /* case 2: made on the main thread, launched by launcher() */

static void *launcher(void *arg) {
  (void)arg;
  aclnnMul(NULL, 0, launch_ex, stream);
  return NULL;
}

int main(void) {
  int (*stats)(char *, size_t) = dlsym(RTLD_DEFAULT, "swapagent_stats_json");
  if (stats == NULL) {
    fprintf(stderr, "sa-exec: the agent is not preloaded\n");
    return 2;
  }
  static char buf[1 << 16];
  if (stats(buf, sizeof buf) < 0) return 2; /* returns once the agent is up: it reports from then on */
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0 || aclrtCreateStream(&stream) != 0) return 2;
  void *x = dev(N2 * 4), *y = dev(N2 * 4), *z = dev(N2 * 4);
  if (!x || !y || !z) return 2;

  /* 1: a cached executor, launched once, then re-pointed at address 0 and launched again. */
  aclTensor *a = tensor(x, N1), *b = tensor(y, N1), *o = tensor(z, N1);
  uint64_t ws = 0;
  aclOpExecutor *ex = NULL;
  if (aclnnMulGetWorkspaceSize(a, b, o, &ws, &ex) != 0 || aclSetAclOpExecutorRepeatable(ex) != 0 ||
      aclnnMul(NULL, 0, ex, stream) != 0 || aclrtSynchronizeStream(stream) != 0) {
    fprintf(stderr, "sa-exec: first launch of the cached executor failed\n");
    return 2;
  }
  if (aclSetTensorAddr(ex, 0, a, NULL) != 0) {
    fprintf(stderr, "sa-exec: aclSetTensorAddr failed\n");
    return 2;
  }
  aclnnMul(NULL, 0, ex, stream); /* the kernel faults on the device: the check must come first */

  /* 2: tensors and GetWorkspaceSize here, the launch on another thread. */
  aclTensor *c = tensor(NULL, N2), *d = tensor(y, N2), *e = tensor(z, N2);
  if (aclnnMulGetWorkspaceSize(c, d, e, &ws, &launch_ex) != 0) {
    fprintf(stderr, "sa-exec: GetWorkspaceSize of the launch-thread op failed\n");
    return 2;
  }
  pthread_t thr;
  if (pthread_create(&thr, NULL, launcher, NULL) != 0 || pthread_join(thr, NULL) != 0) return 2;

  if (stats(buf, sizeof buf) < 0) return 2;
  printf("%s\n", buf);
  return 0;
}
