/* acl_test.c: unit tests of the emulated AscendCL runtime (sim/acl) through its public API only.
 * Every test initialises and finalises the runtime itself (aclFinalize resets all state), so env-driven
 * settings are set with setenv before its aclInit. Tests that fault poison the context, so they run in a
 * forked child (forked while the parent's runtime is finalised, i.e. with no worker threads).
 * Prints one line per test and "N passed, N failed"; exits non-zero on any failure. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

static int failures; /* checks failed in the current test */

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      printf("    check failed %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                      \
    }                                                                  \
  } while (0)

#define CHECK_RC(expr, want)                                                                          \
  do {                                                                                                \
    long got_ = (long)(expr);                                                                         \
    if (got_ != (long)(want)) {                                                                       \
      printf("    check failed %s:%d: %s = %ld, want %ld\n", __FILE__, __LINE__, #expr, got_, (long)(want)); \
      failures++;                                                                                     \
    }                                                                                                 \
  } while (0)

#define MIB (1024ul * 1024ul)

static void env_reset(void) {
  unsetenv("ACLSIM_DEVICE_MEM");
  unsetenv("ACLSIM_COPY_GBPS");
  unsetenv("ACLSIM_QUARANTINE");
  unsetenv("ACLSIM_CHECK_HAZARDS");
  unsetenv("ACLSIM_JITTER_US");
  unsetenv("ACLSIM_SEED");
}

static void init(void) { CHECK_RC(aclInit(NULL), ACL_SUCCESS); }
static void fini(void) { CHECK_RC(aclFinalize(), ACL_SUCCESS); }

static size_t free_bytes(void) {
  size_t f = 0, t = 0;
  CHECK_RC(aclrtGetMemInfo(ACL_HBM_MEM, &f, &t), ACL_SUCCESS);
  return f;
}

static aclTensor *tensor2(void *data, int64_t r, int64_t c) {
  int64_t dims[2] = {r, c}, strides[2] = {c, 1};
  return aclCreateTensor(dims, 2, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, dims, 2, data);
}

static void *dev_alloc(size_t n) {
  void *p = NULL;
  CHECK_RC(aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  return p;
}

static void h2d(void *dev, const void *host, size_t n) {
  CHECK_RC(aclrtMemcpy(dev, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
}
static void d2h(void *host, const void *dev, size_t n) {
  CHECK_RC(aclrtMemcpy(host, n, dev, n, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
}

/* ---- init, device ---- */
static void test_init_required(void) {
  void *p;
  aclrtStream s;
  CHECK_RC(aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_UNINITIALIZE);
  CHECK_RC(aclrtCreateStream(&s), ACL_ERROR_UNINITIALIZE);
  CHECK_RC(aclrtSynchronizeStream(NULL), ACL_ERROR_UNINITIALIZE);
  CHECK_RC(aclFinalize(), ACL_ERROR_UNINITIALIZE);
  init();
  CHECK_RC(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
  fini();
  CHECK_RC(aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_UNINITIALIZE);
  init(); /* a finalised runtime can start again */
  p = dev_alloc(64);
  CHECK_RC(aclrtFree(p), ACL_SUCCESS);
  fini();
}

static void test_device(void) {
  init();
  int32_t d = -1;
  uint32_t n = 0;
  CHECK_RC(aclrtGetDevice(&d), ACL_ERROR_RT_CONTEXT_NULL);
  CHECK_RC(aclrtGetDeviceCount(&n), ACL_SUCCESS);
  CHECK(n >= 1);
  CHECK_RC(aclrtSetDevice(0), ACL_SUCCESS);
  CHECK_RC(aclrtGetDevice(&d), ACL_SUCCESS);
  CHECK(d == 0);
  CHECK_RC(aclrtSetDevice((int32_t)n), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_RC(aclrtSetDevice(-1), ACL_ERROR_RT_INVALID_DEVICEID);
  CHECK_RC(aclrtGetDevice(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtGetDeviceCount(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtResetDevice(0), ACL_SUCCESS);
  fini();
}

/* ---- memory ---- */
static void test_rounding_alignment(void) {
  init();
  size_t f0 = free_bytes();
  void *p = dev_alloc(100); /* 100 -> 128, + 32 = 160 */
  CHECK(f0 - free_bytes() == 160);
  void *q = NULL;
  CHECK_RC(aclrtMallocAlign32(&q, 100, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS); /* 128 */
  CHECK(f0 - free_bytes() == 160 + 128);
  void *c = NULL;
  CHECK_RC(aclrtMallocCached(&c, 64, ACL_MEM_MALLOC_NORMAL_ONLY), ACL_SUCCESS); /* 64 + 32 */
  CHECK(f0 - free_bytes() == 160 + 128 + 96);
  CHECK(((uintptr_t)p & 63) == 0 && ((uintptr_t)q & 63) == 0 && ((uintptr_t)c & 63) == 0);
  for (size_t sz = 1; sz < 5000; sz = sz * 3 + 1) {
    void *r = dev_alloc(sz);
    CHECK(((uintptr_t)r & 63) == 0);
    CHECK_RC(aclrtFree(r), ACL_SUCCESS);
  }
  CHECK_RC(aclrtFree(p), ACL_SUCCESS);
  CHECK_RC(aclrtFree(q), ACL_SUCCESS);
  CHECK_RC(aclrtFree(c), ACL_SUCCESS);
  CHECK(free_bytes() == f0);
  /* Device memory lives apart from the heap: a malloc'd host buffer is never mistaken for it. */
  char *h = malloc(4096);
  void *d = dev_alloc(4096);
  CHECK((uintptr_t)d > (uintptr_t)h + 4096 || (uintptr_t)d + 4096 < (uintptr_t)h);
  free(h);
  CHECK_RC(aclrtFree(d), ACL_SUCCESS);
  fini();
}

static void test_bad_memory_args(void) {
  init();
  void *p;
  CHECK_RC(aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocAlign32(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMalloc(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMalloc(&p, 64, (aclrtMemMallocPolicy)99), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtFree(NULL), ACL_ERROR_INVALID_PARAM);
  int local;
  CHECK_RC(aclrtFree(&local), ACL_ERROR_RT_MEMORY_FREE);
  p = dev_alloc(256);
  CHECK_RC(aclrtFree((char *)p + 64), ACL_ERROR_RT_MEMORY_FREE); /* not a base */
  CHECK_RC(aclrtFree(p), ACL_SUCCESS);
  CHECK_RC(aclrtFree(p), ACL_ERROR_RT_MEMORY_FREE); /* double free */
  const char *m = aclGetRecentErrMsg();
  CHECK(m && strstr(m, "aclrtFree"));
  CHECK_RC(aclrtMallocHost(NULL, 64), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocHost(&p, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtFreeHost(&local), ACL_ERROR_RT_MEMORY_FREE);
  CHECK_RC(aclrtFreeHost(NULL), ACL_ERROR_INVALID_PARAM);
  size_t f, t;
  CHECK_RC(aclrtGetMemInfo(ACL_HBM_MEM, NULL, &t), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtGetMemInfo(ACL_HBM_MEM, &f, NULL), ACL_ERROR_INVALID_PARAM);
  fini();
}

static void test_capacity(void) {
  setenv("ACLSIM_DEVICE_MEM", "64M", 1);
  init();
  size_t f, t;
  CHECK_RC(aclrtGetMemInfo(ACL_HBM_MEM, &f, &t), ACL_SUCCESS);
  CHECK(t == 64 * MIB && f == 64 * MIB);
  void *a = dev_alloc(48 * MIB), *b = NULL;
  CHECK_RC(aclrtMalloc(&b, 32 * MIB, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_MEMORY_ALLOCATION);
  const char *m = aclGetRecentErrMsg();
  CHECK(m && strstr(m, "out of device memory"));
  /* exactly the rest, counted in rounded sizes */
  CHECK_RC(aclrtMallocAlign32(&b, 64 * MIB - (48 * MIB + 32), ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
  CHECK(free_bytes() == 0);
  void *x = NULL;
  CHECK_RC(aclrtMallocAlign32(&x, 32, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_MEMORY_ALLOCATION);
  CHECK_RC(aclrtFree(a), ACL_SUCCESS);
  CHECK_RC(aclrtFree(b), ACL_SUCCESS);
  /* freed memory counts as free again even while its range sits in quarantine */
  for (int i = 0; i < 20; i++) {
    void *x = dev_alloc(40 * MIB);
    CHECK_RC(aclrtFree(x), ACL_SUCCESS);
  }
  fini();
  setenv("ACLSIM_DEVICE_MEM", "1G", 1);
  init();
  CHECK_RC(aclrtGetMemInfo(ACL_HBM_MEM, &f, &t), ACL_SUCCESS);
  CHECK(t == 1024 * MIB);
  fini();
  setenv("ACLSIM_DEVICE_MEM", "1048576", 1);
  init();
  CHECK_RC(aclrtGetMemInfo(ACL_HBM_MEM, &f, &t), ACL_SUCCESS);
  CHECK(t == MIB);
  fini();
  unsetenv("ACLSIM_DEVICE_MEM");
  init();
  CHECK_RC(aclrtGetMemInfo(ACL_HBM_MEM, &f, &t), ACL_SUCCESS);
  CHECK(t == 8192 * MIB); /* default 8 GiB */
  fini();
}

static void test_quarantine_reuse(void) {
  init();
  void *a = dev_alloc(8192);
  CHECK_RC(aclrtFree(a), ACL_SUCCESS);
  void *b = dev_alloc(8192);
  CHECK(a != b); /* a freed range is not handed out again right away */
  CHECK_RC(aclrtFree(b), ACL_SUCCESS);
  fini();
}

static void test_copies(void) {
  init();
  enum { N = 4096 };
  unsigned char src[N], dst[N];
  for (int i = 0; i < N; i++) src[i] = (unsigned char)(i * 7);
  void *d = dev_alloc(N), *d2 = dev_alloc(N);
  h2d(d, src, N);
  CHECK_RC(aclrtMemcpy(d2, N, d, N, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_SUCCESS);
  memset(dst, 0, N);
  d2h(dst, d2, N);
  CHECK(memcmp(src, dst, N) == 0);
  /* DEFAULT infers the direction from the pointers */
  memset(dst, 0, N);
  CHECK_RC(aclrtMemset(d2, N, 0, N), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpy(d2, N, src, N, ACL_MEMCPY_DEFAULT), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpy(dst, N, d2, N, ACL_MEMCPY_DEFAULT), ACL_SUCCESS);
  CHECK(memcmp(src, dst, N) == 0);
  CHECK_RC(aclrtMemcpy(dst, N, src, N, ACL_MEMCPY_DEFAULT), ACL_SUCCESS); /* host to host, sync */
  /* memset */
  CHECK_RC(aclrtMemset(d, N, 0x5a, 100), ACL_SUCCESS);
  d2h(dst, d, N);
  CHECK(dst[0] == 0x5a && dst[99] == 0x5a && dst[100] == src[100]);
  /* bad arguments */
  CHECK_RC(aclrtMemcpy(d, 10, src, 11, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpy(NULL, N, src, N, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpy(d, N, NULL, N, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpy(dst, N, src, N, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM); /* dst is host */
  CHECK_RC(aclrtMemcpy(d, N, d2, N, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpy(d, N, src, N, (aclrtMemcpyKind)9), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpyAsync(dst, N, src, N, ACL_MEMCPY_HOST_TO_HOST, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpyAsync(dst, N, src, N, ACL_MEMCPY_DEFAULT, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpyAsync(d, 1, src, 2, ACL_MEMCPY_HOST_TO_DEVICE, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpyAsync(d, N, src, N, ACL_MEMCPY_HOST_TO_DEVICE, (aclrtStream)src), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtMemset(d, 10, 0, 11), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemset(NULL, 10, 0, 1), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemsetAsync(d, 10, 0, 11, NULL), ACL_ERROR_INVALID_PARAM);
  /* pinned host memory: copies are validated against its extent */
  void *h = NULL;
  CHECK_RC(aclrtMallocHost(&h, 1000), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpyAsync(h, N, d, 1001, ACL_MEMCPY_DEVICE_TO_HOST, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemcpyAsync(h, N, d, 1000, ACL_MEMCPY_DEVICE_TO_HOST, NULL), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
  CHECK(((unsigned char *)h)[0] == 0x5a && ((unsigned char *)h)[999] == src[999]);
  CHECK_RC(aclrtFreeHost(h), ACL_SUCCESS);
  CHECK_RC(aclrtFree(d), ACL_SUCCESS);
  CHECK_RC(aclrtFree(d2), ACL_SUCCESS);
  fini();
}

/* ---- streams and events ---- */
static void test_stream_order(void) {
  init();
  aclrtStream s;
  CHECK_RC(aclrtCreateStream(&s), ACL_SUCCESS);
  CHECK_RC(aclrtCreateStream(NULL), ACL_ERROR_INVALID_PARAM);
  enum { N = 1 << 16 };
  unsigned char *h = NULL;
  CHECK_RC(aclrtMallocHost((void **)&h, N), ACL_SUCCESS);
  void *d = dev_alloc(N);
  /* A chain of dependent tasks: each result only holds if they ran in order. */
  for (int v = 1; v <= 50; v++) {
    CHECK_RC(aclrtMemsetAsync(d, N, v, N, s), ACL_SUCCESS);
    CHECK_RC(aclrtMemcpyAsync(h, N, d, N, ACL_MEMCPY_DEVICE_TO_HOST, s), ACL_SUCCESS);
  }
  CHECK_RC(aclrtSynchronizeStream(s), ACL_SUCCESS);
  CHECK(h[0] == 50 && h[N - 1] == 50);
  CHECK_RC(aclrtSynchronizeStreamWithTimeout(s, 1000), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStreamWithTimeout(s, -2), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtSynchronizeDevice(), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStream((aclrtStream)h), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtDestroyStream(s), ACL_SUCCESS);
  CHECK_RC(aclrtDestroyStream(s), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtDestroyStream(NULL), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtFree(d), ACL_SUCCESS);
  CHECK_RC(aclrtFreeHost(h), ACL_SUCCESS);
  fini();
}

/* An event recorded on one stream, waited for, then recorded again on another stream: the wait is for
 * the first record, and a second record that runs first must not release it (as on hardware). Also the
 * status query. */
static void test_event_records_kept_apart(void) {
  setenv("ACLSIM_COPY_GBPS", "0.01", 1); /* 10 MB/s: 1 MiB takes about 0.1 s */
  init();
  const size_t n = 1 * MIB;
  aclrtStream slow, fast, waiter;
  CHECK_RC(aclrtCreateStream(&slow), ACL_SUCCESS);
  CHECK_RC(aclrtCreateStream(&fast), ACL_SUCCESS);
  CHECK_RC(aclrtCreateStream(&waiter), ACL_SUCCESS);
  unsigned char *h = NULL;
  CHECK_RC(aclrtMallocHost((void **)&h, n), ACL_SUCCESS);
  memset(h, 0x5a, n);
  void *d = dev_alloc(n), *d2 = dev_alloc(n);
  aclrtEvent e;
  CHECK_RC(aclrtCreateEvent(&e), ACL_SUCCESS);
  aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  CHECK_RC(aclrtQueryEventStatus(e, &st), ACL_SUCCESS);
  CHECK(st == ACL_EVENT_RECORDED_STATUS_COMPLETE); /* never recorded */
  CHECK_RC(aclrtMemcpyAsync(d, n, h, n, ACL_MEMCPY_HOST_TO_DEVICE, slow), ACL_SUCCESS);
  CHECK_RC(aclrtRecordEvent(e, slow), ACL_SUCCESS);
  CHECK_RC(aclrtQueryEventStatus(e, &st), ACL_SUCCESS);
  CHECK(st == ACL_EVENT_RECORDED_STATUS_NOT_READY);
  CHECK_RC(aclrtStreamWaitEvent(waiter, e), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpyAsync(d2, n, d, n, ACL_MEMCPY_DEVICE_TO_DEVICE, waiter), ACL_SUCCESS);
  CHECK_RC(aclrtRecordEvent(e, fast), ACL_SUCCESS); /* runs at once on an idle stream */
  CHECK_RC(aclrtSynchronizeStream(fast), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStream(waiter), ACL_SUCCESS);
  unsigned char *back = malloc(n);
  CHECK_RC(aclrtMemcpy(back, n, d2, n, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  CHECK(back[0] == 0x5a && back[n - 1] == 0x5a); /* the waiter's copy ran after the slow one landed */
  CHECK_RC(aclrtQueryEventStatus(e, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtQueryEventStatus((aclrtEvent)back, &st), ACL_ERROR_RT_PARAM_INVALID);
  free(back);
  CHECK_RC(aclrtSynchronizeStream(slow), ACL_SUCCESS);
  CHECK_RC(aclrtQueryEventStatus(e, &st), ACL_SUCCESS);
  CHECK(st == ACL_EVENT_RECORDED_STATUS_COMPLETE);
  CHECK_RC(aclrtDestroyEvent(e), ACL_SUCCESS);
  CHECK_RC(aclrtFree(d), ACL_SUCCESS);
  CHECK_RC(aclrtFree(d2), ACL_SUCCESS);
  CHECK_RC(aclrtFreeHost(h), ACL_SUCCESS);
  fini();
  unsetenv("ACLSIM_COPY_GBPS");
}

static void test_async_throttled(void) {
  setenv("ACLSIM_COPY_GBPS", "0.01", 1); /* 10 MB/s: 2 MiB take about 0.2 s */
  init();
  const size_t n = 2 * MIB;
  aclrtStream s;
  CHECK_RC(aclrtCreateStream(&s), ACL_SUCCESS);
  unsigned char *h = NULL;
  CHECK_RC(aclrtMallocHost((void **)&h, n), ACL_SUCCESS);
  memset(h, 0, n);
  void *d = dev_alloc(n);
  CHECK_RC(aclrtMemset(d, n, 0xab, n), ACL_SUCCESS); /* device-side: not throttled */
  aclrtEvent e0, e1;
  CHECK_RC(aclrtCreateEvent(&e0), ACL_SUCCESS);
  CHECK_RC(aclrtCreateEventWithFlag(&e1, ACL_EVENT_TIME_LINE), ACL_SUCCESS);
  float ms = -1;
  CHECK_RC(aclrtEventElapsedTime(&ms, e0, e1), ACL_ERROR_RT_PARAM_INVALID); /* not recorded yet */
  CHECK_RC(aclrtRecordEvent(e0, s), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpyAsync(h, n, d, n, ACL_MEMCPY_DEVICE_TO_HOST, s), ACL_SUCCESS);
  CHECK_RC(aclrtRecordEvent(e1, s), ACL_SUCCESS);
  /* returned at once: the tail of the destination is not written yet */
  CHECK(h[n - 1] == 0);
  CHECK_RC(aclrtSynchronizeStreamWithTimeout(s, 0), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  CHECK_RC(aclrtSynchronizeStreamWithTimeout(s, 5), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  CHECK_RC(aclrtSynchronizeEvent(e1), ACL_SUCCESS);
  CHECK(h[0] == 0xab && h[n - 1] == 0xab);
  CHECK_RC(aclrtSynchronizeStream(s), ACL_SUCCESS);
  CHECK_RC(aclrtEventElapsedTime(&ms, e0, e1), ACL_SUCCESS);
  CHECK(ms > 0);
  printf("    throttled 2 MiB D2H at 0.01 GB/s: %.1f ms\n", ms);
  CHECK_RC(aclrtEventElapsedTime(NULL, e0, e1), ACL_ERROR_INVALID_PARAM);
  /* cross-stream: s2 waits for s's event before reading what s wrote */
  aclrtStream s2;
  CHECK_RC(aclrtCreateStream(&s2), ACL_SUCCESS);
  memset(h, 0x11, n);
  CHECK_RC(aclrtMemcpyAsync(d, n, h, n, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS); /* slow */
  CHECK_RC(aclrtRecordEvent(e0, s), ACL_SUCCESS);
  CHECK_RC(aclrtStreamWaitEvent(s2, e0), ACL_SUCCESS);
  unsigned char *h2 = malloc(n);
  memset(h2, 0, n);
  CHECK_RC(aclrtSetDevice(0), ACL_SUCCESS);
  setenv("ACLSIM_COPY_GBPS", "0", 1); /* read at aclInit only: no effect now */
  CHECK_RC(aclrtMemsetAsync(h2, n, 0, 0, s2), ACL_SUCCESS);
  void *d2 = dev_alloc(n);
  CHECK_RC(aclrtMemcpyAsync(d2, n, d, n, ACL_MEMCPY_DEVICE_TO_DEVICE, s2), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStream(s2), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpy(h2, n, d2, n, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
  CHECK(h2[0] == 0x11 && h2[n - 1] == 0x11);
  CHECK_RC(aclrtStreamWaitEvent(s2, (aclrtEvent)h2), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtRecordEvent((aclrtEvent)h2, s2), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtDestroyEvent(e0), ACL_SUCCESS);
  CHECK_RC(aclrtDestroyEvent(e0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtDestroyEvent(e1), ACL_SUCCESS);
  CHECK_RC(aclrtCreateEvent(NULL), ACL_ERROR_INVALID_PARAM);
  free(h2);
  CHECK_RC(aclrtDestroyStream(s2), ACL_SUCCESS);
  CHECK_RC(aclrtDestroyStream(s), ACL_SUCCESS);
  CHECK_RC(aclrtFree(d), ACL_SUCCESS);
  CHECK_RC(aclrtFree(d2), ACL_SUCCESS);
  CHECK_RC(aclrtFreeHost(h), ACL_SUCCESS);
  fini();
  unsetenv("ACLSIM_COPY_GBPS");
}

/* ---- kernels ---- */
static void upload(void *d, const float *h, size_t n) { h2d(d, h, n * sizeof(float)); }

static aclnnStatus run_mul(aclTensor *a, aclTensor *b, aclTensor *o, aclrtStream s) {
  uint64_t ws = 1;
  aclOpExecutor *ex = NULL;
  aclnnStatus rc = aclnnMulGetWorkspaceSize(a, b, o, &ws, &ex);
  if (rc) return rc;
  return aclnnMul(NULL, ws, ex, s);
}

static void test_kernels(void) {
  init();
  enum { R = 4, C = 8, RC = R * C };
  float a[RC], b[RC], o[RC], row[C];
  for (int i = 0; i < RC; i++) a[i] = (float)i * 0.5f, b[i] = (float)(RC - i);
  for (int j = 0; j < C; j++) row[j] = (float)(j + 1);
  void *da = dev_alloc(sizeof a), *db = dev_alloc(sizeof b), *dc = dev_alloc(sizeof o), *dr = dev_alloc(sizeof row);
  upload(da, a, RC), upload(db, b, RC), upload(dr, row, C);
  aclTensor *ta = tensor2(da, R, C), *tb = tensor2(db, R, C), *tc = tensor2(dc, R, C), *tr = tensor2(dr, 1, C);
  CHECK(ta && tb && tc && tr);
  /* Mul, and Mul broadcasting a [1,C] row over [R,C] */
  CHECK_RC(run_mul(ta, tb, tc, NULL), ACL_SUCCESS);
  d2h(o, dc, sizeof o);
  int bad = 0;
  for (int i = 0; i < RC; i++) bad += o[i] != a[i] * b[i];
  CHECK(bad == 0);
  CHECK_RC(run_mul(ta, tr, tc, NULL), ACL_SUCCESS);
  d2h(o, dc, sizeof o);
  bad = 0;
  for (int i = 0; i < RC; i++) bad += o[i] != a[i] * row[i % C];
  CHECK(bad == 0);
  /* Add with alpha */
  float alpha = 2.0f;
  aclScalar *sa = aclCreateScalar(&alpha, ACL_FLOAT);
  uint64_t ws;
  aclOpExecutor *ex;
  CHECK_RC(aclnnAddGetWorkspaceSize(ta, tb, sa, tc, &ws, &ex), ACL_SUCCESS);
  CHECK(ws == 0);
  CHECK_RC(aclnnAdd(NULL, ws, ex, NULL), ACL_SUCCESS);
  CHECK_RC(aclnnAdd(NULL, ws, ex, NULL), ACL_ERROR_INVALID_PARAM); /* an executor is consumed by its launch */
  d2h(o, dc, sizeof o);
  bad = 0;
  for (int i = 0; i < RC; i++) bad += o[i] != a[i] + 2.0f * b[i];
  CHECK(bad == 0);
  CHECK_RC(aclnnAddGetWorkspaceSize(ta, tb, NULL, tc, &ws, &ex), ACL_ERROR_INVALID_PARAM);
  /* InplaceCopy */
  CHECK_RC(aclnnInplaceCopyGetWorkspaceSize(tc, ta, &ws, &ex), ACL_SUCCESS);
  CHECK_RC(aclnnInplaceCopy(NULL, ws, ex, NULL), ACL_SUCCESS);
  d2h(o, dc, sizeof o);
  CHECK(memcmp(o, a, sizeof a) == 0);
  /* Matmul [R,C] @ [C,R] where the right operand is a transposed view of b ([R,C] with strides {1,C}) */
  float m[R * R], want[R * R];
  void *dm = dev_alloc(sizeof m);
  int64_t tdims[2] = {C, R}, tstr[2] = {1, C}, mdims[2] = {R, R};
  aclTensor *tbT = aclCreateTensor(tdims, 2, ACL_FLOAT, tstr, 0, ACL_FORMAT_ND, tdims, 2, db);
  aclTensor *tm = aclCreateTensor(mdims, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, mdims, 2, dm);
  CHECK_RC(aclnnMatmulGetWorkspaceSize(ta, tbT, tm, 0, &ws, &ex), ACL_SUCCESS);
  CHECK_RC(aclnnMatmul(NULL, ws, ex, NULL), ACL_SUCCESS);
  d2h(m, dm, sizeof m);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < R; j++) {
      float acc = 0;
      for (int k = 0; k < C; k++) acc += a[i * C + k] * b[j * C + k];
      want[i * R + j] = acc;
    }
  CHECK(memcmp(m, want, sizeof m) == 0);
  /* determinism: a second run gives the same bits */
  float m2[R * R];
  CHECK_RC(aclnnMatmulGetWorkspaceSize(ta, tbT, tm, 0, &ws, &ex), ACL_SUCCESS);
  CHECK_RC(aclnnMatmul(NULL, ws, ex, NULL), ACL_SUCCESS);
  d2h(m2, dm, sizeof m2);
  CHECK(memcmp(m, m2, sizeof m) == 0);
  /* rejected at GetWorkspaceSize: shapes, dtypes, NULLs */
  CHECK_RC(aclnnMatmulGetWorkspaceSize(ta, tb, tm, 0, &ws, &ex), ACL_ERROR_INVALID_PARAM);
  int64_t d3[3] = {3, 1, 1};
  aclTensor *t3 = aclCreateTensor(d3, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, d3, 1, db); /* 3 elements */
  CHECK_RC(aclnnMulGetWorkspaceSize(ta, t3, tc, &ws, &ex), ACL_ERROR_INVALID_PARAM);
  aclTensor *th = aclCreateTensor(mdims, 2, ACL_FLOAT16, NULL, 0, ACL_FORMAT_ND, mdims, 2, dm);
  CHECK_RC(aclnnMulGetWorkspaceSize(th, th, th, &ws, &ex), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclnnMulGetWorkspaceSize(NULL, tb, tc, &ws, &ex), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclnnMulGetWorkspaceSize(ta, tb, tc, NULL, &ex), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclnnMulGetWorkspaceSize(ta, tb, tc, &ws, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclnnMul(NULL, 0, NULL, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclnnInplaceCopyGetWorkspaceSize(th, ta, &ws, &ex), ACL_ERROR_INVALID_PARAM);
  CHECK(aclCreateTensor(NULL, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, NULL, 0, da) == NULL);
  CHECK(aclCreateTensor(mdims, 2, (aclDataType)99, NULL, 0, ACL_FORMAT_ND, NULL, 0, da) == NULL);
  CHECK(aclCreateScalar(NULL, ACL_FLOAT) == NULL);
  aclTensor *all[] = {ta, tb, tc, tr, tbT, tm, t3, th};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) CHECK_RC(aclDestroyTensor(all[i]), ACL_SUCCESS);
  CHECK_RC(aclDestroyTensor(ta), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclDestroyScalar(sa), ACL_SUCCESS);
  CHECK_RC(aclDestroyScalar(sa), ACL_ERROR_INVALID_PARAM);
  void *ptrs[] = {da, db, dc, dr, dm};
  for (size_t i = 0; i < 5; i++) CHECK_RC(aclrtFree(ptrs[i]), ACL_SUCCESS);
  fini();
}

static void test_matmul_workload_size(void) {
  init();
  /* the workload's shape: [4096,32] @ [32,64] */
  enum { M = 4096, K = 32, N = 64 };
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N), *o = malloc(sizeof(float) * M * N);
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 37) % 101) / 101.0f;
  for (int i = 0; i < K * N; i++) b[i] = (float)((i * 53) % 89) / 89.0f;
  void *da = dev_alloc(sizeof(float) * M * K), *db = dev_alloc(sizeof(float) * K * N),
       *dc = dev_alloc(sizeof(float) * M * N);
  upload(da, a, (size_t)M * K), upload(db, b, (size_t)K * N);
  aclTensor *ta = tensor2(da, M, K), *tb = tensor2(db, K, N), *tc = tensor2(dc, M, N);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < 10; r++) {
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK_RC(aclnnMatmulGetWorkspaceSize(ta, tb, tc, 0, &ws, &ex), ACL_SUCCESS);
    CHECK_RC(aclnnMatmul(NULL, ws, ex, NULL), ACL_SUCCESS);
  }
  CHECK_RC(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  d2h(o, dc, sizeof(float) * M * N);
  int bad = 0;
  for (int i = 0; i < M; i += 511)
    for (int j = 0; j < N; j++) {
      float acc = 0;
      for (int k = 0; k < K; k++) acc += a[i * K + k] * b[k * N + j];
      bad += acc != o[i * N + j];
    }
  CHECK(bad == 0);
  printf("    matmul 4096x32x64: %.2f ms each\n",
         ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / 10);
  aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(tc);
  aclrtFree(da), aclrtFree(db), aclrtFree(dc);
  free(a), free(b), free(o);
  fini();
}

/* ---- VMM ---- */
#define GRAN (2 * MIB)

static aclrtPhysicalMemProp dev_prop(void) {
  aclrtPhysicalMemProp p;
  memset(&p, 0, sizeof p);
  p.handleType = ACL_MEM_HANDLE_TYPE_NONE;
  p.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
  p.memAttr = ACL_HBM_MEM_HUGE;
  p.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  return p;
}

static char *reserve(size_t n) {
  void *va = NULL;
  CHECK_RC(aclrtReserveMemAddress(&va, n, 0, NULL, 0), ACL_SUCCESS);
  return va;
}

static aclrtDrvMemHandle phys(size_t n) {
  aclrtPhysicalMemProp p = dev_prop();
  aclrtDrvMemHandle h = NULL;
  CHECK_RC(aclrtMallocPhysical(&h, n, &p, 0), ACL_SUCCESS);
  return h;
}

static int bad_products(const float *got, const float *a, const float *b, int n) {
  int bad = 0;
  for (int i = 0; i < n; i++) bad += got[i] != a[i] * b[i];
  return bad;
}

/* MindSpore's pattern: one reservation, 2 MiB physical chunks mapped into it, a tensor across two chunks,
 * and a chunk unmapped and mapped again elsewhere with its bytes. */
static void test_vmm(void) {
  init();
  aclrtPhysicalMemProp prop = dev_prop();
  size_t g = 0, g2 = 0;
  CHECK_RC(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g), ACL_SUCCESS);
  CHECK_RC(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED, &g2), ACL_SUCCESS);
  CHECK(g == GRAN && g2 == GRAN);
  size_t f0 = free_bytes();
  char *va = reserve(4 * GRAN);
  CHECK(va && (uintptr_t)va % GRAN == 0);
  CHECK(free_bytes() == f0); /* address space only */
  aclrtDrvMemHandle h[3];
  for (int i = 0; i < 3; i++) h[i] = phys(GRAN);
  CHECK(free_bytes() == f0 - 3 * GRAN); /* physical memory counts like aclrtMalloc's */
  for (int i = 0; i < 3; i++) CHECK_RC(aclrtMapMem(va + i * GRAN, GRAN, 0, h[i], 0), ACL_SUCCESS);
  enum { R = 512, C = 512, N = R * C }; /* 1 MiB of floats */
  float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *o = malloc(N * sizeof *o);
  for (int i = 0; i < N; i++) a[i] = (float)(i % 1000) * 0.25f, b[i] = (float)(i % 7) - 3.0f;
  char *da = va, *db = va + 3 * MIB / 2, *dout = va + 2 * GRAN; /* b spans chunks 0 and 1 */
  upload(da, a, N), upload(db, b, N);
  CHECK_RC(aclrtMemset(dout, GRAN, 0, GRAN), ACL_SUCCESS);
  aclTensor *ta = tensor2(da, R, C), *tb = tensor2(db, R, C), *to = tensor2(dout, R, C);
  CHECK_RC(run_mul(ta, tb, to, NULL), ACL_SUCCESS);
  d2h(o, dout, N * sizeof *o);
  CHECK(bad_products(o, a, b, N) == 0);
  /* the result's chunk, unmapped and mapped at the end of the reservation, still holds it */
  CHECK_RC(aclrtUnmapMem(dout), ACL_SUCCESS);
  CHECK_RC(aclrtMapMem(va + 3 * GRAN, GRAN, 0, h[2], 0), ACL_SUCCESS);
  memset(o, 0, N * sizeof *o);
  d2h(o, va + 3 * GRAN, N * sizeof *o);
  CHECK(bad_products(o, a, b, N) == 0);
  CHECK(free_bytes() == f0 - 3 * GRAN);
  CHECK_RC(aclrtUnmapMem(va), ACL_SUCCESS);
  CHECK_RC(aclrtUnmapMem(va + GRAN), ACL_SUCCESS);
  CHECK_RC(aclrtUnmapMem(va + 3 * GRAN), ACL_SUCCESS);
  for (int i = 0; i < 3; i++) CHECK_RC(aclrtFreePhysical(h[i]), ACL_SUCCESS);
  CHECK_RC(aclrtReleaseMemAddress(va), ACL_SUCCESS);
  CHECK(free_bytes() == f0);
  aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(to);
  free(a), free(b), free(o);
  fini();
}

/* Every misuse: bad arguments 100000; map/unmap against the state 107000; frees of what is not live or
 * still in use 207002; out of capacity or address space 207001. */
static void test_vmm_misuse(void) {
  setenv("ACLSIM_DEVICE_MEM", "64M", 1);
  init();
  aclrtPhysicalMemProp prop = dev_prop(), host = dev_prop();
  host.location.type = ACL_MEM_LOCATION_TYPE_HOST;
  size_t g;
  void *got = NULL;
  aclrtDrvMemHandle h = NULL, bogus = (aclrtDrvMemHandle)(uintptr_t)0x1000;
  const aclrtMemGranularityOptions min = ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM;
  CHECK_RC(aclrtMemGetAllocationGranularity(NULL, min, &g), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemGetAllocationGranularity(&prop, min, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMemGetAllocationGranularity(&prop, (aclrtMemGranularityOptions)2, &g), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtReserveMemAddress(NULL, GRAN, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtReserveMemAddress(&got, 0, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtReserveMemAddress(&got, GRAN + 4096, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtReserveMemAddress(&got, GRAN, GRAN, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtReserveMemAddress(&got, GRAN, 0, NULL, 2), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocPhysical(NULL, GRAN, &prop, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocPhysical(&h, GRAN, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocPhysical(&h, GRAN, &host, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocPhysical(&h, 0, &prop, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocPhysical(&h, MIB, &prop, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocPhysical(&h, GRAN, &prop, 1), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMallocPhysical(&h, 33 * GRAN, &prop, 0), ACL_ERROR_RT_MEMORY_ALLOCATION); /* 64 MiB hold 32 */
  char *va = reserve(4 * GRAN);
  aclrtDrvMemHandle h1 = phys(GRAN), h2 = phys(GRAN), h4 = phys(2 * GRAN);
  CHECK_RC(aclrtMapMem(NULL, GRAN, 0, h1, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMapMem(va, GRAN, 0, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtMapMem(va, GRAN, 1, h1, 0), ACL_ERROR_INVALID_PARAM);        /* offset */
  CHECK_RC(aclrtMapMem(va, GRAN, 0, h1, 1), ACL_ERROR_INVALID_PARAM);        /* flags */
  CHECK_RC(aclrtMapMem(va + 4096, GRAN, 0, h1, 0), ACL_ERROR_INVALID_PARAM); /* not granularity-aligned */
  CHECK_RC(aclrtMapMem(va, 2 * GRAN, 0, h1, 0), ACL_ERROR_INVALID_PARAM);    /* not the physical size */
  CHECK_RC(aclrtMapMem(va, GRAN, 0, bogus, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtMapMem(va + 3 * GRAN, 2 * GRAN, 0, h4, 0), ACL_ERROR_RT_PARAM_INVALID); /* past the end */
  CHECK_RC(aclrtMapMem(va + 4 * GRAN, GRAN, 0, h1, 0), ACL_ERROR_RT_PARAM_INVALID);     /* not reserved */
  CHECK_RC(aclrtMapMem(va, 2 * GRAN, 0, h4, 0), ACL_SUCCESS);
  CHECK_RC(aclrtMapMem(va + GRAN, GRAN, 0, h1, 0), ACL_ERROR_RT_PARAM_INVALID);         /* overlaps */
  CHECK_RC(aclrtMapMem(va + 2 * GRAN, 2 * GRAN, 0, h4, 0), ACL_ERROR_RT_PARAM_INVALID); /* already mapped */
  CHECK_RC(aclrtMapMem(va + 2 * GRAN, GRAN, 0, h1, 0), ACL_SUCCESS);
  CHECK_RC(aclrtMapMem(va + 2 * GRAN, GRAN, 0, h2, 0), ACL_ERROR_RT_PARAM_INVALID); /* mapping twice */
  CHECK_RC(aclrtUnmapMem(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtUnmapMem(va + GRAN), ACL_ERROR_RT_PARAM_INVALID);     /* inside a mapping, not its start */
  CHECK_RC(aclrtUnmapMem(va + 3 * GRAN), ACL_ERROR_RT_PARAM_INVALID); /* not mapped */
  CHECK_RC(aclrtFreePhysical(h4), ACL_ERROR_RT_MEMORY_FREE);          /* mapped */
  CHECK_RC(aclrtReleaseMemAddress(va), ACL_ERROR_RT_MEMORY_FREE);     /* has mappings */
  const char *m = aclGetRecentErrMsg();
  CHECK(m && strstr(m, "aclrtReleaseMemAddress") && strstr(m, "unmap them first"));
  CHECK_RC(aclrtReleaseMemAddress(va + GRAN), ACL_ERROR_RT_MEMORY_FREE); /* not a reservation */
  CHECK_RC(aclrtFree(va), ACL_ERROR_RT_MEMORY_FREE);                     /* nor an allocation */
  CHECK_RC(aclrtReleaseMemAddress(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtFreePhysical(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtFreePhysical(bogus), ACL_ERROR_RT_MEMORY_FREE);
  CHECK_RC(aclrtUnmapMem(va), ACL_SUCCESS);
  CHECK_RC(aclrtUnmapMem(va), ACL_ERROR_RT_PARAM_INVALID); /* twice */
  CHECK_RC(aclrtUnmapMem(va + 2 * GRAN), ACL_SUCCESS);
  aclrtDrvMemHandle all[3] = {h1, h2, h4};
  for (int i = 0; i < 3; i++) CHECK_RC(aclrtFreePhysical(all[i]), ACL_SUCCESS);
  CHECK_RC(aclrtFreePhysical(h1), ACL_ERROR_RT_MEMORY_FREE);
  CHECK_RC(aclrtReleaseMemAddress(va), ACL_SUCCESS);
  CHECK_RC(aclrtReleaseMemAddress(va), ACL_ERROR_RT_MEMORY_FREE);
  /* expectPtr: aligned and free gives that address; misaligned 107000; taken 207001 */
  char *a = reserve(GRAN);
  CHECK_RC(aclrtReserveMemAddress(&got, GRAN, 0, a + 4096, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtReserveMemAddress(&got, GRAN, 0, a, 0), ACL_ERROR_RT_MEMORY_ALLOCATION);
  CHECK_RC(aclrtReserveMemAddress(&got, GRAN, 0, a + 8 * GRAN, 0), ACL_SUCCESS);
  CHECK(got == a + 8 * GRAN);
  CHECK_RC(aclrtReleaseMemAddress(got), ACL_SUCCESS);
  CHECK_RC(aclrtReleaseMemAddress(a), ACL_SUCCESS);
  CHECK(free_bytes() == 64 * MIB);
  fini();
  unsetenv("ACLSIM_DEVICE_MEM");
}

/* ---- executors ---- */
struct relaunch {
  aclOpExecutor *ex;
  aclrtStream s;
};

static void *launch_on_thread(void *arg) {
  struct relaunch *r = arg;
  return (void *)(intptr_t)aclnnMul(NULL, 0, r->ex, r->s);
}

/* A repeatable executor relaunched with new addresses (any stream, any thread); a launch takes the addresses
 * as they are at the launch; the destroy rules. */
static void test_executors(void) {
  setenv("ACLSIM_COPY_GBPS", "0.01", 1); /* 1 MiB takes about 0.1 s */
  init();
  enum { N = 1024 };
  float a[N], a2[N], b[N], o[N];
  for (int i = 0; i < N; i++) a[i] = (float)i, a2[i] = (float)(2 * i + 1), b[i] = (float)(i % 5) - 2.0f;
  void *da = dev_alloc(sizeof a), *da2 = dev_alloc(sizeof a), *db = dev_alloc(sizeof b), *dc = dev_alloc(sizeof o),
       *dc2 = dev_alloc(sizeof o), *slow = dev_alloc(MIB);
  upload(da, a, N), upload(da2, a2, N), upload(db, b, N);
  aclTensor *ta = tensor2(da, 32, 32), *tb = tensor2(db, 32, 32), *tc = tensor2(dc, 32, 32);
  aclrtStream s, s2;
  CHECK_RC(aclrtCreateStream(&s), ACL_SUCCESS);
  CHECK_RC(aclrtCreateStream(&s2), ACL_SUCCESS);
  uint64_t ws;
  aclOpExecutor *ex;
  CHECK_RC(aclnnMulGetWorkspaceSize(ta, tb, tc, &ws, &ex), ACL_SUCCESS);
  CHECK_RC(aclSetAclOpExecutorRepeatable(ex), ACL_SUCCESS);
  char *big = calloc(1, MIB);
  CHECK_RC(aclrtMemcpyAsync(slow, MIB, big, MIB, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_SUCCESS);
  CHECK_RC(aclnnMul(NULL, ws, ex, s), ACL_SUCCESS); /* queued behind the slow copy */
  CHECK_RC(aclSetTensorAddr(ex, 0, ta, da2), ACL_SUCCESS);
  CHECK_RC(aclSetTensorAddr(ex, 2, tc, dc2), ACL_SUCCESS);
  CHECK_RC(aclnnMul(NULL, ws, ex, s2), ACL_SUCCESS); /* runs first, on the new addresses */
  CHECK_RC(aclrtSynchronizeDevice(), ACL_SUCCESS);
  d2h(o, dc, sizeof o);
  CHECK(bad_products(o, a, b, N) == 0); /* the first launch kept its own addresses */
  d2h(o, dc2, sizeof o);
  CHECK(bad_products(o, a2, b, N) == 0);
  CHECK_RC(aclSetTensorAddr(ex, 2, tc, dc), ACL_SUCCESS);
  CHECK_RC(aclrtMemset(dc, sizeof o, 0, sizeof o), ACL_SUCCESS);
  struct relaunch r = {ex, s};
  pthread_t th;
  void *thread_rc = (void *)1;
  pthread_create(&th, NULL, launch_on_thread, &r);
  pthread_join(th, &thread_rc);
  CHECK(thread_rc == NULL);
  CHECK_RC(aclrtSynchronizeStream(s), ACL_SUCCESS);
  d2h(o, dc, sizeof o);
  CHECK(bad_products(o, a2, b, N) == 0);
  CHECK_RC(aclSetTensorAddr(ex, 0, tb, da), ACL_ERROR_INVALID_PARAM); /* not the executor's tensor 0 */
  CHECK_RC(aclSetTensorAddr(ex, 3, ta, da), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclSetTensorAddr(NULL, 0, ta, da), ACL_ERROR_INVALID_PARAM);
  aclTensor *tl = tensor2(da, 32, 32);
  const aclTensor *members[1] = {tl};
  aclTensorList *list = aclCreateTensorList(members, 1);
  CHECK(list != NULL);
  CHECK_RC(aclSetDynamicTensorAddr(ex, 0, 0, list, da), ACL_ERROR_INVALID_PARAM); /* Mul takes no list */
  CHECK_RC(aclSetDynamicTensorAddr(ex, 0, 1, list, da), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclSetDynamicTensorAddr(ex, 0, 0, (aclTensorList *)ta, da), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclDestroyAclOpExecutor(ex), ACL_SUCCESS);
  CHECK_RC(aclnnMul(NULL, ws, ex, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclDestroyAclOpExecutor(ex), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclSetAclOpExecutorRepeatable(ex), ACL_ERROR_INVALID_PARAM);
  /* not repeatable: one launch consumes it; one never launched may be destroyed */
  CHECK_RC(aclnnMulGetWorkspaceSize(ta, tb, tc, &ws, &ex), ACL_SUCCESS);
  CHECK_RC(aclnnMul(NULL, ws, ex, NULL), ACL_SUCCESS);
  CHECK_RC(aclnnMul(NULL, ws, ex, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclDestroyAclOpExecutor(ex), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclnnMulGetWorkspaceSize(ta, tb, tc, &ws, &ex), ACL_SUCCESS);
  CHECK_RC(aclDestroyAclOpExecutor(ex), ACL_SUCCESS);
  CHECK_RC(aclnnMul(NULL, ws, ex, NULL), ACL_ERROR_INVALID_PARAM);
  /* a tensor list owns its tensors */
  CHECK_RC(aclDestroyTensorList(list), ACL_SUCCESS);
  CHECK_RC(aclDestroyTensor(tl), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclDestroyTensorList(list), ACL_ERROR_INVALID_PARAM);
  CHECK(aclCreateTensorList(NULL, 1) == NULL);
  CHECK(aclCreateTensorList(members, 1) == NULL); /* tl is gone */
  aclTensorList *empty = aclCreateTensorList(NULL, 0);
  CHECK(empty != NULL);
  CHECK_RC(aclDestroyTensorList(empty), ACL_SUCCESS);
  aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(tc);
  void *ptrs[] = {da, da2, db, dc, dc2, slow};
  for (size_t i = 0; i < 6; i++) CHECK_RC(aclrtFree(ptrs[i]), ACL_SUCCESS);
  CHECK_RC(aclrtDestroyStream(s), ACL_SUCCESS);
  CHECK_RC(aclrtDestroyStream(s2), ACL_SUCCESS);
  free(big);
  fini();
  unsetenv("ACLSIM_COPY_GBPS");
}

/* ---- the other CANN 8 calls ---- */
static void test_stream_event_calls(void) {
  setenv("ACLSIM_COPY_GBPS", "0.01", 1); /* 1 MiB takes about 0.1 s */
  init();
  const size_t n = MIB;
  aclrtStream slow, fast;
  CHECK_RC(aclrtCreateStreamWithConfig(&slow, 0, 0x1 /* ACL_STREAM_FAST_LAUNCH */), ACL_SUCCESS);
  CHECK_RC(aclrtCreateStreamWithConfig(&fast, 99, 0x80), ACL_SUCCESS); /* clamped, and a plain stream */
  CHECK_RC(aclrtCreateStreamWithConfig(NULL, 0, 0), ACL_ERROR_INVALID_PARAM);
  aclrtStreamStatus st = ACL_STREAM_STATUS_RESERVED;
  CHECK_RC(aclrtStreamQuery(slow, &st), ACL_SUCCESS);
  CHECK(st == ACL_STREAM_STATUS_COMPLETE);
  CHECK_RC(aclrtStreamQuery(NULL, &st), ACL_SUCCESS);
  CHECK_RC(aclrtStreamQuery(slow, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtStreamQuery((aclrtStream)&st, &st), ACL_ERROR_RT_PARAM_INVALID);
  aclrtEvent e, bad;
  CHECK_RC(aclrtCreateEventExWithFlag(&e, ACL_EVENT_SYNC), ACL_SUCCESS);
  CHECK_RC(aclrtCreateEventExWithFlag(NULL, ACL_EVENT_SYNC), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtCreateEventExWithFlag(&bad, 0x100), ACL_ERROR_INVALID_PARAM);
  void *h = NULL, *d = dev_alloc(n), *d2 = dev_alloc(64);
  CHECK_RC(aclrtMallocHost(&h, n), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpyAsync(d, n, h, n, ACL_MEMCPY_HOST_TO_DEVICE, slow), ACL_SUCCESS);
  CHECK_RC(aclrtRecordEvent(e, slow), ACL_SUCCESS);
  CHECK_RC(aclrtStreamQuery(slow, &st), ACL_SUCCESS);
  CHECK(st == ACL_STREAM_STATUS_NOT_READY);
  CHECK_RC(aclrtSynchronizeDeviceWithTimeout(0), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  CHECK_RC(aclrtSynchronizeDeviceWithTimeout(5), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  const char *m = aclGetRecentErrMsg();
  CHECK(m && strstr(m, "aclrtSynchronizeDeviceWithTimeout"));
  CHECK_RC(aclrtSynchronizeDeviceWithTimeout(-2), ACL_ERROR_INVALID_PARAM);
  /* a reset event counts as never recorded: what waits on it afterwards does not block */
  CHECK_RC(aclrtResetEvent(e, slow), ACL_SUCCESS);
  aclrtEventRecordedStatus es = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  CHECK_RC(aclrtQueryEventStatus(e, &es), ACL_SUCCESS);
  CHECK(es == ACL_EVENT_RECORDED_STATUS_COMPLETE);
  CHECK_RC(aclrtStreamWaitEvent(fast, e), ACL_SUCCESS);
  CHECK_RC(aclrtMemsetAsync(d2, 64, 1, 64, fast), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStream(fast), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeEvent(e), ACL_SUCCESS);
  CHECK_RC(aclrtStreamQuery(slow, &st), ACL_SUCCESS);
  CHECK(st == ACL_STREAM_STATUS_NOT_READY); /* neither waited for the slow copy */
  float ms = -1;
  CHECK_RC(aclrtEventElapsedTime(&ms, e, e), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtResetEvent((aclrtEvent)h, slow), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtResetEvent(e, (aclrtStream)h), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_RC(aclrtSynchronizeDeviceWithTimeout(5000), ACL_SUCCESS);
  CHECK_RC(aclrtStreamQuery(slow, &st), ACL_SUCCESS);
  CHECK(st == ACL_STREAM_STATUS_COMPLETE);
  /* recorded again after the reset, the event works as before */
  CHECK_RC(aclrtRecordEvent(e, slow), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeEvent(e), ACL_SUCCESS);
  CHECK_RC(aclrtEventElapsedTime(&ms, e, e), ACL_SUCCESS);
  CHECK(ms == 0);
  CHECK_RC(aclrtDestroyEvent(e), ACL_SUCCESS);
  CHECK_RC(aclrtDestroyStream(slow), ACL_SUCCESS);
  CHECK_RC(aclrtDestroyStream(fast), ACL_SUCCESS);
  CHECK_RC(aclrtFree(d), ACL_SUCCESS);
  CHECK_RC(aclrtFree(d2), ACL_SUCCESS);
  CHECK_RC(aclrtFreeHost(h), ACL_SUCCESS);
  fini();
  unsetenv("ACLSIM_COPY_GBPS");
}

static void *fail_on_thread(void *arg) {
  (void)arg;
  void *p;
  aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST);
  return (void *)(intptr_t)aclrtGetLastError(ACL_RT_THREAD_LEVEL);
}

static void test_last_error(void) {
  init();
  aclrtGetLastError(ACL_RT_THREAD_LEVEL); /* what earlier tests left */
  CHECK_RC(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);
  void *p;
  CHECK_RC(aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtFree(&p), ACL_ERROR_RT_MEMORY_FREE);
  CHECK_RC(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_MEMORY_FREE); /* the latest */
  CHECK_RC(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);              /* and cleared */
  pthread_t th;
  void *theirs = NULL;
  pthread_create(&th, NULL, fail_on_thread, NULL);
  pthread_join(th, &theirs);
  CHECK((intptr_t)theirs == ACL_ERROR_INVALID_PARAM);
  CHECK_RC(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS); /* per thread */
  CHECK_RC(aclrtGetLastError((aclrtLastErrLevel)1), ACL_ERROR_INVALID_PARAM);
  fini();
}

/* ---- exception info ---- */
static void test_exception_getters(void) {
  CHECK(aclrtGetTaskIdFromExceptionInfo(NULL) == 0xFFFFFFFFu);
  CHECK(aclrtGetStreamIdFromExceptionInfo(NULL) == 0xFFFFFFFFu);
  CHECK(aclrtGetThreadIdFromExceptionInfo(NULL) == 0xFFFFFFFFu);
  CHECK(aclrtGetDeviceIdFromExceptionInfo(NULL) == 0xFFFFFFFFu);
  CHECK(aclrtGetErrorCodeFromExceptionInfo(NULL) == 0xFFFFFFFFu);
  CHECK_RC(aclrtSetExceptionInfoCallback(NULL), ACL_ERROR_UNINITIALIZE);
}

/* ---- thread safety ---- */
static void *hammer(void *arg) {
  (void)arg;
  aclrtStream s;
  if (aclrtCreateStream(&s)) return (void *)1;
  unsigned char buf[4096], back[4096];
  long bad = 0;
  for (int i = 0; i < 200; i++) {
    void *d = NULL;
    if (aclrtMalloc(&d, 4096, ACL_MEM_MALLOC_HUGE_FIRST)) {
      bad++;
      continue;
    }
    memset(buf, i, sizeof buf);
    bad += aclrtMemcpyAsync(d, 4096, buf, 4096, ACL_MEMCPY_HOST_TO_DEVICE, s) != 0;
    bad += aclrtMemcpyAsync(back, 4096, d, 4096, ACL_MEMCPY_DEVICE_TO_HOST, s) != 0;
    bad += aclrtSynchronizeStream(s) != 0;
    bad += memcmp(buf, back, sizeof buf) != 0;
    bad += aclrtFree(d) != 0;
  }
  bad += aclrtDestroyStream(s) != 0;
  return (void *)bad;
}

static void test_threads(void) {
  init();
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, hammer, NULL);
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(th[i], &r);
    CHECK(r == NULL);
  }
  fini();
}

/* ---- faults (in children) ---- */
static struct {
  int calls;
  uint32_t task, stream, thread, device, code;
} cb_seen;

static void on_exception(aclrtExceptionInfo *info) {
  cb_seen.calls++;
  cb_seen.task = aclrtGetTaskIdFromExceptionInfo(info);
  cb_seen.stream = aclrtGetStreamIdFromExceptionInfo(info);
  cb_seen.thread = aclrtGetThreadIdFromExceptionInfo(info);
  cb_seen.device = aclrtGetDeviceIdFromExceptionInfo(info);
  cb_seen.code = aclrtGetErrorCodeFromExceptionInfo(info);
}

/* capture_stderr sends fd 2 to a temp file; read_capture returns what was written. */
static int capture_stderr(void) {
  char path[] = "/tmp/acl-test-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  unlink(path);
  dup2(fd, 2);
  return fd;
}

static char *read_capture(int fd) {
  static char buf[65536]; /* room for the 100 hazard lines the cap test prints */
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = 0;
  return buf;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
  return n;
}

/* fault_null: Mul on a [4096,64] float tensor at address 0 (the RoPE shape of the workload). */
static void fault_null(void) {
  int fd = capture_stderr();
  init();
  CHECK_RC(aclrtSetDevice(0), ACL_SUCCESS);
  CHECK_RC(aclrtSetExceptionInfoCallback(on_exception), ACL_SUCCESS);
  aclrtStream s, other;
  CHECK_RC(aclrtCreateStream(&s), ACL_SUCCESS);
  CHECK_RC(aclrtCreateStream(&other), ACL_SUCCESS);
  const size_t bytes = 4096 * 64 * sizeof(float);
  void *b = dev_alloc(bytes), *o = dev_alloc(bytes);
  CHECK_RC(aclrtMemset(o, bytes, 0x7f, bytes), ACL_SUCCESS);
  aclTensor *ta = tensor2(NULL, 4096, 64), *tb = tensor2(b, 4096, 64), *to = tensor2(o, 4096, 64);
  CHECK_RC(run_mul(ta, tb, to, s), ACL_SUCCESS); /* the launch only enqueues */
  CHECK_RC(aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK(((unsigned char *)o)[0] == 0x7f); /* the kernel did not run (peeking at emulated memory) */
  void *p = NULL;
  CHECK_RC(aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  CHECK_RC(aclrtSynchronizeStream(s), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  CHECK_RC(aclrtSynchronizeStream(other), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  CHECK_RC(aclrtSynchronizeStreamWithTimeout(other, -1), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  CHECK_RC(aclrtMemcpy(p, 1, b, 1, ACL_MEMCPY_DEFAULT), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  CHECK_RC(run_mul(tb, tb, to, s), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  const char *m = aclGetRecentErrMsg();
  CHECK(m != NULL);
  if (m) {
    CHECK(strstr(m, "there is an aicore error exception, core id is 0, error code = 0x800000\n"));
    CHECK(strstr(m, "errorStr: The DDR address of the MTE instruction is out of range."));
    CHECK(strstr(m, "subErrType:4\n"));
    CHECK(strstr(m, "Kernel task happen error, retCode=0x26, [aicore exception]\n"));
    const char *k = strstr(m, "fault kernel_name=Mul_");
    CHECK(k && strspn(k + 22, "0123456789abcdef") == 16 && strncmp(k + 38, "_high_performance\n", 18) == 0);
    CHECK(strstr(m, "\ntensor index:0\naddr:0\nsize:1048576 bytes"));
  }
  CHECK(cb_seen.calls == 1);
  CHECK(cb_seen.code == ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK(cb_seen.device == 0);
  CHECK(cb_seen.thread == (uint32_t)syscall(SYS_gettid));
  CHECK(cb_seen.stream != 0xFFFFFFFFu && cb_seen.task != 0xFFFFFFFFu);
  fflush(stderr);
  const char *err = read_capture(fd);
  CHECK(count(err, "fault kernel_name=Mul_") == 1); /* logged once per fault */
  CHECK(count(err, "[ERROR] RUNTIME(") == 7);
  CHECK(strstr(err, "FaultReport:size:1048576 bytes\n"));
  CHECK_RC(aclFinalize(), ACL_SUCCESS); /* finalize resets even a poisoned runtime */
  init();
  p = dev_alloc(64);
  CHECK_RC(aclrtFree(p), ACL_SUCCESS);
  fini();
}

/* fault_freed: a kernel on a freed range faults (quarantine: the range is not live, nor reused). */
static void fault_freed(void) {
  capture_stderr();
  init();
  const size_t bytes = 64 * 64 * sizeof(float);
  void *a = dev_alloc(bytes), *o = dev_alloc(bytes);
  CHECK_RC(aclrtFree(a), ACL_SUCCESS);
  void *fresh = dev_alloc(bytes); /* allocations after the free do not get the old range back */
  CHECK(fresh != a);
  aclTensor *ta = tensor2(a, 64, 64), *to = tensor2(o, 64, 64);
  CHECK_RC(run_mul(to, ta, to, NULL), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStream(NULL), ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK_RC(aclrtSynchronizeStream(NULL), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  CHECK_RC(aclrtFree(o), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  const char *m = aclGetRecentErrMsg();
  char want[64];
  snprintf(want, sizeof want, "tensor index:1\naddr:%#lx\nsize:16384 bytes", (unsigned long)a);
  CHECK(m && strstr(m, want));
  fini();
}

/* fault_extent: a view larger than its allocation faults even though it starts inside one. */
static void fault_extent(void) {
  capture_stderr();
  init();
  void *a = dev_alloc(1024 * sizeof(float));
  aclTensor *big = tensor2(a, 64, 64); /* 16 KiB over a 4 KiB allocation */
  CHECK_RC(run_mul(big, big, big, NULL), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeDevice(), ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK_RC(aclrtSynchronizeDevice(), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  fini();
}

/* fault_copy: an async copy from a freed device range faults with 507053 at the stream's sync. */
static void fault_copy(void) {
  int fd = capture_stderr();
  init();
  CHECK_RC(aclrtSetExceptionInfoCallback(on_exception), ACL_SUCCESS);
  aclrtStream s;
  CHECK_RC(aclrtCreateStream(&s), ACL_SUCCESS);
  void *d = dev_alloc(4096);
  CHECK_RC(aclrtFree(d), ACL_SUCCESS);
  static char h[4096];
  CHECK_RC(aclrtMemcpyAsync(h, sizeof h, d, sizeof h, ACL_MEMCPY_DEVICE_TO_HOST, s), ACL_SUCCESS);
  aclrtEvent e;
  CHECK_RC(aclrtCreateEvent(&e), ACL_SUCCESS);
  CHECK_RC(aclrtRecordEvent(e, s), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeEvent(e), ACL_ERROR_RT_DRV_INTERNAL_ERROR); /* not the faulting stream's sync */
  CHECK_RC(aclrtSynchronizeStream(s), ACL_ERROR_RT_DEVICE_MEM_ERROR);
  CHECK_RC(aclrtSynchronizeStream(s), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  CHECK(cb_seen.calls == 1 && cb_seen.code == ACL_ERROR_RT_DEVICE_MEM_ERROR);
  const char *m = aclGetRecentErrMsg();
  CHECK(m && strstr(m, "fault kernel_name=MemcpyAsync_D2H") && strstr(m, "size:4096 bytes"));
  fflush(stderr);
  CHECK(count(read_capture(fd), "[ERROR] RUNTIME(") == 7);
  fini();
}

/* segv_after_free: a freed range is PROT_NONE, so even a direct host access is caught. */
static void segv_after_free(void) {
  init();
  char *d = dev_alloc(4096);
  d[0] = 1; /* emulated device memory is host-mapped while live */
  CHECK_RC(aclrtFree(d), ACL_SUCCESS);
  if (failures) _exit(1);
  *(volatile char *)d = 2; /* must not return */
  _exit(3);
}

/* run_child runs fn in a forked child; returns its wait status. */
static int run_child(void (*fn)(void)) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    failures = 0;
    fn();
    fflush(stdout);
    _exit(failures ? 1 : 0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

static void in_child(void (*fn)(void)) {
  int st = run_child(fn);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("    child failed (status %#x)\n", st);
    failures++;
  }
}

static void test_fault_null(void) { in_child(fault_null); }
static void test_fault_freed(void) { in_child(fault_freed); }
static void test_fault_extent(void) { in_child(fault_extent); }
static void test_fault_copy(void) { in_child(fault_copy); }
static void test_segv_after_free(void) {
  int st = run_child(segv_after_free);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
}

/* fault_unmapped: a kernel writing a reserved but unmapped range faults like one on a freed range. */
static void fault_unmapped(void) {
  int fd = capture_stderr();
  init();
  char *va = reserve(2 * GRAN);
  aclrtDrvMemHandle h = phys(GRAN);
  CHECK_RC(aclrtMapMem(va, GRAN, 0, h, 0), ACL_SUCCESS);
  aclTensor *tin = tensor2(va, 64, 64), *tout = tensor2(va + GRAN, 64, 64); /* the second chunk is not mapped */
  CHECK_RC(run_mul(tin, tin, tout, NULL), ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStream(NULL), ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK_RC(aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_AICORE_EXCEPTION);
  CHECK_RC(aclrtUnmapMem(va), ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  const char *m = aclGetRecentErrMsg();
  char want[80];
  snprintf(want, sizeof want, "tensor index:2\naddr:%#lx\nsize:16384 bytes", (unsigned long)(va + GRAN));
  CHECK(m && strstr(m, "fault kernel_name=Mul_") && strstr(m, want));
  fflush(stderr);
  CHECK(count(read_capture(fd), "[ERROR] RUNTIME(") == 7);
  fini();
}

/* fault_mapped_overrun: a copy running past the end of the last mapping faults with 507053. */
static void fault_mapped_overrun(void) {
  capture_stderr();
  init();
  char *va = reserve(2 * GRAN);
  aclrtDrvMemHandle h = phys(GRAN);
  CHECK_RC(aclrtMapMem(va, GRAN, 0, h, 0), ACL_SUCCESS);
  static char host[8192];
  CHECK_RC(aclrtMemcpyAsync(host, sizeof host, va + GRAN - 4096, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST, NULL),
           ACL_SUCCESS);
  CHECK_RC(aclrtSynchronizeStream(NULL), ACL_ERROR_RT_DEVICE_MEM_ERROR);
  const char *m = aclGetRecentErrMsg();
  CHECK(m && strstr(m, "fault kernel_name=MemcpyAsync_D2H") && strstr(m, "tensor index:1"));
  fini();
}

/* segv_after_unmap: an unmapped range is PROT_NONE again, so even a direct host access is caught. */
static void segv_after_unmap(void) {
  init();
  char *va = reserve(GRAN);
  aclrtDrvMemHandle h = phys(GRAN);
  CHECK_RC(aclrtMapMem(va, GRAN, 0, h, 0), ACL_SUCCESS);
  va[0] = 1; /* mapped emulated device memory is host-mapped */
  CHECK_RC(aclrtUnmapMem(va), ACL_SUCCESS);
  if (failures) _exit(1);
  *(volatile char *)va = 2; /* must not return */
  _exit(3);
}

static void test_fault_unmapped(void) { in_child(fault_unmapped); }
static void test_fault_mapped_overrun(void) { in_child(fault_mapped_overrun); }
static void test_segv_after_unmap(void) {
  int st = run_child(segv_after_unmap);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
}

/* ---- hazard checker and jitter (children: each reads its own stderr) ---- */
enum { HZ_R = 64, HZ_C = 64, HZ_N = HZ_R * HZ_C };
#define HZ_BYTES (sizeof(float) * HZ_N)

/* The scenario's runtime objects: streams a, b, c are ids 1, 2, 3; x, y, z are uploaded by three sync
 * copies (default-stream tasks 0..2). */
static struct {
  aclrtStream a, b, c;
  aclrtEvent e, e2;
  void *x, *y, *z, *w, *pinned;
  aclTensor *tx, *ty, *tz, *tw;
  float host[HZ_N];
} hz;
static char hz_line[256]; /* a line the scenario's stderr must hold, when set */

static void hz_setup(void) {
  memset(&hz, 0, sizeof hz);
  CHECK_RC(aclrtCreateStream(&hz.a), ACL_SUCCESS);
  CHECK_RC(aclrtCreateStream(&hz.b), ACL_SUCCESS);
  CHECK_RC(aclrtCreateStream(&hz.c), ACL_SUCCESS);
  CHECK_RC(aclrtCreateEvent(&hz.e), ACL_SUCCESS);
  CHECK_RC(aclrtCreateEvent(&hz.e2), ACL_SUCCESS);
  for (int i = 0; i < HZ_N; i++) hz.host[i] = (float)(i % 97);
  void **bufs[3] = {&hz.x, &hz.y, &hz.z};
  for (int i = 0; i < 3; i++) {
    *bufs[i] = dev_alloc(HZ_BYTES);
    h2d(*bufs[i], hz.host, HZ_BYTES);
  }
  hz.w = dev_alloc(HZ_BYTES);
  CHECK_RC(aclrtMallocHost(&hz.pinned, HZ_BYTES), ACL_SUCCESS);
  hz.tx = tensor2(hz.x, HZ_R, HZ_C), hz.ty = tensor2(hz.y, HZ_R, HZ_C), hz.tz = tensor2(hz.z, HZ_R, HZ_C);
  hz.tw = tensor2(hz.w, HZ_R, HZ_C);
}

/* hz_teardown syncs before freeing, so it adds no hazard; return codes are not checked because a racing
 * scenario may have poisoned the context. */
static void hz_teardown(void) {
  aclrtSynchronizeDevice();
  aclDestroyTensor(hz.tx), aclDestroyTensor(hz.ty), aclDestroyTensor(hz.tz), aclDestroyTensor(hz.tw);
  void *bufs[4] = {hz.x, hz.y, hz.z, hz.w};
  for (int i = 0; i < 4; i++)
    if (bufs[i]) aclrtFree(bufs[i]);
  if (hz.pinned) aclrtFreeHost(hz.pinned);
  aclrtDestroyEvent(hz.e), aclrtDestroyEvent(hz.e2);
  aclrtDestroyStream(hz.a), aclrtDestroyStream(hz.b), aclrtDestroyStream(hz.c);
}

static void hz_expect_line(const char *what, const char *who, const char *verb, const void *addr, size_t n,
                           const char *other, const char *other_verb) {
  snprintf(hz_line, sizeof hz_line, "aclsim: hazard: %s: %s %s [%#lx,+%zu) while %s %s it, unordered\n", what, who,
           verb, (unsigned long)addr, n, other, other_verb);
}

static void (*hz_body)(int);
static int hz_mode, hz_want;
static const char *hz_env;

static void hz_child(void) {
  int fd = capture_stderr();
  setenv("ACLSIM_CHECK_HAZARDS", "1", 1);
  if (hz_env) {
    char name[64];
    const char *eq = strchr(hz_env, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - hz_env), hz_env);
    setenv(name, eq + 1, 1);
  }
  hz_line[0] = 0;
  init();
  hz_body(hz_mode);
  fini();
  const char *err = read_capture(fd);
  char want[64];
  snprintf(want, sizeof want, "aclsim: hazards: %d\n", hz_want);
  CHECK(strstr(err, want) != NULL);
  CHECK(count(err, "aclsim: hazard: ") == (hz_want < 100 ? hz_want : 100));
  CHECK(hz_want <= 100 || strstr(err, "aclsim: hazard lines stop at 100; the rest are only counted\n"));
  if (hz_line[0]) CHECK(strstr(err, hz_line) != NULL);
  if (failures) printf("    mode %d stderr:\n%s    want: %s", hz_mode, err, hz_line);
}

/* hz_expect runs body(mode) in a child with ACLSIM_CHECK_HAZARDS=1 (and env, "NAME=VALUE") and checks the
 * hazard count aclFinalize reports. */
static void hz_expect(void (*body)(int), int mode, int want, const char *env) {
  hz_body = body, hz_mode = mode, hz_want = want, hz_env = env;
  in_child(hz_child);
}

/* kernel writes X on a, then b copies X to the host. 0: no ordering; 1: event a -> b; 2: b waits on an
 * event never recorded (orders nothing); 3: b copies only part of X (the report gives the overlap). */
static void hz_kernel_then_copy(int mode) {
  hz_setup();
  CHECK_RC(run_mul(hz.ty, hz.tz, hz.tx, hz.a), ACL_SUCCESS);
  if (mode == 1) CHECK_RC(aclrtRecordEvent(hz.e, hz.a), ACL_SUCCESS);
  if (mode == 1 || mode == 2) CHECK_RC(aclrtStreamWaitEvent(hz.b, hz.e), ACL_SUCCESS);
  size_t off = mode == 3 ? 8192 : 0, n = mode == 3 ? 4096 : HZ_BYTES;
  CHECK_RC(aclrtMemcpyAsync(hz.host, n, (char *)hz.x + off, n, ACL_MEMCPY_DEVICE_TO_HOST, hz.b), ACL_SUCCESS);
  const char *copy = mode == 2 ? "MemcpyAsync_D2H (stream 2, task 1)" : "MemcpyAsync_D2H (stream 2, task 0)";
  if (mode != 1)
    hz_expect_line("read-after-write", copy, "reads", (char *)hz.x + off, n, "aclnnMul (stream 1, task 0)", "writes");
  hz_teardown();
}

/* b copies into X, then a kernel on a reads X. 0: unordered; 1: event b -> a. */
static void hz_copy_then_kernel(int mode) {
  hz_setup();
  CHECK_RC(aclrtMemcpyAsync(hz.x, HZ_BYTES, hz.host, HZ_BYTES, ACL_MEMCPY_HOST_TO_DEVICE, hz.b), ACL_SUCCESS);
  if (mode) {
    CHECK_RC(aclrtRecordEvent(hz.e, hz.b), ACL_SUCCESS);
    CHECK_RC(aclrtStreamWaitEvent(hz.a, hz.e), ACL_SUCCESS);
  }
  CHECK_RC(run_mul(hz.tx, hz.ty, hz.tz, hz.a), ACL_SUCCESS);
  if (!mode)
    hz_expect_line("read-after-write", "aclnnMul (stream 1, task 0)", "reads", hz.x, HZ_BYTES,
                   "MemcpyAsync_H2D (stream 2, task 0)", "writes");
  hz_teardown();
}

/* A kernel reading X waits on a behind a throttled copy; the host frees X. 0: no sync first (the kernel
 * then faults on the freed range, the race made real); 1: aclrtSynchronizeStream(a) first. */
static void hz_free_racing_kernel(int mode) {
  hz_setup();
  void *slow = dev_alloc(MIB);
  char *big = calloc(1, MIB);
  CHECK_RC(aclrtMemcpyAsync(slow, MIB, big, MIB, ACL_MEMCPY_HOST_TO_DEVICE, hz.a), ACL_SUCCESS); /* ~100 ms */
  CHECK_RC(run_mul(hz.tx, hz.ty, hz.tz, hz.a), ACL_SUCCESS);
  if (mode) CHECK_RC(aclrtSynchronizeStream(hz.a), ACL_SUCCESS);
  CHECK_RC(aclrtFree(hz.x), ACL_SUCCESS);
  if (!mode) {
    CHECK_RC(aclrtSynchronizeStream(hz.a), ACL_ERROR_RT_AICORE_EXCEPTION);
    hz_expect_line("free racing a queued task", "aclrtFree (host)", "frees", hz.x, HZ_BYTES,
                   "aclnnMul (stream 1, task 1)", "reads");
  }
  hz.x = NULL;
  aclrtFree(slow);
  free(big);
  hz_teardown();
}

/* kernel writes X on a; a host wait orders it before b's copy and c's kernel reading X.
 * 0: stream sync; 1: event sync; 2: device sync; 3: stream sync with a timeout; 4: stream destroy. */
static void hz_host_sync_orders(int mode) {
  hz_setup();
  CHECK_RC(run_mul(hz.ty, hz.tz, hz.tx, hz.a), ACL_SUCCESS);
  CHECK_RC(aclrtRecordEvent(hz.e, hz.a), ACL_SUCCESS);
  switch (mode) {
    case 0: CHECK_RC(aclrtSynchronizeStream(hz.a), ACL_SUCCESS); break;
    case 1: CHECK_RC(aclrtSynchronizeEvent(hz.e), ACL_SUCCESS); break;
    case 2: CHECK_RC(aclrtSynchronizeDevice(), ACL_SUCCESS); break;
    case 3: CHECK_RC(aclrtSynchronizeStreamWithTimeout(hz.a, 5000), ACL_SUCCESS); break;
    default: CHECK_RC(aclrtDestroyStream(hz.a), ACL_SUCCESS); hz.a = NULL; break;
  }
  CHECK_RC(aclrtMemcpyAsync(hz.host, HZ_BYTES, hz.x, HZ_BYTES, ACL_MEMCPY_DEVICE_TO_HOST, hz.b), ACL_SUCCESS);
  CHECK_RC(run_mul(hz.tx, hz.ty, hz.tw, hz.c), ACL_SUCCESS);
  hz_teardown();
}

/* X and Y are only read, on three streams at once. */
static void hz_read_read(int mode) {
  (void)mode;
  hz_setup();
  CHECK_RC(run_mul(hz.tx, hz.ty, hz.tz, hz.a), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpyAsync(hz.host, HZ_BYTES, hz.x, HZ_BYTES, ACL_MEMCPY_DEVICE_TO_HOST, hz.b), ACL_SUCCESS);
  CHECK_RC(run_mul(hz.ty, hz.tx, hz.tw, hz.c), ACL_SUCCESS);
  hz_teardown();
}

/* kernel writes X on a; a -> b -> c by events; c memsets X. 1: b waits on a's event (ordered
 * transitively); 0: it does not. */
static void hz_event_chain(int mode) {
  hz_setup();
  CHECK_RC(run_mul(hz.ty, hz.tz, hz.tx, hz.a), ACL_SUCCESS);
  CHECK_RC(aclrtRecordEvent(hz.e, hz.a), ACL_SUCCESS);
  if (mode) CHECK_RC(aclrtStreamWaitEvent(hz.b, hz.e), ACL_SUCCESS);
  CHECK_RC(aclrtMemcpyAsync(hz.host, HZ_BYTES, hz.y, HZ_BYTES, ACL_MEMCPY_DEVICE_TO_HOST, hz.b), ACL_SUCCESS);
  CHECK_RC(aclrtRecordEvent(hz.e2, hz.b), ACL_SUCCESS);
  CHECK_RC(aclrtStreamWaitEvent(hz.c, hz.e2), ACL_SUCCESS);
  CHECK_RC(aclrtMemsetAsync(hz.x, HZ_BYTES, 0, HZ_BYTES, hz.c), ACL_SUCCESS);
  if (!mode)
    hz_expect_line("write-after-write", "Memset (stream 3, task 1)", "writes", hz.x, HZ_BYTES,
                   "aclnnMul (stream 1, task 0)", "writes");
  hz_teardown();
}

/* kernel writes X on a; the host reads X with a synchronous aclrtMemcpy (a default-stream task).
 * 0: unordered; 1: the default stream waits on a's event first. */
static void hz_sync_memcpy(int mode) {
  hz_setup();
  CHECK_RC(run_mul(hz.ty, hz.tz, hz.tx, hz.a), ACL_SUCCESS);
  if (mode) {
    CHECK_RC(aclrtRecordEvent(hz.e, hz.a), ACL_SUCCESS);
    CHECK_RC(aclrtStreamWaitEvent(NULL, hz.e), ACL_SUCCESS);
  }
  d2h(hz.host, hz.x, HZ_BYTES);
  if (!mode)
    hz_expect_line("read-after-write", "Memcpy_D2H (stream 0, task 3)", "reads", hz.x, HZ_BYTES,
                   "aclnnMul (stream 1, task 0)", "writes");
  hz_teardown();
}

/* a copies X into pinned memory P. 0: b uploads from P unordered; 1: after an event a -> b; 2: the host
 * frees P without a sync (the copy may then fault, which is fine here). */
static void hz_pinned(int mode) {
  hz_setup();
  CHECK_RC(aclrtMemcpyAsync(hz.pinned, HZ_BYTES, hz.x, HZ_BYTES, ACL_MEMCPY_DEVICE_TO_HOST, hz.a), ACL_SUCCESS);
  if (mode == 2) {
    CHECK_RC(aclrtFreeHost(hz.pinned), ACL_SUCCESS);
    hz_expect_line("free racing a queued task", "aclrtFreeHost (host)", "frees", hz.pinned, HZ_BYTES,
                   "MemcpyAsync_D2H (stream 1, task 0)", "writes");
    hz.pinned = NULL;
    hz_teardown();
    return;
  }
  if (mode) {
    CHECK_RC(aclrtRecordEvent(hz.e, hz.a), ACL_SUCCESS);
    CHECK_RC(aclrtStreamWaitEvent(hz.b, hz.e), ACL_SUCCESS);
  }
  CHECK_RC(aclrtMemcpyAsync(hz.y, HZ_BYTES, hz.pinned, HZ_BYTES, ACL_MEMCPY_HOST_TO_DEVICE, hz.b), ACL_SUCCESS);
  if (!mode)
    hz_expect_line("read-after-write", "MemcpyAsync_H2D (stream 2, task 0)", "reads", hz.pinned, HZ_BYTES,
                   "MemcpyAsync_D2H (stream 1, task 0)", "writes");
  hz_teardown();
}

/* 150 unordered copies of what a kernel writes: 150 counted, 100 printed. */
static void hz_many(int mode) {
  (void)mode;
  hz_setup();
  CHECK_RC(run_mul(hz.ty, hz.tz, hz.tx, hz.a), ACL_SUCCESS);
  for (int i = 0; i < 150; i++)
    CHECK_RC(aclrtMemcpyAsync(hz.host, HZ_BYTES, hz.x, HZ_BYTES, ACL_MEMCPY_DEVICE_TO_HOST, hz.b), ACL_SUCCESS);
  hz_teardown();
}

/* An event-ordered pipeline under ACLSIM_JITTER_US: a sets X to i and copies it to Z with a kernel, b
 * copies Z to pinned memory after a's event, a's next round waits for b's; every round reads back i. */
static void hz_jitter_pipeline(int mode) {
  (void)mode;
  hz_setup();
  aclOpExecutor *ex;
  uint64_t ws;
  int bad = 0;
  for (int i = 1; i <= 30; i++) {
    CHECK_RC(aclrtMemsetAsync(hz.x, HZ_BYTES, i, HZ_BYTES, hz.a), ACL_SUCCESS);
    CHECK_RC(aclnnInplaceCopyGetWorkspaceSize(hz.tz, hz.tx, &ws, &ex), ACL_SUCCESS);
    CHECK_RC(aclnnInplaceCopy(NULL, ws, ex, hz.a), ACL_SUCCESS);
    CHECK_RC(aclrtRecordEvent(hz.e, hz.a), ACL_SUCCESS);
    CHECK_RC(aclrtStreamWaitEvent(hz.b, hz.e), ACL_SUCCESS);
    CHECK_RC(aclrtMemcpyAsync(hz.pinned, HZ_BYTES, hz.z, HZ_BYTES, ACL_MEMCPY_DEVICE_TO_HOST, hz.b), ACL_SUCCESS);
    CHECK_RC(aclrtRecordEvent(hz.e2, hz.b), ACL_SUCCESS);
    CHECK_RC(aclrtStreamWaitEvent(hz.a, hz.e2), ACL_SUCCESS);
    CHECK_RC(aclrtSynchronizeEvent(hz.e2), ACL_SUCCESS);
    const unsigned char *p = hz.pinned;
    bad += p[0] != i || p[HZ_BYTES - 1] != i;
  }
  CHECK(bad == 0);
  hz_teardown();
}

static void hz_bad_env(void) {
  int fd = capture_stderr();
  setenv("ACLSIM_CHECK_HAZARDS", "yes", 1);
  setenv("ACLSIM_JITTER_US", "-5", 1);
  setenv("ACLSIM_SEED", "x1", 1);
  init();
  fini();
  const char *err = read_capture(fd);
  CHECK(strstr(err, "aclsim: ignoring bad ACLSIM_CHECK_HAZARDS=yes"));
  CHECK(strstr(err, "aclsim: ignoring bad ACLSIM_JITTER_US=-5"));
  CHECK(strstr(err, "aclsim: ignoring bad ACLSIM_SEED=x1"));
  CHECK(!strstr(err, "aclsim: hazards:")); /* the default: off */
}

static void test_hazard_kernel_then_copy(void) {
  hz_expect(hz_kernel_then_copy, 0, 1, NULL);
  hz_expect(hz_kernel_then_copy, 1, 0, NULL);
  hz_expect(hz_kernel_then_copy, 2, 1, NULL);
  hz_expect(hz_kernel_then_copy, 3, 1, NULL);
}
static void test_hazard_copy_then_kernel(void) {
  hz_expect(hz_copy_then_kernel, 0, 1, NULL);
  hz_expect(hz_copy_then_kernel, 1, 0, NULL);
}
static void test_hazard_free_racing_kernel(void) {
  hz_expect(hz_free_racing_kernel, 0, 1, "ACLSIM_COPY_GBPS=0.01");
  hz_expect(hz_free_racing_kernel, 1, 0, "ACLSIM_COPY_GBPS=0.01");
}
static void test_hazard_host_sync_orders(void) {
  for (int mode = 0; mode < 5; mode++) hz_expect(hz_host_sync_orders, mode, 0, NULL);
}
static void test_hazard_read_read(void) { hz_expect(hz_read_read, 0, 0, NULL); }
static void test_hazard_event_chain(void) {
  hz_expect(hz_event_chain, 1, 0, NULL);
  hz_expect(hz_event_chain, 0, 1, NULL);
}
static void test_hazard_sync_memcpy(void) {
  hz_expect(hz_sync_memcpy, 0, 1, NULL);
  hz_expect(hz_sync_memcpy, 1, 0, NULL);
}
static void test_hazard_pinned(void) {
  hz_expect(hz_pinned, 0, 1, NULL);
  hz_expect(hz_pinned, 1, 0, NULL);
  hz_expect(hz_pinned, 2, 1, NULL);
}
static void test_hazard_line_cap(void) { hz_expect(hz_many, 0, 150, NULL); }
static void test_hazard_bad_env(void) { in_child(hz_bad_env); }

/* Mapped memory is tracked like allocations. A kernel on a writes a mapped range; 0: b copies it out
 * unordered; 1: ordered by an event; 2: the host unmaps it while the kernel waits behind a slow copy (the
 * kernel then faults); 3: the same after a sync. */
static void hz_vmm(int mode) {
  hz_setup();
  char *va = reserve(GRAN);
  aclrtDrvMemHandle h = phys(GRAN);
  CHECK_RC(aclrtMapMem(va, GRAN, 0, h, 0), ACL_SUCCESS);
  aclTensor *tv = tensor2(va, HZ_R, HZ_C);
  void *slow = dev_alloc(MIB);
  char *big = calloc(1, MIB);
  if (mode >= 2) CHECK_RC(aclrtMemcpyAsync(slow, MIB, big, MIB, ACL_MEMCPY_HOST_TO_DEVICE, hz.a), ACL_SUCCESS);
  CHECK_RC(run_mul(hz.tx, hz.ty, tv, hz.a), ACL_SUCCESS);
  if (mode == 1) {
    CHECK_RC(aclrtRecordEvent(hz.e, hz.a), ACL_SUCCESS);
    CHECK_RC(aclrtStreamWaitEvent(hz.b, hz.e), ACL_SUCCESS);
  }
  if (mode < 2)
    CHECK_RC(aclrtMemcpyAsync(hz.host, HZ_BYTES, va, HZ_BYTES, ACL_MEMCPY_DEVICE_TO_HOST, hz.b), ACL_SUCCESS);
  if (mode == 0)
    hz_expect_line("read-after-write", "MemcpyAsync_D2H (stream 2, task 0)", "reads", va, HZ_BYTES,
                   "aclnnMul (stream 1, task 0)", "writes");
  if (mode == 3) CHECK_RC(aclrtSynchronizeStream(hz.a), ACL_SUCCESS);
  if (mode >= 2) CHECK_RC(aclrtUnmapMem(va), ACL_SUCCESS);
  if (mode == 2) {
    CHECK_RC(aclrtSynchronizeStream(hz.a), ACL_ERROR_RT_AICORE_EXCEPTION);
    hz_expect_line("free racing a queued task", "aclrtUnmapMem (host)", "frees", va, HZ_BYTES,
                   "aclnnMul (stream 1, task 1)", "writes");
  }
  aclrtSynchronizeDevice();
  if (mode < 2) aclrtUnmapMem(va);
  aclrtFreePhysical(h);
  aclrtReleaseMemAddress(va);
  aclDestroyTensor(tv);
  aclrtFree(slow);
  free(big);
  hz_teardown();
}

static void test_hazard_vmm(void) {
  hz_expect(hz_vmm, 0, 1, NULL);
  hz_expect(hz_vmm, 1, 0, NULL);
  hz_expect(hz_vmm, 2, 1, "ACLSIM_COPY_GBPS=0.01");
  hz_expect(hz_vmm, 3, 0, "ACLSIM_COPY_GBPS=0.01");
}

/* Jitter reorders how streams interleave, never what each orders: the ordered tests still hold. */
static void test_jitter_keeps_order(void) {
  const char *seeds[] = {"1", "7"};
  for (int i = 0; i < 2; i++) {
    setenv("ACLSIM_JITTER_US", "200", 1);
    setenv("ACLSIM_SEED", seeds[i], 1);
    test_stream_order();
    test_kernels();
    test_async_throttled();
  }
  hz_expect(hz_jitter_pipeline, 0, 0, "ACLSIM_JITTER_US=300");
  hz_expect(hz_jitter_pipeline, 0, 0, "ACLSIM_JITTER_US=50");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  env_reset();
  struct {
    const char *name;
    void (*fn)(void);
  } tests[] = {
      {"init_required", test_init_required},
      {"device", test_device},
      {"rounding_alignment", test_rounding_alignment},
      {"bad_memory_args", test_bad_memory_args},
      {"capacity_207001", test_capacity},
      {"quarantine_no_reuse", test_quarantine_reuse},
      {"copies_and_memset", test_copies},
      {"stream_order", test_stream_order},
      {"async_throttled_copy_and_events", test_async_throttled},
      {"event_records_kept_apart", test_event_records_kept_apart},
      {"kernels", test_kernels},
      {"matmul_workload_size", test_matmul_workload_size},
      {"exception_getters", test_exception_getters},
      {"threads", test_threads},
      {"fault_null_address", test_fault_null},
      {"fault_use_after_free", test_fault_freed},
      {"fault_extent_beyond_allocation", test_fault_extent},
      {"fault_async_copy_507053", test_fault_copy},
      {"freed_range_is_prot_none", test_segv_after_free},
      {"vmm_map_kernel_copy_remap", test_vmm},
      {"vmm_misuse_codes", test_vmm_misuse},
      {"fault_vmm_unmapped_507015", test_fault_unmapped},
      {"fault_vmm_copy_overrun_507053", test_fault_mapped_overrun},
      {"unmapped_range_is_prot_none", test_segv_after_unmap},
      {"executors_repeatable_and_lists", test_executors},
      {"stream_event_calls", test_stream_event_calls},
      {"last_error", test_last_error},
      {"hazard_kernel_then_copy", test_hazard_kernel_then_copy},
      {"hazard_copy_then_kernel", test_hazard_copy_then_kernel},
      {"hazard_free_racing_kernel", test_hazard_free_racing_kernel},
      {"hazard_host_sync_orders", test_hazard_host_sync_orders},
      {"hazard_read_read", test_hazard_read_read},
      {"hazard_event_chain", test_hazard_event_chain},
      {"hazard_sync_memcpy", test_hazard_sync_memcpy},
      {"hazard_pinned_memory", test_hazard_pinned},
      {"hazard_line_cap", test_hazard_line_cap},
      {"hazard_vmm", test_hazard_vmm},
      {"hazard_bad_env", test_hazard_bad_env},
      {"jitter_keeps_order", test_jitter_keeps_order},
  };
  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
    failures = 0;
    tests[i].fn();
    if (aclFinalize() == ACL_SUCCESS) { /* a test that stopped early must not leak its runtime */
      printf("    test left the runtime initialised\n");
      failures++;
    }
    env_reset();
    printf("%s %s\n", failures ? "FAIL" : "ok  ", tests[i].name);
    if (failures) failed++;
    else passed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
