/* ops.c: tensors, scalars and the aclnn operators (Mul, Add, Matmul, InplaceCopy) in the two-phase shape.
 * Phase one validates the tensors and builds an executor holding copies of their descriptors; phase two
 * enqueues it on a stream and consumes it. At execution each tensor's byte range (data + offset, extent
 * from the view dims/strides and dtype) must lie inside one live device allocation, otherwise the kernel
 * does not run and the context faults (507015). Kernels run single-threaded in a fixed loop order, so the
 * same inputs always give the same bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aclsim.h"

#define TENSOR_MAGIC 0x7e450a5cu

struct aclTensor {
  uint32_t magic;
  aclDataType dtype;
  aclFormat format;
  int ndim;
  int64_t dims[SIM_MAX_DIMS], strides[SIM_MAX_DIMS];
  int64_t offset;
  char *data;
};

struct aclScalar {
  aclDataType dtype;
  double value;
};

enum op_kind { OP_MUL, OP_ADD, OP_MATMUL, OP_COPY };

struct sim_exec {
  enum op_kind op;
  int nt;
  struct aclTensor t[3];
  float alpha;
  char name[96];
};

static struct sim_ptrset tensor_set = SIM_PTRSET_INIT;
static struct sim_ptrset scalar_set = SIM_PTRSET_INIT;
static struct sim_ptrset exec_set = SIM_PTRSET_INIT;

static size_t dtype_size(aclDataType d) {
  switch (d) {
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: return 8;
    default: return 0;
  }
}

/* ---- tensors and scalars ---- */
ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                               const int64_t *stride, int64_t offset, aclFormat format,
                                               const int64_t *storageDims, uint64_t storageDimsNum,
                                               void *tensorData) {
  (void)storageDims;
  (void)storageDimsNum; /* kernels touch the view; the storage shape only matters to the framework */
  if (viewDimsNum > SIM_MAX_DIMS || (viewDimsNum && !viewDims) || !dtype_size(dataType) || offset < 0) {
    sim_fail(ACL_ERROR_INVALID_PARAM, "aclCreateTensor: invalid dims, dtype %d or offset %lld", (int)dataType,
             (long long)offset);
    return NULL;
  }
  struct aclTensor *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->magic = TENSOR_MAGIC;
  t->dtype = dataType;
  t->format = format;
  t->ndim = (int)viewDimsNum;
  t->offset = offset;
  t->data = tensorData;
  int64_t contig = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (viewDims[d] < 0 || viewDims[d] > (1ll << 40)) {
      free(t);
      sim_fail(ACL_ERROR_INVALID_PARAM, "aclCreateTensor: invalid dim %lld", (long long)viewDims[d]);
      return NULL;
    }
    t->dims[d] = viewDims[d];
    t->strides[d] = stride ? stride[d] : contig; /* no strides: contiguous row-major */
    if (t->strides[d] > (1ll << 40) || t->strides[d] < -(1ll << 40)) {
      long long bad = (long long)t->strides[d];
      free(t);
      sim_fail(ACL_ERROR_INVALID_PARAM, "aclCreateTensor: invalid stride %lld", bad);
      return NULL;
    }
    contig *= viewDims[d] ? viewDims[d] : 1;
  }
  sim_ptrset_add(&tensor_set, t);
  return t;
}

ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor *tensor) {
  if (!tensor || !sim_ptrset_del(&tensor_set, tensor))
    return sim_fail(ACL_ERROR_INVALID_PARAM, "aclDestroyTensor: %p is not a live tensor", (const void *)tensor);
  free((void *)tensor);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclScalar *aclCreateScalar(void *value, aclDataType dataType) {
  if (!value) {
    sim_fail(ACL_ERROR_INVALID_PARAM, "aclCreateScalar: value is NULL");
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
      sim_fail(ACL_ERROR_INVALID_PARAM, "aclCreateScalar: unsupported dtype %d", (int)dataType);
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
    return sim_fail(ACL_ERROR_INVALID_PARAM, "aclDestroyScalar: %p is not a live scalar", (const void *)scalar);
  free((void *)scalar);
  return ACL_SUCCESS;
}

/* ---- geometry ---- */
static int64_t numel(const struct aclTensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->dims[d];
  return n;
}

/* extent: the byte range the view touches, relative to data; false when it touches nothing. */
static bool extent(const struct aclTensor *t, int64_t *lo_b, int64_t *len_b) {
  int64_t lo = t->offset, hi = t->offset;
  for (int d = 0; d < t->ndim; d++) {
    if (t->dims[d] == 0) return false;
    int64_t span = (t->dims[d] - 1) * t->strides[d];
    if (span < 0) lo += span;
    else hi += span;
  }
  int64_t es = (int64_t)dtype_size(t->dtype);
  *lo_b = lo * es;
  *len_b = (hi - lo + 1) * es;
  return true;
}

static bool contiguous(const struct aclTensor *t) {
  int64_t want = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->dims[d] != 1 && t->strides[d] != want) return false;
    want *= t->dims[d];
  }
  return true;
}

