/* nnopbase.c: libnnopbase.so, the host-side objects the aclnn ops take: tensors, scalars, tensor lists and
 * executors (their lifetime, repeatability and tensor addresses). Tensor, scalar and list creation is
 * host-only: it needs no aclInit and a poisoned context does not affect it. Launches enqueue through
 * libascendcl.so (aclsim_internal_launch). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static struct sim_ptrset tensor_set = SIM_PTRSET_INIT;
static struct sim_ptrset scalar_set = SIM_PTRSET_INIT;
static struct sim_ptrset list_set = SIM_PTRSET_INIT;
static struct sim_ptrset exec_set = SIM_PTRSET_INIT;
/* Executors are created on one thread and launched on another (MindSpore's launch thread): finding a live
 * executor and using it is one step under this lock. */
static pthread_mutex_t exec_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- tensors, scalars, tensor lists ---- */
ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                               const int64_t *stride, int64_t offset, aclFormat format,
                                               const int64_t *storageDims, uint64_t storageDimsNum,
                                               void *tensorData) {
  (void)storageDims;
  (void)storageDimsNum; /* kernels touch the view; the storage shape only matters to the framework */
  if (viewDimsNum > SIM_MAX_DIMS || (viewDimsNum && !viewDims) || !sim_dtype_size(dataType) || offset < 0) {
    aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclCreateTensor: invalid dims, dtype %d or offset %lld",
                         (int)dataType, (long long)offset);
    return NULL;
  }
  struct aclTensor *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->dtype = dataType;
  t->format = format;
  t->ndim = (int)viewDimsNum;
  t->offset = offset;
  t->data = tensorData;
  int64_t contig = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (viewDims[d] < 0 || viewDims[d] > (1ll << 40)) {
      free(t);
      aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclCreateTensor: invalid dim %lld", (long long)viewDims[d]);
      return NULL;
    }
    t->dims[d] = viewDims[d];
    t->strides[d] = stride ? stride[d] : contig; /* no strides: contiguous row-major */
    if (t->strides[d] > (1ll << 40) || t->strides[d] < -(1ll << 40)) {
      long long bad = (long long)t->strides[d];
      free(t);
      aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclCreateTensor: invalid stride %lld", bad);
      return NULL;
    }
    contig *= viewDims[d] ? viewDims[d] : 1;
  }
  sim_ptrset_add(&tensor_set, t);
  return t;
}

ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor *tensor) {
  if (!tensor || !sim_ptrset_del(&tensor_set, tensor))
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclDestroyTensor: %p is not a live tensor",
                                (const void *)tensor);
  free((void *)tensor);
  return ACL_SUCCESS;
}

ACLSIM_INTERNAL bool aclsim_internal_tensor_live(const aclTensor *t) { return t && sim_ptrset_has(&tensor_set, t); }

ACL_FUNC_VISIBILITY aclScalar *aclCreateScalar(void *value, aclDataType dataType) {
  if (!value) {
    aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclCreateScalar: value is NULL");
    return NULL;
  }
  double v;
  switch (dataType) {
    case ACL_FLOAT: v = *(float *)value; break;
    case ACL_DOUBLE: v = *(double *)value; break;
    case ACL_INT32: v = *(int32_t *)value; break;
    case ACL_INT64: v = (double)*(int64_t *)value; break;
    case ACL_INT8: v = *(int8_t *)value; break;
    case ACL_UINT8: case ACL_BOOL: v = *(uint8_t *)value; break;
    default:
      aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclCreateScalar: unsupported dtype %d", (int)dataType);
      return NULL;
  }
  struct aclScalar *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->dtype = dataType;
  s->value = v;
  sim_ptrset_add(&scalar_set, s);
  return s;
}

ACL_FUNC_VISIBILITY aclnnStatus aclDestroyScalar(const aclScalar *scalar) {
  if (!scalar || !sim_ptrset_del(&scalar_set, scalar))
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclDestroyScalar: %p is not a live scalar",
                                (const void *)scalar);
  free((void *)scalar);
  return ACL_SUCCESS;
}

ACLSIM_INTERNAL bool aclsim_internal_scalar_live(const aclScalar *s) { return s && sim_ptrset_has(&scalar_set, s); }

ACL_FUNC_VISIBILITY aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size) {
  if ((size && !value) || size > (1u << 20)) {
    aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclCreateTensorList: value is NULL or size %llu is invalid",
                         (unsigned long long)size);
    return NULL;
  }
  for (uint64_t i = 0; i < size; i++)
    if (!aclsim_internal_tensor_live(value[i])) {
      aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclCreateTensorList: tensor %llu is NULL or not live",
                           (unsigned long long)i);
      return NULL;
    }
  struct aclTensorList *l = malloc(sizeof *l + size * sizeof *l->v);
  if (!l) return NULL;
  l->n = size;
  if (size) memcpy(l->v, value, size * sizeof *l->v);
  sim_ptrset_add(&list_set, l);
  return l;
}

ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensorList(const aclTensorList *array) {
  if (!array || !sim_ptrset_del(&list_set, array))
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "aclDestroyTensorList: %p is not a live tensor list",
                                (const void *)array);
  /* The list owns its tensors; one already destroyed (or listed twice) is skipped. */
  for (uint64_t i = 0; i < array->n; i++)
    if (sim_ptrset_del(&tensor_set, array->v[i])) free(array->v[i]);
  free((void *)array);
  return ACL_SUCCESS;
}

