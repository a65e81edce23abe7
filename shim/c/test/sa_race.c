/* sa_race.c: a job whose stream use defeats the agent's ordering, against the real agent on the emulator.
 * One group on stream 1 produces an internal storage X and saves it; after the region exit, while the
 * agent's copy of X to host is in flight, a kernel on stream 2 reads X. The agent cannot order that
 * kernel (it was queued after the copy was, on a stream the region never used) and must report it as a
 * fault with detected=race. Mode "ordered" launches the same kernel inside the region instead, which the
 * agent orders: no fault. Prints the stats JSON's faults line; exit 0 when the agent's verdict is the one
 * the mode expects, 1 otherwise, 2 when the agent or the runtime is missing.
 * Usage: sa-race race|ordered */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"
#include "swapagent.h"

#define N 65536 /* floats: 256 KiB, above the default small threshold */

static int release_op(void *ctx, int64_t h, uintptr_t ptr, size_t n) {
  (void)ctx, (void)h, (void)n;
  return aclrtFree((void *)ptr) == ACL_SUCCESS ? 0 : -1;
}

static uintptr_t restore_op(void *ctx, int64_t h, size_t n) {
  (void)ctx, (void)h;
  void *p = NULL;
  return aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS ? (uintptr_t)p : 0;
}

static aclTensor *tensor(void *p) {
  int64_t dims[1] = {N}, strides[1] = {1};
  return aclCreateTensor(dims, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, dims, 1, p);
}

/* mul launches out = a * b on stream s. */
static void mul(void *out, void *a, void *b, aclrtStream s) {
  aclTensor *ta = tensor(a), *tb = tensor(b), *to = tensor(out);
  uint64_t ws = 0;
  aclOpExecutor *ex = NULL;
  if (aclnnMulGetWorkspaceSize(ta, tb, to, &ws, &ex) != 0 || aclnnMul(NULL, 0, ex, s) != 0) {
    fprintf(stderr, "sa-race: aclnnMul failed\n");
    exit(2);
  }
  aclDestroyTensor(ta);
  aclDestroyTensor(tb);
  aclDestroyTensor(to);
}

static void *dev(void) {
  void *p = NULL;
  if (aclrtMalloc(&p, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST) != 0 ||
      aclrtMemset(p, N * sizeof(float), 0, N * sizeof(float)) != 0) {
    fprintf(stderr, "sa-race: device memory\n");
    exit(2);
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "race") != 0 && strcmp(argv[1], "ordered") != 0)) {
    fprintf(stderr, "usage: sa-race race|ordered\n");
    return 2;
  }
  int race = strcmp(argv[1], "race") == 0;
  int (*set_ops)(swapagent_release_fn, swapagent_restore_fn, void *) = dlsym(RTLD_DEFAULT, "swapagent_set_storage_ops");
  int (*enter)(const char *, const uintptr_t *, size_t) = dlsym(RTLD_DEFAULT, "swapagent_region_enter");
  int64_t (*save)(const char *, uintptr_t, size_t, uint32_t) = dlsym(RTLD_DEFAULT, "swapagent_save");
  int (*leave)(const char *, const uintptr_t *, size_t) = dlsym(RTLD_DEFAULT, "swapagent_region_exit");
  int (*stats)(char *, size_t) = dlsym(RTLD_DEFAULT, "swapagent_stats_json");
  if (!set_ops || !enter || !save || !leave || !stats) {
    fprintf(stderr, "sa-race: the agent is not preloaded\n");
    return 2;
  }
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) return 2;
  aclrtStream s1 = NULL, s2 = NULL;
  if (aclrtCreateStream(&s1) != 0 || aclrtCreateStream(&s2) != 0) return 2;
  set_ops(release_op, restore_op, NULL);

  void *in = dev(), *x = dev(), *y = dev(), *z = dev();
  uintptr_t inputs[1] = {(uintptr_t)in}, outputs[1] = {(uintptr_t)y};
  enter("g", inputs, 1);
  mul(x, in, in, s1); /* X: internal, produced in the region */
  save("g", (uintptr_t)x, N * sizeof(float), 0);
  mul(y, x, in, s1);
  if (!race) mul(z, x, x, s2); /* inside the region: stream 2 is the region's, the copy waits for it */
  leave("g", outputs, 1);
  if (race) mul(z, x, x, s2); /* after the exit, on a stream the region never used: races the copy */
  aclrtSynchronizeStream(s1);
  aclrtSynchronizeStream(s2);

  static char buf[1 << 16];
  if (stats(buf, sizeof buf) < 0) return 2;
  const char *f = strstr(buf, "\"faults\":");
  int reported = strstr(buf, "\"detected\":\"race\"") != NULL;
  printf("%.200s\n", f ? f : "no faults field");
  printf("race %s\n", reported ? "reported" : "not reported");
  return reported == race ? 0 : 1;
}
