/* ops.c: launches aclnn kernels the two-phase way (GetWorkspaceSize, then launch on the current stream) on
 * tensors described with aclCreateTensor at launch time, switches between the compute streams through events,
 * and syncs per op, per layer or only where the host reads results. A failed sync names the last kernel
 * launched on that stream, as MindSpore's "SyncStream failed for op aclnnMul" does. */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static aclrtStream streams[OPS_MAX_STREAMS];
/* events[k] is recorded on stream k each time work leaves it; created once and re-recorded every layer
 * (a wait waits for the latest record enqueued before it). */
static aclrtEvent events[OPS_MAX_STREAMS];
static int n_streams = 1, cur = OPS_MAIN, events_off;
static enum ops_sync sync_mode;
static const char *last_op[OPS_MAX_STREAMS] = {"none", "none"};

void ops_init(int n, enum ops_sync mode) {
  n_streams = n;
  sync_mode = mode;
  for (int k = 0; k < n; k++) rt_check(RT(aclrtCreateStream)(&streams[k]), "aclrtCreateStream", NULL);
  /* Test only: without the events the MLP stream races the main one; the hazard checker must see it. */
  const char *off = getenv("DECODER_SIM_TEST_NO_EVENTS");
  events_off = n > 1 && off != NULL && strcmp(off, "1") == 0;
  if (n > 1 && !events_off)
    for (int k = 0; k < n; k++) rt_check(RT(aclrtCreateEvent)(&events[k]), "aclrtCreateEvent", NULL);
}

void ops_fini(void) {
  for (int k = 0; k < n_streams; k++) {
    if (events[k] != NULL) rt_check(RT(aclrtDestroyEvent)(events[k]), "aclrtDestroyEvent", NULL);
    rt_check(RT(aclrtDestroyStream)(streams[k]), "aclrtDestroyStream", NULL);
    events[k] = NULL;
    streams[k] = NULL;
  }
}

int ops_streams(void) { return n_streams; }
int ops_events_off(void) { return events_off; }
enum ops_sync ops_sync_mode(void) { return sync_mode; }

void ops_use_stream(int k) {
  if (n_streams == 1 || k == cur) return;
  if (!events_off) {
    rt_check(RT(aclrtRecordEvent)(events[cur], streams[cur]), "aclrtRecordEvent", NULL);
    rt_check(RT(aclrtStreamWaitEvent)(streams[k], events[cur]), "aclrtStreamWaitEvent", NULL);
  }
  cur = k;
}

tensor tensor_new(int64_t rows, int64_t cols) {
  storage *st = storage_new((size_t)(rows * cols) * sizeof(float));
  tensor t = {st, rows, cols, cols, 1, 0, storage_base(st)};
  return t;
}

void tensor_free(tensor *t) {
  storage_unref(t->st);
  t->st = NULL;
}

tensor tensor_t(tensor t) {
  tensor r = {t.st, t.cols, t.rows, t.cs, t.rs, t.offset, t.addr};
  return r;
}

size_t tensor_bytes(tensor t) { return (size_t)(t.rows * t.cols) * sizeof(float); }

static aclTensor *describe(tensor t) {
  int64_t dims[2] = {t.rows, t.cols};
  int64_t strides[2] = {t.rs, t.cs};
  int64_t storage_dims[1] = {(int64_t)(t.st->capacity / sizeof(float))};
  aclTensor *a = RT(aclCreateTensor)(dims, 2, ACL_FLOAT, strides, t.offset, ACL_FORMAT_ND, storage_dims, 1,
                                     (void *)(t.addr != 0 ? t.addr : storage_base(t.st)));
  if (a == NULL) rt_fail("aclCreateTensor", NULL, ACL_ERROR_INVALID_PARAM);
  return a;
}

static void destroy(aclTensor *a) {
  aclnnStatus rc = RT(aclDestroyTensor)(a);
  rt_check(rc, "aclDestroyTensor", NULL);
}

/* launch runs phase two on the current stream with a pool workspace when one is asked for; the workspace
 * goes back to the pool at once, which is safe because everything enqueued later is ordered after it (on
 * this stream, or through the event of ops_use_stream). */
typedef aclnnStatus (*launch_fn)(void *, uint64_t, aclOpExecutor *, aclrtStream);
static void launch(const char *op, int fn_index, launch_fn fn, uint64_t ws_size, aclOpExecutor *exec) {
  storage *ws = ws_size > 0 ? storage_new(ws_size) : NULL;
  rt_calls[fn_index]++;
  aclnnStatus rc = fn(ws != NULL ? (void *)storage_base(ws) : NULL, ws_size, exec, streams[cur]);
  last_op[cur] = op;
  rt_check(rc, op, NULL);
  storage_unref(ws);
}