/* ---- executors ---- */
/* exec_of: the live executor h, else NULL. Caller holds exec_mu. */
static struct sim_exec *exec_of(const aclOpExecutor *h) {
  return h && sim_ptrset_has(&exec_set, h) ? (struct sim_exec *)h : NULL;
}

static aclnnStatus not_live(const char *fn, const aclOpExecutor *h) {
  return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM,
                              "%s: executor %p is not live (a launch consumes an executor that is not repeatable)",
                              fn, (const void *)h);
}

ACLSIM_INTERNAL aclnnStatus aclsim_internal_exec_add(struct sim_exec *e) {
  if (sim_ptrset_add(&exec_set, e)) return ACL_SUCCESS;
  free(e);
  return aclsim_internal_fail(ACL_ERROR_BAD_ALLOC, "aclnn GetWorkspaceSize: out of host memory for the executor");
}

ACL_FUNC_VISIBILITY aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor) {
  pthread_mutex_lock(&exec_mu);
  struct sim_exec *e = exec_of(executor);
  if (e) e->repeatable = true;
  pthread_mutex_unlock(&exec_mu);
  return e ? ACL_SUCCESS : not_live("aclSetAclOpExecutorRepeatable", executor);
}

/* A repeatable executor lives until here; one that is not repeatable may be destroyed before its launch. */
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor) {
  pthread_mutex_lock(&exec_mu);
  bool live = executor && sim_ptrset_del(&exec_set, executor);
  pthread_mutex_unlock(&exec_mu);
  if (!live) return not_live("aclDestroyAclOpExecutor", executor);
  free(executor);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclSetTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor,
                                                 void *addr) {
  const char *fn = "aclSetTensorAddr";
  aclnnStatus rc = ACL_SUCCESS;
  pthread_mutex_lock(&exec_mu);
  struct sim_exec *e = exec_of(executor);
  if (!e)
    rc = not_live(fn, executor);
  else if (index >= (size_t)e->nt)
    rc = aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: index %zu out of range (the executor has %d tensors)",
                              fn, index, e->nt);
  else if (tensor != e->arg[index])
    rc = aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: tensor %p is not the executor's tensor %zu (%p)", fn,
                              (void *)tensor, index, (const void *)e->arg[index]);
  else
    e->t[index].data = addr;
  pthread_mutex_unlock(&exec_mu);
  return rc;
}

/* The emulated ops take no tensor list, so once its arguments are valid this always fails. */
ACL_FUNC_VISIBILITY aclnnStatus aclSetDynamicTensorAddr(aclOpExecutor *executor, size_t irIndex,
                                                        const size_t relativeIndex, aclTensorList *tensors,
                                                        void *addr) {
  const char *fn = "aclSetDynamicTensorAddr";
  (void)addr;
  pthread_mutex_lock(&exec_mu);
  bool live = exec_of(executor) != NULL;
  pthread_mutex_unlock(&exec_mu);
  if (!live) return not_live(fn, executor);
  if (!tensors || !sim_ptrset_has(&list_set, tensors))
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: %p is not a live tensor list", fn, (void *)tensors);
  if (relativeIndex >= tensors->n)
    return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: relativeIndex %zu out of range (the list has %llu)",
                                fn, relativeIndex, (unsigned long long)tensors->n);
  return aclsim_internal_fail(ACL_ERROR_INVALID_PARAM, "%s: the executor has no tensor list at irIndex %zu", fn,
                              irIndex);
}

ACLSIM_INTERNAL aclnnStatus aclsim_internal_exec_launch(const char *fn, aclOpExecutor *executor, aclrtStream stream) {
  aclError rc = aclsim_internal_check();
  pthread_mutex_lock(&exec_mu);
  struct sim_exec *e = exec_of(executor), *task = NULL;
  if (e && !e->repeatable) {
    sim_ptrset_del(&exec_set, e); /* consumed whatever happens, so a poisoned context leaks nothing */
    task = e;
  } else if (e && !rc) {
    task = malloc(sizeof *task); /* the launch takes the addresses as they are now */
    if (task) *task = *e;
  }
  pthread_mutex_unlock(&exec_mu);
  if (rc) {
    free(task);
    return rc;
  }
  if (!e) return not_live(fn, executor);
  if (!task) return aclsim_internal_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  return aclsim_internal_launch(fn, task, stream);
}