/* A row-major walk over a view's element offsets; wraps to the start after the last element, which is
 * what broadcasting a smaller operand over leading dims needs. */
struct walk {
  int nd;
  int64_t dims[SIM_MAX_DIMS], strides[SIM_MAX_DIMS], idx[SIM_MAX_DIMS];
  int64_t off;
};

static void walk_init(struct walk *w, const struct aclTensor *t) {
  memset(w, 0, sizeof *w);
  w->nd = t->ndim;
  memcpy(w->dims, t->dims, sizeof w->dims);
  memcpy(w->strides, t->strides, sizeof w->strides);
  w->off = t->offset;
}

static inline void walk_next(struct walk *w) {
  for (int d = w->nd - 1; d >= 0; d--) {
    w->off += w->strides[d];
    if (++w->idx[d] < w->dims[d]) return;
    w->off -= w->strides[d] * w->dims[d];
    w->idx[d] = 0;
  }
}

/* ---- kernels ---- */
static void k_binary(struct sim_exec *e) {
  const struct aclTensor *a = &e->t[0], *b = &e->t[1], *o = &e->t[2];
  int64_t n = numel(a), nb = numel(b);
  const float *pa = (const float *)a->data, *pb = (const float *)b->data;
  float *po = (float *)o->data;
  bool mul = e->op == OP_MUL;
  float alpha = e->alpha;
  if (contiguous(a) && contiguous(b) && contiguous(o)) {
    pa += a->offset, pb += b->offset, po += o->offset;
    for (int64_t base = 0; base < n; base += nb)
      for (int64_t j = 0; j < nb; j++) po[base + j] = mul ? pa[base + j] * pb[j] : pa[base + j] + alpha * pb[j];
    return;
  }
  struct walk wa, wb, wo;
  walk_init(&wa, a), walk_init(&wb, b), walk_init(&wo, o);
  for (int64_t i = 0; i < n; i++) {
    float x = pa[wa.off], y = pb[wb.off];
    po[wo.off] = mul ? x * y : x + alpha * y;
    walk_next(&wa), walk_next(&wb), walk_next(&wo);
  }
}

/* k_matmul: out[M,N] = self[M,K] @ mat2[K,N] in i-k-j order into a scratch buffer (so out may alias an
 * input), then stored through out's strides. */
static void k_matmul(struct sim_exec *e) {
  const struct aclTensor *a = &e->t[0], *b = &e->t[1], *o = &e->t[2];
  int64_t M = a->dims[0], K = a->dims[1], N = b->dims[1];
  const float *pa = (const float *)a->data + a->offset, *pb = (const float *)b->data + b->offset;
  float *po = (float *)o->data + o->offset;
  int64_t sa0 = a->strides[0], sa1 = a->strides[1], sb0 = b->strides[0], sb1 = b->strides[1];
  float *acc = calloc((size_t)(M * N > 0 ? M * N : 1), sizeof *acc);
  float *bt = NULL;
  if (!acc) return;
  if (sb1 != 1 && K * N > 0) {
    /* Gather a strided (e.g. transposed) mat2 once so the inner loop runs over contiguous floats. */
    bt = malloc((size_t)(K * N) * sizeof *bt);
    if (!bt) {
      free(acc);
      return;
    }
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++) bt[k * N + j] = pb[k * sb0 + j * sb1];
  }
  for (int64_t i = 0; i < M; i++) {
    float *row = acc + i * N;
    for (int64_t k = 0; k < K; k++) {
      float x = pa[i * sa0 + k * sa1];
      const float *brow = bt ? bt + k * N : pb + k * sb0;
      for (int64_t j = 0; j < N; j++) row[j] += x * brow[j];
    }
  }
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) po[i * o->strides[0] + j * o->strides[1]] = acc[i * N + j];
  free(bt);
  free(acc);
}

static void k_copy(struct sim_exec *e) {
  const struct aclTensor *d = &e->t[0], *s = &e->t[1];
  int64_t n = numel(d), ns = numel(s);
  size_t es = dtype_size(d->dtype);
  if (contiguous(d) && contiguous(s)) {
    for (int64_t base = 0; base < n; base += ns)
      memmove(d->data + (size_t)(d->offset + base) * es, s->data + (size_t)s->offset * es, (size_t)ns * es);
    return;
  }
  /* Strided: gather first so an overlapping source is read before it is written. */
  char *tmp = malloc((size_t)(ns ? ns : 1) * es);
  if (!tmp) return;
  struct walk ws, wd;
  walk_init(&ws, s);
  for (int64_t i = 0; i < ns; i++, walk_next(&ws)) memcpy(tmp + (size_t)i * es, s->data + ws.off * (int64_t)es, es);
  walk_init(&wd, d);
  for (int64_t i = 0; i < n; i++, walk_next(&wd))
    memcpy(d->data + wd.off * (int64_t)es, tmp + (size_t)(i % ns) * es, es);
  free(tmp);
}

