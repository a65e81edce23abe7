/* internal.h: what the emulator's three libraries share. CANN 8 splits the API over libascendcl.so
 * (runtime), libnnopbase.so (tensors, executors) and libopapi.so (aclnn ops); so does the emulator, and one
 * runtime state serves all three. Each library is built with -fvisibility=hidden and -Bsymbolic; the
 * aclsim_internal_* functions below are the only symbols exported beyond the ACL API, so the other libraries
 * can link against them. They are NOT API: no application may call them, and they change with the emulator.
 * The structures are shared by layout, which holds because the three libraries are built together. */
#ifndef SIM_ACL_INTERNAL_H_
#define SIM_ACL_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

#define ACLSIM_INTERNAL __attribute__((visibility("default")))
#define SIM_MAX_DIMS 8
#define SIM_MAX_TENSORS 3

struct aclTensor {
  aclDataType dtype;
  aclFormat format;
  int ndim;
  int64_t dims[SIM_MAX_DIMS], strides[SIM_MAX_DIMS];
  int64_t offset; /* in elements */
  char *data;
};

struct aclScalar {
  aclDataType dtype;
  double value;
};

/* A tensor list owns its tensors: aclDestroyTensorList destroys them too, as in CANN. */
struct aclTensorList {
  uint64_t n;
  aclTensor *v[];
};

enum sim_op { SIM_OP_MUL, SIM_OP_ADD, SIM_OP_MATMUL, SIM_OP_COPY };

/* An executor: copies of its operands' descriptors in GetWorkspaceSize order (aclSetTensorAddr's index),
 * each data pointer the operand's current address. A launch enqueues a copy (or, when the executor is not
 * repeatable, the executor itself), so later address changes only affect later launches. */
struct sim_exec {
  enum sim_op op;
  int nt;
  struct aclTensor t[SIM_MAX_TENSORS];
  const aclTensor *arg[SIM_MAX_TENSORS]; /* the handles GetWorkspaceSize received */
  float alpha;
  bool repeatable;
  char name[96]; /* the fault report's kernel name */
};

static inline size_t sim_dtype_size(aclDataType d) {
  switch (d) {
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: return 8;
    default: return 0;
  }
}

static inline int64_t sim_numel(const struct aclTensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->dims[d];
  return n;
}

/* A small open-addressing set of live handles, so stale or foreign handles are rejected (ptrset.c, built
 * into each library that keeps handles). */
struct sim_ptrset {
  pthread_mutex_t mu;
  uintptr_t *slots;
  size_t cap, used, live;
};
#define SIM_PTRSET_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0}
bool sim_ptrset_add(struct sim_ptrset *s, const void *p);
bool sim_ptrset_del(struct sim_ptrset *s, const void *p);
bool sim_ptrset_has(struct sim_ptrset *s, const void *p);
void sim_ptrset_clear(struct sim_ptrset *s);

/* ---- defined by libascendcl.so ---- */
/* aclsim_internal_fail records a failure (aclGetRecentErrMsg's line, aclrtGetLastError's code) and returns
 * code. */
ACLSIM_INTERNAL aclError aclsim_internal_fail(aclError code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* aclsim_internal_check: 100001 before aclInit, 507899 once the host has been told of a fault, else 0. */
ACLSIM_INTERNAL aclError aclsim_internal_check(void);
/* aclsim_internal_launch enqueues kernel e on stream (NULL: the default stream) for the launch call fn and
 * takes e whatever the result (107000 when stream is not a stream). */
ACLSIM_INTERNAL aclError aclsim_internal_launch(const char *fn, struct sim_exec *e, aclrtStream stream);

/* ---- defined by libnnopbase.so ---- */
ACLSIM_INTERNAL bool aclsim_internal_tensor_live(const aclTensor *t);
ACLSIM_INTERNAL bool aclsim_internal_scalar_live(const aclScalar *s);
/* aclsim_internal_exec_add makes e (heap-allocated by the op's GetWorkspaceSize) a live executor. */
ACLSIM_INTERNAL aclnnStatus aclsim_internal_exec_add(struct sim_exec *e);
/* aclsim_internal_exec_launch is every aclnn launch (fn names it in errors): a non-repeatable executor is
 * consumed, whatever the result. */
ACLSIM_INTERNAL aclnnStatus aclsim_internal_exec_launch(const char *fn, aclOpExecutor *executor, aclrtStream stream);

#endif
