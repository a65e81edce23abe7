/* rt.h: decoder-sim's one table of AscendCL function pointers (filled from the linked symbols or, like
 * MindSpore's loader, with dlopen+dlsym), the per-function call counts, and fatal runtime-error reporting.
 * Every runtime call in decoder-sim goes through RT(name)(args...), so both link modes run identical code. */
#ifndef DECODER_RT_H_
#define DECODER_RT_H_

#include <stdint.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

/* Every AscendCL function decoder-sim uses, with the CANN 8 library that exports it (ACL: libascendcl.so,
 * NNOPBASE: libnnopbase.so, OPAPI: libopapi.so); adding one is one line. The table order is the order of the
 * `calls` lines; functions added later go at the end so existing runs print the same lines. */
#define DECODER_ACL_FUNCS(X)                                                                              \
  X(aclInit, ACL) X(aclFinalize, ACL) X(aclrtSetDevice, ACL) X(aclrtResetDevice, ACL)                      \
  X(aclrtCreateStream, ACL) X(aclrtDestroyStream, ACL) X(aclrtMalloc, ACL) X(aclrtFree, ACL)               \
  X(aclrtMallocHost, ACL) X(aclrtFreeHost, ACL) X(aclrtMemcpy, ACL) X(aclrtMemcpyAsync, ACL)               \
  X(aclrtSynchronizeStream, ACL) X(aclGetRecentErrMsg, ACL) X(aclCreateTensor, NNOPBASE)                   \
  X(aclDestroyTensor, NNOPBASE) X(aclCreateScalar, NNOPBASE) X(aclDestroyScalar, NNOPBASE)                 \
  X(aclnnMulGetWorkspaceSize, OPAPI) X(aclnnMul, OPAPI) X(aclnnAddGetWorkspaceSize, OPAPI)                 \
  X(aclnnAdd, OPAPI) X(aclnnMatmulGetWorkspaceSize, OPAPI) X(aclnnMatmul, OPAPI)                           \
  X(aclnnInplaceCopyGetWorkspaceSize, OPAPI) X(aclnnInplaceCopy, OPAPI)                                    \
  X(aclrtSetExceptionInfoCallback, ACL) X(aclrtGetTaskIdFromExceptionInfo, ACL)                            \
  X(aclrtGetStreamIdFromExceptionInfo, ACL) X(aclrtGetDeviceIdFromExceptionInfo, ACL)                      \
  X(aclrtGetErrorCodeFromExceptionInfo, ACL) X(aclrtCreateEvent, ACL) X(aclrtRecordEvent, ACL)             \
  X(aclrtStreamWaitEvent, ACL) X(aclrtDestroyEvent, ACL) X(aclrtMemGetAllocationGranularity, ACL)          \
  X(aclrtReserveMemAddress, ACL) X(aclrtReleaseMemAddress, ACL) X(aclrtMallocPhysical, ACL)                \
  X(aclrtFreePhysical, ACL) X(aclrtMapMem, ACL) X(aclrtUnmapMem, ACL)                                      \
  X(aclSetAclOpExecutorRepeatable, NNOPBASE) X(aclSetTensorAddr, NNOPBASE)                                 \
  X(aclDestroyAclOpExecutor, NNOPBASE)

enum {
#define X(n, lib) RT_FN_##n,
  DECODER_ACL_FUNCS(X)
#undef X
  RT_FN_COUNT
};

struct rt_table {
#define X(n, lib) __typeof__(&n) n;
  DECODER_ACL_FUNCS(X)
#undef X
};

extern struct rt_table rt_fns;
extern uint64_t rt_calls[RT_FN_COUNT];

/* RT(aclrtMalloc)(&p, n, policy): counts the call, then calls through the table. The count is atomic: with
 * --launch thread the launch thread calls through the table too. */
#define RT(n) (rt_count(RT_FN_##n), rt_fns.n)
static inline void rt_count(int fn) { __atomic_fetch_add(&rt_calls[fn], 1, __ATOMIC_RELAXED); }

enum rt_link { RT_LINK_DIRECT, RT_LINK_DLSYM };

/* rt_load fills the table; on failure it prints one line naming the cause and exits 1. */
void rt_load(enum rt_link link);
/* rt_print_calls prints `calls <function> <count>` for every function called at least once. */
void rt_print_calls(void);
/* rt_fail_hook, when set, runs first in rt_fail on the main thread: it stops the launch thread (--launch
 * thread) so no runtime call is in flight while the process exits. */
extern void (*rt_fail_hook)(void);
/* rt_fail reports a failed runtime call (`decoder-sim: <call> failed[ for op <op>]: <code>`, then the
 * runtime's recent error message lines), prints the call counts and exits 1. */
_Noreturn void rt_fail(const char *call, const char *op, long code);
/* rt_check calls rt_fail when code is not ACL_SUCCESS. */
static inline void rt_check(long code, const char *call, const char *op) {
  if (code != ACL_SUCCESS) rt_fail(call, op, code);
}

#endif
