/* opapi.c: libopapi.so, the aclnn ops (Mul, Add, Matmul, InplaceCopy) in the two-phase shape. Phase one
 * validates the tensors and builds an executor holding copies of their descriptors (libnnopbase.so keeps it);
 * phase two hands it to libnnopbase.so's launch, which enqueues it on a stream. The kernels themselves run
 * in libascendcl.so's stream workers, like device code (ops.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* build makes the executor; kname and the operands' dtypes and shapes name its kernel (FNV-1a hash). */
static aclnnStatus build(const char *fn, const char *kname, enum sim_op op, const aclTensor *const *ts, int nt,
                         float alpha, uint64_t *workspaceSize, aclOpExecutor **executor) {
  if (!workspaceSize || !executor)
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: workspaceSize or executor is NULL", fn);
  struct sim_exec *e = calloc(1, sizeof *e);
  if (!e) return aclsim_internal_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  e->op = op;
  e->nt = nt;
  e->alpha = alpha;
  uint64_t h = fnv(0xcbf29ce484222325ull, kname, strlen(kname));
  for (int i = 0; i < nt; i++) {
    e->t[i] = *ts[i];
    e->arg[i] = ts[i];
    h = fnv(h, &ts[i]->dtype, sizeof ts[i]->dtype);
    h = fnv(h, ts[i]->dims, sizeof(int64_t) * (size_t)ts[i]->ndim);
  }
  snprintf(e->name, sizeof e->name, "%s_%016llx_high_performance", kname, (unsigned long long)h);
  aclnnStatus rc = aclsim_internal_exec_add(e);
  if (rc) return rc;
  *workspaceSize = 0;
  *executor = (aclOpExecutor *)e;
  return ACL_SUCCESS;
}

static aclnnStatus check_float(const char *fn, const aclTensor *const *ts, int nt) {
  for (int i = 0; i < nt; i++) {
    if (!aclsim_internal_tensor_live(ts[i]))
      return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: tensor %d is NULL or not live", fn, i);
    if (ts[i]->dtype != ACL_FLOAT)
      return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: tensor %d has dtype %d, only ACL_FLOAT is supported",
                                  fn, i, (int)ts[i]->dtype);
  }
  return ACL_SUCCESS;
}

static aclnnStatus check_binary(const char *fn, const aclTensor *const *ts) {
  aclnnStatus rc = check_float(fn, ts, 3);
  if (rc) return rc;
  int64_t n = sim_numel(ts[0]), nb = sim_numel(ts[1]);
  if (sim_numel(ts[2]) != n)
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: out has %lld elements, self %lld", fn,
                                (long long)sim_numel(ts[2]), (long long)n);
  if (n && (nb == 0 || n % nb != 0))
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: other's %lld elements do not broadcast over self's %lld",
                                fn, (long long)nb, (long long)n);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor) {
  const aclTensor *ts[3] = {self, other, out};
  aclnnStatus rc = check_binary("aclnnMulGetWorkspaceSize", ts);
  if (rc) return rc;
  return build("aclnnMulGetWorkspaceSize", "Mul", SIM_OP_MUL, ts, 3, 1.0f, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
                                                         const aclScalar *alpha, aclTensor *out,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor) {
  const aclTensor *ts[3] = {self, other, out};
  aclnnStatus rc = check_binary("aclnnAddGetWorkspaceSize", ts);
  if (rc) return rc;
  if (!aclsim_internal_scalar_live(alpha))
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclnnAddGetWorkspaceSize: alpha is NULL or not live");
  return build("aclnnAddGetWorkspaceSize", "Add", SIM_OP_ADD, ts, 3, (float)alpha->value, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2,
                                                            aclTensor *out, int8_t cubeMathType,
                                                            uint64_t *workspaceSize, aclOpExecutor **executor) {
  (void)cubeMathType; /* float32 is computed in float32 whatever precision mode is asked */
  const char *fn = "aclnnMatmulGetWorkspaceSize";
  const aclTensor *ts[3] = {self, mat2, out};
  aclnnStatus rc = check_float(fn, ts, 3);
  if (rc) return rc;
  if (self->ndim != 2 || mat2->ndim != 2 || out->ndim != 2)
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: only 2-D operands are supported", fn);
  if (self->dims[1] != mat2->dims[0] || out->dims[0] != self->dims[0] || out->dims[1] != mat2->dims[1])
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM,
                                "%s: shapes [%lld,%lld] @ [%lld,%lld] -> [%lld,%lld] do not match", fn, (long long)self->dims[0], (long long)self->dims[1], (long long)mat2->dims[0],
                                (long long)mat2->dims[1], (long long)out->dims[0], (long long)out->dims[1]);
  return build(fn, "MatMul", SIM_OP_MATMUL, ts, 3, 1.0f, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src,
                                                                 uint64_t *workspaceSize, aclOpExecutor **executor) {
  const char *fn = "aclnnInplaceCopyGetWorkspaceSize";
  const aclTensor *ts[2] = {selfRef, src};
  if (!aclsim_internal_tensor_live(selfRef) || !aclsim_internal_tensor_live(src))
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: selfRef or src is NULL or not live", fn);
  if (selfRef->dtype != src->dtype)
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: dtype %d <- %d needs a cast, which is not supported", fn,
                                (int)selfRef->dtype, (int)src->dtype);
  int64_t n = sim_numel(selfRef), ns = sim_numel(src);
  if (n && (ns == 0 || n % ns != 0))
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: src's %lld elements do not broadcast over selfRef's %lld",
                                fn, (long long)ns, (long long)n);
  return build(fn, "InplaceCopy", SIM_OP_COPY, ts, 2, 1.0f, workspaceSize, executor);
}

#define LAUNCH(name)                                                                                     \
  ACL_FUNC_VISIBILITY aclnnStatus name(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, \
                                       aclrtStream stream) {                                             \
    (void)workspace;                                                                                     \
    (void)workspaceSize;                                                                                 \
    return aclsim_internal_exec_launch(#name, executor, stream);                                         \
  }
LAUNCH(aclnnMul)
LAUNCH(aclnnAdd)
LAUNCH(aclnnMatmul)
LAUNCH(aclnnInplaceCopy)