static void kernel_fault(struct sim_exec *e, int index, int64_t size, uint32_t stream_id, uint32_t task_id,
                         uint32_t thread_id) {
  char lines[1024];
  snprintf(lines, sizeof lines,
           "there is an aicore error exception, core id is 0, error code = 0x800000\n"
           "errorStr: The DDR address of the MTE instruction is out of range. device_id=%d, stream_id=%u, "
           "task_id=%u, subErrType:4\n"
           "Kernel task happen error, retCode=0x26, [aicore exception]\n"
           "fault kernel_name=%s\n"
           "tensor index:%d\n"
           "addr:%#lx\n"
           "size:%lld bytes",
           (int)sim_device(), stream_id, task_id, e->name, index, (unsigned long)e->t[index].data, (long long)size);
  struct sim_fault f = {ACL_ERROR_RT_AICORE_EXCEPTION, stream_id, task_id, thread_id, lines};
  sim_fault_raise(&f);
}

void sim_exec_run(struct sim_exec *e, uint32_t stream_id, uint32_t task_id, uint32_t thread_id) {
  sim_mem_rdlock(); /* no free can drop a page this kernel reads until it is done */
  for (int i = 0; i < e->nt; i++) {
    int64_t lo, len;
    if (!extent(&e->t[i], &lo, &len)) continue;
    __int128 start = (__int128)(uintptr_t)e->t[i].data + lo;
    if (start < 0 || start > (__int128)UINTPTR_MAX || !sim_dev_range_ok((uintptr_t)start, (size_t)len)) {
      sim_mem_unlock();
      kernel_fault(e, i, len, stream_id, task_id, thread_id);
      return;
    }
  }
  switch (e->op) {
    case OP_MUL:
    case OP_ADD: k_binary(e); break;
    case OP_MATMUL: k_matmul(e); break;
    case OP_COPY: k_copy(e); break;
  }
  sim_mem_unlock();
}

void sim_exec_free(struct sim_exec *e) { free(e); }

int sim_exec_accesses(const struct sim_exec *e, struct sim_access *out, const char **name) {
  static const char *const names[] = {
      [OP_MUL] = "aclnnMul", [OP_ADD] = "aclnnAdd", [OP_MATMUL] = "aclnnMatmul", [OP_COPY] = "aclnnInplaceCopy"};
  int written = e->op == OP_COPY ? 0 : 2; /* InplaceCopy writes selfRef; the others write out */
  int n = 0;
  *name = names[e->op];
  for (int i = 0; i < e->nt; i++) {
    int64_t lo, len;
    if (!extent(&e->t[i], &lo, &len)) continue;
    __int128 start = (__int128)(uintptr_t)e->t[i].data + lo;
    if (start < 0 || start + len > (__int128)UINTPTR_MAX) continue; /* faults at execution */
    out[n++] = (struct sim_access){(uintptr_t)start, (size_t)len, i == written, 0};
  }
  return n;
}

/* ---- phase one ---- */
static const struct aclTensor *tensor_of(const aclTensor *t) {
  return t && sim_ptrset_has(&tensor_set, t) ? t : NULL;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static aclnnStatus build(const char *fn, const char *kname, enum op_kind op, const aclTensor *const *ts, int nt,
                         float alpha, uint64_t *workspaceSize, aclOpExecutor **executor) {
  if (!workspaceSize || !executor) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: workspaceSize or executor is NULL", fn);
  struct sim_exec *e = calloc(1, sizeof *e);
  if (!e) return sim_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  e->op = op;
  e->nt = nt;
  e->alpha = alpha;
  uint64_t h = fnv(0xcbf29ce484222325ull, kname, strlen(kname));
  for (int i = 0; i < nt; i++) {
    e->t[i] = *ts[i];
    h = fnv(h, &ts[i]->dtype, sizeof ts[i]->dtype);
    h = fnv(h, ts[i]->dims, sizeof(int64_t) * (size_t)ts[i]->ndim);
  }
  snprintf(e->name, sizeof e->name, "%s_%016llx_high_performance", kname, (unsigned long long)h);
  sim_ptrset_add(&exec_set, e);
  *workspaceSize = 0;
  *executor = (aclOpExecutor *)e;
  return ACL_SUCCESS;
}

static aclnnStatus check_float(const char *fn, const aclTensor *const *ts, int nt) {
  for (int i = 0; i < nt; i++) {
    if (!tensor_of(ts[i])) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: tensor %d is NULL or not live", fn, i);
    if (ts[i]->dtype != ACL_FLOAT)
      return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: tensor %d has dtype %d, only ACL_FLOAT is supported", fn, i,
                      (int)ts[i]->dtype);
  }
  return ACL_SUCCESS;
}

