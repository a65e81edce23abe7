/* aclrt.c: dlopen'd AscendCL entry points for `swapagent replay --exec`. The function table is built
 * from the declarations in include/ (the project's AscendCL contract) with __typeof__, so a
 * signature drift is a compile error, yet nothing links against the runtime. As in CANN 8, the runtime is
 * three libraries in one lib64: libascendcl.so (aclInit, aclrt*), libnnopbase.so (tensors, scalars) and
 * libopapi.so (aclnn ops); each function is looked up in its own library. */
#define _GNU_SOURCE
#include "aclrt.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

#define SA_RT_FUNCS(X)                                                                                      \
  X(aclInit) X(aclFinalize) X(aclrtSetDevice) X(aclrtSynchronizeDevice) X(aclrtMalloc) X(aclrtMallocAlign32) \
  X(aclrtMallocCached) X(aclrtFree) X(aclrtMallocHost) X(aclrtFreeHost) X(aclrtMemcpy) X(aclrtMemcpyAsync)  \
  X(aclrtMemset) X(aclrtMemsetAsync) X(aclrtSynchronizeStream) X(aclrtSynchronizeStreamWithTimeout)          \
  X(aclrtSynchronizeEvent) X(aclrtCreateStream) X(aclrtDestroyStream) X(aclrtCreateEvent)                   \
  X(aclrtDestroyEvent) X(aclrtRecordEvent) X(aclrtStreamWaitEvent) X(aclGetRecentErrMsg)
#define SA_NNOPBASE_FUNCS(X) X(aclCreateTensor) X(aclDestroyTensor) X(aclCreateScalar) X(aclDestroyScalar)
#define SA_OPAPI_FUNCS(X)                                                                                  \
  X(aclnnMulGetWorkspaceSize) X(aclnnMul) X(aclnnAddGetWorkspaceSize) X(aclnnAdd)                          \
  X(aclnnInplaceCopyGetWorkspaceSize) X(aclnnInplaceCopy)

#define SA_DECL(name) static __typeof__(&name) p_##name;
SA_RT_FUNCS(SA_DECL)
SA_NNOPBASE_FUNCS(SA_DECL)
SA_OPAPI_FUNCS(SA_DECL)
#undef SA_DECL

/* Symbols are optional one by one: a helper whose symbol is missing returns SA_RT_MISSING. */
#define SA_SYM(name) p_##name = h ? (__typeof__(&name))dlsym(h, #name) : NULL;

/* open_beside opens lib from the directory of the runtime handle rt; on failure it adds why to note. */
static void *open_beside(void *rt, const char *lib, char *note, size_t notecap) {
  char dir[PATH_MAX], path[PATH_MAX + 64];
  void *h = NULL;
  if (dlinfo(rt, RTLD_DI_ORIGIN, dir) == 0) {
    snprintf(path, sizeof path, "%s/%s", dir, lib);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    size_t n = strlen(note);
    snprintf(note + n, notecap - n, "%s%s: %s (its calls are missing)", n ? "; " : "", lib, dlerror());
  }
  return h;
}

/* The libraries stay open for the life of the process (never dlclose: the runtime's workers may outlive a
 * call). */

int sa_rt_open(const char *path, char *err, size_t errcap, char *note, size_t notecap) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(err, errcap, "%s", dlerror());
    return -1;
  }
  SA_RT_FUNCS(SA_SYM)
  if (!p_aclInit || !p_aclrtMalloc || !p_aclrtFree) {
    snprintf(err, errcap, "%s: not an AscendCL runtime (aclInit/aclrtMalloc/aclrtFree missing)", path);
    return -1;
  }
  void *rt = h;
  note[0] = 0;
  h = open_beside(rt, "libnnopbase.so", note, notecap);
  SA_NNOPBASE_FUNCS(SA_SYM)
  h = open_beside(rt, "libopapi.so", note, notecap);
  SA_OPAPI_FUNCS(SA_SYM)
  return 0;
}
#undef SA_SYM