static void sync_stream(int k) {
  aclError rc = RT(aclrtSynchronizeStream)(streams[k]);
  if (rc != ACL_SUCCESS) rt_fail("aclrtSynchronizeStream", last_op[k], rc);
}

/* --sync op waits for the stream the kernel ran on, so a failure names that kernel. */
static void maybe_sync(void) {
  if (sync_mode == OPS_SYNC_OP) sync_stream(cur);
}

void op_mul(tensor out, tensor self, tensor other) {
  aclTensor *a = describe(self), *b = describe(other), *o = describe(out);
  uint64_t ws = 0;
  aclOpExecutor *exec = NULL;
  rt_check(RT(aclnnMulGetWorkspaceSize)(a, b, o, &ws, &exec), "aclnnMulGetWorkspaceSize", NULL);
  launch("aclnnMul", RT_FN_aclnnMul, rt_fns.aclnnMul, ws, exec);
  destroy(a);
  destroy(b);
  destroy(o);
  maybe_sync();
}

void op_add(tensor out, tensor self, tensor other, float alpha) {
  aclTensor *a = describe(self), *b = describe(other), *o = describe(out);
  aclScalar *s = RT(aclCreateScalar)(&alpha, ACL_FLOAT);
  if (s == NULL) rt_fail("aclCreateScalar", NULL, ACL_ERROR_INVALID_PARAM);
  uint64_t ws = 0;
  aclOpExecutor *exec = NULL;
  rt_check(RT(aclnnAddGetWorkspaceSize)(a, b, s, o, &ws, &exec), "aclnnAddGetWorkspaceSize", NULL);
  launch("aclnnAdd", RT_FN_aclnnAdd, rt_fns.aclnnAdd, ws, exec);
  destroy(a);
  destroy(b);
  destroy(o);
  rt_check(RT(aclDestroyScalar)(s), "aclDestroyScalar", NULL);
  maybe_sync();
}

void op_matmul(tensor out, tensor self, tensor mat2) {
  aclTensor *a = describe(self), *b = describe(mat2), *o = describe(out);
  uint64_t ws = 0;
  aclOpExecutor *exec = NULL;
  rt_check(RT(aclnnMatmulGetWorkspaceSize)(a, b, o, 0, &ws, &exec), "aclnnMatmulGetWorkspaceSize", NULL);
  launch("aclnnMatmul", RT_FN_aclnnMatmul, rt_fns.aclnnMatmul, ws, exec);
  destroy(a);
  destroy(b);
  destroy(o);
  maybe_sync();
}

void op_copy(tensor dst, tensor src) {
  aclTensor *d = describe(dst), *s = describe(src);
  uint64_t ws = 0;
  aclOpExecutor *exec = NULL;
  rt_check(RT(aclnnInplaceCopyGetWorkspaceSize)(d, s, &ws, &exec), "aclnnInplaceCopyGetWorkspaceSize", NULL);
  launch("aclnnInplaceCopy", RT_FN_aclnnInplaceCopy, rt_fns.aclnnInplaceCopy, ws, exec);
  destroy(d);
  destroy(s);
  maybe_sync();
}

/* ops_sync waits for every stream before reporting: after a fault only the faulting stream's wait returns
 * the fault's code (the others get 507899), and that one names the kernel. */
void ops_sync(void) {
  int bad = -1;
  aclError bad_rc = ACL_SUCCESS;
  for (int k = 0; k < n_streams; k++) {
    aclError rc = RT(aclrtSynchronizeStream)(streams[k]);
    if (rc != ACL_SUCCESS && (bad < 0 || bad_rc == ACL_ERROR_RT_DRV_INTERNAL_ERROR)) {
      bad = k;
      bad_rc = rc;
    }
  }
  if (bad >= 0) rt_fail("aclrtSynchronizeStream", last_op[bad], bad_rc);
}

void ops_h2d_async(tensor dst, const float *host) {
  size_t n = tensor_bytes(dst);
  aclError rc = RT(aclrtMemcpyAsync)((void *)storage_base(dst.st), dst.st->nbytes, host, n,
                                     ACL_MEMCPY_HOST_TO_DEVICE, streams[cur]);
  last_op[cur] = "aclrtMemcpyAsync";
  rt_check(rc, "aclrtMemcpyAsync", NULL);
}

void ops_d2h_async(float *host, tensor src) {
  size_t n = tensor_bytes(src);
  aclError rc = RT(aclrtMemcpyAsync)(host, n, (const void *)storage_base(src.st), n, ACL_MEMCPY_DEVICE_TO_HOST,
                                     streams[cur]);
  last_op[cur] = "aclrtMemcpyAsync";
  rt_check(rc, "aclrtMemcpyAsync", NULL);
}
