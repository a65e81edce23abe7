/* ops.c: the device side of the aclnn ops: the kernels of Mul, Add, Matmul and InplaceCopy, run on the
 * stream workers. At execution each tensor's byte range (data + offset, extent from the view dims/strides
 * and dtype) must be live device memory (sim_dev_range_ok), otherwise the kernel does not run and the
 * context faults (507015). Kernels run single-threaded in a fixed loop order, so the same inputs always give
 * the same bits. The host side (tensors, executors, GetWorkspaceSize, launches) is libnnopbase.so's and
 * libopapi.so's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aclsim.h"

/* ---- geometry ---- */
/* extent: the byte range the view touches, relative to data; false when it touches nothing. */
static bool extent(const struct aclTensor *t, int64_t *lo_b, int64_t *len_b) {
  int64_t lo = t->offset, hi = t->offset;
  for (int d = 0; d < t->ndim; d++) {
    if (t->dims[d] == 0) return false;
    int64_t span = (t->dims[d] - 1) * t->strides[d];
    if (span < 0) lo += span;
    else hi += span;
  }
  int64_t es = (int64_t)sim_dtype_size(t->dtype);
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
  int64_t n = sim_numel(a), nb = sim_numel(b);
  const float *pa = (const float *)a->data, *pb = (const float *)b->data;
  float *po = (float *)o->data;
  bool mul = e->op == SIM_OP_MUL;
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
  int64_t n = sim_numel(d), ns = sim_numel(s);
  size_t es = sim_dtype_size(d->dtype);
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
    case SIM_OP_MUL:
    case SIM_OP_ADD: k_binary(e); break;
    case SIM_OP_MATMUL: k_matmul(e); break;
    case SIM_OP_COPY: k_copy(e); break;
  }
  sim_mem_unlock();
}

int sim_exec_accesses(const struct sim_exec *e, struct sim_access *out, const char **name) {
  static const char *const names[] = {
      [SIM_OP_MUL] = "aclnnMul", [SIM_OP_ADD] = "aclnnAdd", [SIM_OP_MATMUL] = "aclnnMatmul",
      [SIM_OP_COPY] = "aclnnInplaceCopy"};
  int written = e->op == SIM_OP_COPY ? 0 : 2; /* InplaceCopy writes selfRef; the others write out */
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