#define NEED(name)   \
  if (!p_##name) \
  return SA_RT_MISSING

const char *sa_rt_recent_err(void) { return p_aclGetRecentErrMsg ? p_aclGetRecentErrMsg() : NULL; }

int sa_rt_init(void) { NEED(aclInit); return p_aclInit(NULL); }
int sa_rt_finalize(void) { NEED(aclFinalize); return p_aclFinalize(); }
int sa_rt_set_device(int32_t dev) { NEED(aclrtSetDevice); return p_aclrtSetDevice(dev); }
int sa_rt_sync_device(void) { NEED(aclrtSynchronizeDevice); return p_aclrtSynchronizeDevice(); }

int sa_rt_malloc(int which, uint64_t size, int32_t policy, uintptr_t *out) {
  void *p = NULL;
  aclError r;
  switch (which) {
  case 1: NEED(aclrtMallocAlign32); r = p_aclrtMallocAlign32(&p, size, (aclrtMemMallocPolicy)policy); break;
  case 2: NEED(aclrtMallocCached); r = p_aclrtMallocCached(&p, size, (aclrtMemMallocPolicy)policy); break;
  default: r = p_aclrtMalloc(&p, size, (aclrtMemMallocPolicy)policy); break;
  }
  *out = (uintptr_t)p;
  return r;
}
int sa_rt_free(uintptr_t p) { return p_aclrtFree((void *)p); }
int sa_rt_malloc_host(uint64_t size, uintptr_t *out) {
  void *p = NULL;
  NEED(aclrtMallocHost);
  aclError r = p_aclrtMallocHost(&p, size);
  *out = (uintptr_t)p;
  return r;
}
int sa_rt_free_host(uintptr_t p) { NEED(aclrtFreeHost); return p_aclrtFreeHost((void *)p); }
int sa_rt_memcpy(uintptr_t dst, uint64_t dmax, uintptr_t src, uint64_t count, int32_t kind) {
  NEED(aclrtMemcpy);
  return p_aclrtMemcpy((void *)dst, dmax, (const void *)src, count, (aclrtMemcpyKind)kind);
}
int sa_rt_memcpy_async(uintptr_t dst, uint64_t dmax, uintptr_t src, uint64_t count, int32_t kind, uintptr_t stream) {
  NEED(aclrtMemcpyAsync);
  return p_aclrtMemcpyAsync((void *)dst, dmax, (const void *)src, count, (aclrtMemcpyKind)kind, (aclrtStream)stream);
}
int sa_rt_memset(uintptr_t p, uint64_t maxc, int32_t value, uint64_t count) {
  NEED(aclrtMemset);
  return p_aclrtMemset((void *)p, maxc, value, count);
}
int sa_rt_memset_async(uintptr_t p, uint64_t maxc, int32_t value, uint64_t count, uintptr_t stream) {
  NEED(aclrtMemsetAsync);
  return p_aclrtMemsetAsync((void *)p, maxc, value, count, (aclrtStream)stream);
}
int sa_rt_sync_stream(uintptr_t stream) {
  NEED(aclrtSynchronizeStream);
  return p_aclrtSynchronizeStream((aclrtStream)stream);
}
int sa_rt_sync_stream_timeout(uintptr_t stream, int32_t ms) {
  NEED(aclrtSynchronizeStreamWithTimeout);
  return p_aclrtSynchronizeStreamWithTimeout((aclrtStream)stream, ms);
}
int sa_rt_sync_event(uintptr_t ev) { NEED(aclrtSynchronizeEvent); return p_aclrtSynchronizeEvent((aclrtEvent)ev); }
int sa_rt_create_stream(uintptr_t *out) {
  aclrtStream s = NULL;
  NEED(aclrtCreateStream);
  aclError r = p_aclrtCreateStream(&s);
  *out = (uintptr_t)s;
  return r;
}
int sa_rt_destroy_stream(uintptr_t stream) {
  NEED(aclrtDestroyStream);
  return p_aclrtDestroyStream((aclrtStream)stream);
}
int sa_rt_create_event(uintptr_t *out) {
  aclrtEvent e = NULL;
  NEED(aclrtCreateEvent);
  aclError r = p_aclrtCreateEvent(&e);
  *out = (uintptr_t)e;
  return r;
}
int sa_rt_destroy_event(uintptr_t ev) { NEED(aclrtDestroyEvent); return p_aclrtDestroyEvent((aclrtEvent)ev); }
int sa_rt_record_event(uintptr_t ev, uintptr_t stream) {
  NEED(aclrtRecordEvent);
  return p_aclrtRecordEvent((aclrtEvent)ev, (aclrtStream)stream);
}
int sa_rt_stream_wait_event(uintptr_t stream, uintptr_t ev) {
  NEED(aclrtStreamWaitEvent);
  return p_aclrtStreamWaitEvent((aclrtStream)stream, (aclrtEvent)ev);
}

uintptr_t sa_rt_tensor_1d(uintptr_t data, int64_t n, int32_t dtype, int64_t offset, int64_t storage_elems) {
  if (!p_aclCreateTensor) return 0;
  int64_t dims[1] = {n}, strides[1] = {1}, sdims[1] = {storage_elems};
  return (uintptr_t)p_aclCreateTensor(dims, 1, (aclDataType)dtype, strides, offset, ACL_FORMAT_ND, sdims, 1,
                                      (void *)data);
}
int sa_rt_destroy_tensor(uintptr_t t) { NEED(aclDestroyTensor); return p_aclDestroyTensor((const aclTensor *)t); }

int sa_rt_op(int op, uintptr_t a, uintptr_t b, uintptr_t out, uintptr_t stream, int *stage) {
  uint64_t ws = 0;
  aclOpExecutor *ex = NULL;
  aclnnStatus r;
  void *wsp = NULL;
  aclScalar *alpha = NULL;
  float one = 1.0f;
  *stage = 0;
  switch (op) {
  case 0:
    NEED(aclnnMulGetWorkspaceSize);
    NEED(aclnnMul);
    r = p_aclnnMulGetWorkspaceSize((const aclTensor *)a, (const aclTensor *)b, (aclTensor *)out, &ws, &ex);
    break;
  case 1:
    NEED(aclnnAddGetWorkspaceSize);
    NEED(aclnnAdd);
    NEED(aclCreateScalar);
    alpha = p_aclCreateScalar(&one, ACL_FLOAT);
    r = p_aclnnAddGetWorkspaceSize((const aclTensor *)a, (const aclTensor *)b, alpha, (aclTensor *)out, &ws, &ex);
    break;
  default:
    NEED(aclnnInplaceCopyGetWorkspaceSize);
    NEED(aclnnInplaceCopy);
    r = p_aclnnInplaceCopyGetWorkspaceSize((aclTensor *)a, (const aclTensor *)b, &ws, &ex);
    break;
  }
  if (r == 0 && ws > 0) { /* the emulator never asks; a real runtime may: one workspace per launch, freed after a sync */
    r = p_aclrtMalloc(&wsp, ws, ACL_MEM_MALLOC_HUGE_FIRST);
  }
  if (r != 0) {
    if (alpha && p_aclDestroyScalar) p_aclDestroyScalar(alpha);
    return r;
  }
  *stage = 1;
  switch (op) {
  case 0: r = p_aclnnMul(wsp, ws, ex, (aclrtStream)stream); break;
  case 1: r = p_aclnnAdd(wsp, ws, ex, (aclrtStream)stream); break;
  default: r = p_aclnnInplaceCopy(wsp, ws, ex, (aclrtStream)stream); break;
  }
  if (wsp) {
    if (p_aclrtSynchronizeStream) p_aclrtSynchronizeStream((aclrtStream)stream);
    p_aclrtFree(wsp);
  }
  if (alpha && p_aclDestroyScalar) p_aclDestroyScalar(alpha);
  return r;
}

uintptr_t sa_rt_scratch(uint64_t n) { return (uintptr_t)calloc(1, n ? n : 1); }
void sa_rt_scratch_free(uintptr_t p) { free((void *)p); }