static aclnnStatus check_binary(const char *fn, const aclTensor *const *ts) {
  aclnnStatus rc = check_float(fn, ts, 3);
  if (rc) return rc;
  int64_t n = numel(ts[0]), nb = numel(ts[1]);
  if (numel(ts[2]) != n) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: out has %lld elements, self %lld", fn,
                                         (long long)numel(ts[2]), (long long)n);
  if (n && (nb == 0 || n % nb != 0))
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: other's %lld elements do not broadcast over self's %lld", fn,
                    (long long)nb, (long long)n);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor) {
  const aclTensor *ts[3] = {self, other, out};
  aclnnStatus rc = check_binary("aclnnMulGetWorkspaceSize", ts);
  if (rc) return rc;
  return build("aclnnMulGetWorkspaceSize", "Mul", OP_MUL, ts, 3, 1.0f, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
                                                         const aclScalar *alpha, aclTensor *out,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor) {
  const aclTensor *ts[3] = {self, other, out};
  aclnnStatus rc = check_binary("aclnnAddGetWorkspaceSize", ts);
  if (rc) return rc;
  if (!alpha || !sim_ptrset_has(&scalar_set, alpha))
    return sim_fail(ACL_ERROR_INVALID_PARAM, "aclnnAddGetWorkspaceSize: alpha is NULL or not live");
  return build("aclnnAddGetWorkspaceSize", "Add", OP_ADD, ts, 3, (float)alpha->value, workspaceSize, executor);
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
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: only 2-D operands are supported", fn);
  if (self->dims[1] != mat2->dims[0] || out->dims[0] != self->dims[0] || out->dims[1] != mat2->dims[1])
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: shapes [%lld,%lld] @ [%lld,%lld] -> [%lld,%lld] do not match", fn,
                    (long long)self->dims[0], (long long)self->dims[1], (long long)mat2->dims[0],
                    (long long)mat2->dims[1], (long long)out->dims[0], (long long)out->dims[1]);
  return build(fn, "MatMul", OP_MATMUL, ts, 3, 1.0f, workspaceSize, executor);
}

ACL_FUNC_VISIBILITY aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src,
                                                                 uint64_t *workspaceSize, aclOpExecutor **executor) {
  const char *fn = "aclnnInplaceCopyGetWorkspaceSize";
  const aclTensor *ts[2] = {selfRef, src};
  if (!tensor_of(selfRef) || !tensor_of(src))
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: selfRef or src is NULL or not live", fn);
  if (selfRef->dtype != src->dtype)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: dtype %d <- %d needs a cast, which is not supported", fn,
                    (int)selfRef->dtype, (int)src->dtype);
  int64_t n = numel(selfRef), ns = numel(src);
  if (n && (ns == 0 || n % ns != 0))
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: src's %lld elements do not broadcast over selfRef's %lld", fn,
                    (long long)ns, (long long)n);
  return build(fn, "InplaceCopy", OP_COPY, ts, 2, 1.0f, workspaceSize, executor);
}

/* ---- phase two ---- */
static aclnnStatus launch(const char *fn, aclOpExecutor *executor, aclrtStream stream) {
  aclError rc = sim_check();
  if (rc) {
    /* the launch consumes a live executor whatever happens, so a poisoned context leaks nothing */
    if (executor && sim_ptrset_del(&exec_set, executor)) sim_exec_free((struct sim_exec *)executor);
    return rc;
  }
  if (!executor || !sim_ptrset_del(&exec_set, executor))
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: executor %p is not live (each executor launches once)", fn,
                    (void *)executor);
  rc = sim_launch_kernel((struct sim_exec *)executor, stream);
  if (rc) {
    sim_exec_free((struct sim_exec *)executor);
    return sim_fail(rc, "%s: %p is not a stream", fn, stream);
  }
  return ACL_SUCCESS;
}

#define LAUNCH(name)                                                                                     \
  ACL_FUNC_VISIBILITY aclnnStatus name(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, \
                                       aclrtStream stream) {                                             \
    (void)workspace;                                                                                     \
    (void)workspaceSize;                                                                                 \
    return launch(#name, executor, stream);                                                              \
  }
LAUNCH(aclnnMul)
LAUNCH(aclnnAdd)
LAUNCH(aclnnMatmul)
LAUNCH(aclnnInplaceCopy)
