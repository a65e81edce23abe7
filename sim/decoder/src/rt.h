/* rt.h: decoder-sim's one table of AscendCL function pointers (filled from the linked symbols or, like
 * MindSpore's loader, with dlopen+dlsym), the per-function call counts, and fatal runtime-error reporting.
 * Every runtime call in decoder-sim goes through RT(name)(args...), so both link modes run identical code. */
#ifndef DECODER_RT_H_
#define DECODER_RT_H_

#include <stdint.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

/* Every AscendCL function decoder-sim uses; adding one is one line. */
#define DECODER_ACL_FUNCS(X)                                                                        \
  X(aclInit) X(aclFinalize) X(aclrtSetDevice) X(aclrtResetDevice) X(aclrtCreateStream)               \
  X(aclrtDestroyStream) X(aclrtMalloc) X(aclrtFree) X(aclrtMallocHost) X(aclrtFreeHost) X(aclrtMemcpy) \
  X(aclrtMemcpyAsync) X(aclrtSynchronizeStream) X(aclGetRecentErrMsg) X(aclCreateTensor)              \
  X(aclDestroyTensor) X(aclCreateScalar) X(aclDestroyScalar) X(aclnnMulGetWorkspaceSize) X(aclnnMul)  \
  X(aclnnAddGetWorkspaceSize) X(aclnnAdd) X(aclnnMatmulGetWorkspaceSize) X(aclnnMatmul)              \
  X(aclnnInplaceCopyGetWorkspaceSize) X(aclnnInplaceCopy) X(aclrtSetExceptionInfoCallback)           \
  X(aclrtGetTaskIdFromExceptionInfo) X(aclrtGetStreamIdFromExceptionInfo)                            \
  X(aclrtGetDeviceIdFromExceptionInfo) X(aclrtGetErrorCodeFromExceptionInfo) X(aclrtCreateEvent)         \
  X(aclrtRecordEvent) X(aclrtStreamWaitEvent) X(aclrtDestroyEvent)

enum {
#define X(n) RT_FN_##n,
  DECODER_ACL_FUNCS(X)
#undef X
  RT_FN_COUNT
};

struct rt_table {
#define X(n) __typeof__(&n) n;
  DECODER_ACL_FUNCS(X)
#undef X
};

extern struct rt_table rt_fns;
extern uint64_t rt_calls[RT_FN_COUNT];

/* RT(aclrtMalloc)(&p, n, policy): counts the call, then calls through the table. */
#define RT(n) (rt_calls[RT_FN_##n]++, rt_fns.n)

enum rt_link { RT_LINK_DIRECT, RT_LINK_DLSYM };

/* rt_load fills the table; on failure it prints one line naming the cause and exits 1. */
void rt_load(enum rt_link link);
/* rt_print_calls prints `calls <function> <count>` for every function called at least once. */
void rt_print_calls(void);
/* rt_fail reports a failed runtime call (`decoder-sim: <call> failed[ for op <op>]: <code>`, then the
 * runtime's recent error message lines), prints the call counts and exits 1. */
_Noreturn void rt_fail(const char *call, const char *op, long code);
/* rt_check calls rt_fail when code is not ACL_SUCCESS. */
static inline void rt_check(long code, const char *call, const char *op) {
  if (code != ACL_SUCCESS) rt_fail(call, op, code);
}

#endif
