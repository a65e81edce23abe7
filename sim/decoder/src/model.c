/* model.c: forward, backward and SGD of decoder-sim's decoder stack, all on device through aclnn Mul, Add,
 * Matmul and InplaceCopy; only the loss and the gradient norm are reduced on host. The swap wiring follows
 * autograd: each op saves what its backward needs (swapagent_save), the backward of a node unpacks its saved
 * tensors just before using them (swapagent_unpack), and tensors are re-described from their storages every
 * time, so a storage restored at another address is simply used there. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap.h"
#include "swapagent.h"

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) {
    fprintf(stderr, "decoder-sim: out of host memory\n");
    exit(1);
  }
  return p;
}

/* splitmix64: a fixed, portable stream of pseudo-random numbers for weights and data. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* rng_uniform returns a float in [-1, 1). */
static float rng_uniform(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) * 0x1.0p-52 - 1.0); }

static void h2d_sync(tensor t, const float *host) {
  size_t n = tensor_bytes(t);
  rt_check(RT(aclrtMemcpy)((void *)storage_base(t.st), t.st->nbytes, host, n, ACL_MEMCPY_HOST_TO_DEVICE),
           "aclrtMemcpy", NULL);
}

static tensor random_tensor(int64_t rows, int64_t cols, float amp, uint64_t *rng) {
  tensor t = tensor_new(rows, cols);
  size_t n = (size_t)(rows * cols);
  float *h = xmalloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = amp * rng_uniform(rng);
  h2d_sync(t, h);
  free(h);
  return t;
}

void model_init(model *m, const model_config *cfg) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  const int64_t S = cfg->seq, H = cfg->hidden, R = cfg->rope_dim, F = cfg->ffn;
  uint64_t rng = cfg->seed;

  /* RoPE tables, rotate-half layout: column j and j + R/2 share frequency base^(-2j/R). */
  size_t rope_n = (size_t)(S * R);
  void *p = NULL;
  rt_check(RT(aclrtMallocHost)(&p, rope_n * sizeof(float)), "aclrtMallocHost", NULL);
  m->cos_host = p;
  rt_check(RT(aclrtMallocHost)(&p, rope_n * sizeof(float)), "aclrtMallocHost", NULL);
  m->sin_host = p;
  for (int64_t s = 0; s < S; s++)
    for (int64_t j = 0; j < R; j++) {
      double freq = pow(10000.0, -2.0 * (double)(j % (R / 2)) / (double)R);
      m->cos_host[s * R + j] = (float)cos((double)s * freq);
      m->sin_host[s * R + j] = (float)sin((double)s * freq);
    }

  /* rotate_half(x) = [-x2, x1] = x @ rot, so rotate_half(x @ w) = x @ (w @ rot): one more projection
   * instead of strided half-copies. */
  float *rot = calloc((size_t)(R * R), sizeof *rot);
  if (rot == NULL) {
    fprintf(stderr, "decoder-sim: out of host memory\n");
    exit(1);
  }
  for (int64_t j = 0; j < R / 2; j++) {
    rot[(j + R / 2) * R + j] = -1.0f;
    rot[j * R + (j + R / 2)] = 1.0f;
  }
  m->rot = tensor_new(R, R);
  h2d_sync(m->rot, rot);
  free(rot);

  m->embed = random_tensor(S, H, 1.0f, &rng);
  m->target_host = xmalloc((size_t)(S * H) * sizeof(float));
  for (int64_t i = 0; i < S * H; i++) m->target_host[i] = rng_uniform(&rng);
  m->target = tensor_new(S, H);
  h2d_sync(m->target, m->target_host);
  float *sc = xmalloc((size_t)H * sizeof *sc);
  for (int64_t i = 0; i < H; i++) sc[i] = (float)(2.0 / (double)(S * H));
  m->scale = tensor_new(1, H);
  h2d_sync(m->scale, sc);
  free(sc);
  /* Results come back with async copies into pinned memory and one wait per read (no synchronous copy). */
  rt_check(RT(aclrtMallocHost)(&p, (size_t)(S * H) * sizeof(float)), "aclrtMallocHost", NULL);
  m->out_host = p;
  rt_check(RT(aclrtMallocHost)(&p, (size_t)cfg->layers * (size_t)(3 * H * R + 3 * H * F) * sizeof(float)),
           "aclrtMallocHost", NULL);
  m->grad_host = p;

  /* Projections into the residual stream start small so 12 polynomial layers stay well scaled. */
  m->layers = calloc((size_t)cfg->layers, sizeof *m->layers);
  if (m->layers == NULL) {
    fprintf(stderr, "decoder-sim: out of host memory\n");
    exit(1);
  }
  for (int i = 0; i < cfg->layers; i++) {
    layer *L = &m->layers[i];
    L->index = i;
    L->swapped = cfg->swap[i] && swap_present();
    snprintf(L->group, sizeof L->group, "layer.%d", i);
    snprintf(L->rope, sizeof L->rope, "layer.%d.rope", i);
    snprintf(L->node, sizeof L->node, "layer.%d.node", i);
    L->w[P_WQ] = random_tensor(H, R, 1.0f / sqrtf((float)H), &rng);
    L->w[P_WK] = random_tensor(H, R, 1.0f / sqrtf((float)H), &rng);
    L->w[P_WO] = random_tensor(R, H, 0.2f / sqrtf((float)R), &rng);
    L->w[P_W1] = random_tensor(H, F, 1.0f / sqrtf((float)H), &rng);
    L->w[P_W3] = random_tensor(H, F, 1.0f / sqrtf((float)H), &rng);
    L->w[P_W2] = random_tensor(F, H, 0.2f / sqrtf((float)F), &rng);
    for (int k = 0; k < SV_COUNT; k++) L->sv[k].handle = -1;
  }
}

/* save keeps t for backward (a storage reference) and registers it with the agent in swapped layers. */
static void save(layer *L, int slot, tensor t, uint32_t flags) {
  saved *s = &L->sv[slot];
  s->t = t;
  storage_ref(t.st);
  s->handle = L->swapped ? swap_save(L->group, t.st, flags) : -1;
}

/* use returns a saved tensor for its backward node, asking the agent to bring it back first. */
static tensor use(layer *L, int slot) {
  saved *s = &L->sv[slot];
  if (s->handle >= 0) swap_unpack(s->handle, s->t.st);
  tensor t = s->t;
  t.addr = 0; /* saved tensors are unpacked through their storage */
  return t;
}

static void drop_saved(layer *L) {
  for (int k = 0; k < SV_COUNT; k++) {
    tensor_free(&L->sv[k].t);
    L->sv[k].handle = -1;
  }
}

/* rope_part computes e = p * cos + rotate_half(p) * sin for p = x @ w, with rotate_half(p) = x @ (w @ rot),
 * saving like autograd. */
static tensor rope_part(model *m, layer *L, tensor x, int w_idx, tensor cos, tensor sin, int sv_rot, int sv_x,
                        int sv_w, int sv_xr, int sv_wr, int sv_cos, int sv_sin) {
  const int64_t S = m->cfg.seq, H = m->cfg.hidden, R = m->cfg.rope_dim;
  swap_scope_enter(L->rope); /* its temporaries die when it returns */
  tensor w = L->w[w_idx];
  tensor wr = tensor_new(H, R);
  op_matmul(wr, w, m->rot);
  save(L, sv_rot, m->rot, SWAPAGENT_SAVE_PARAM);
  tensor p = tensor_new(S, R);
  op_matmul(p, x, w);
  save(L, sv_x, x, 0);
  save(L, sv_w, w, SWAPAGENT_SAVE_PARAM);
  tensor pr = tensor_new(S, R);
  op_matmul(pr, x, wr);
  save(L, sv_xr, x, 0);
  save(L, sv_wr, wr, 0);
  /* cos and sin go in as tensor 0 of their Muls, forward and backward alike. */
  tensor t1 = tensor_new(S, R);
  op_mul(t1, cos, p);
  save(L, sv_cos, cos, 0);
  tensor t2 = tensor_new(S, R);
  op_mul(t2, sin, pr);
  save(L, sv_sin, sin, 0);
  tensor e = tensor_new(S, R);
  op_add(e, t1, t2, 1.0f);
  tensor *tmp[] = {&wr, &p, &pr, &t1, &t2};
  for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) tensor_free(tmp[i]);
  swap_scope_exit(L->rope);
  return e;
}

static tensor layer_forward(model *m, layer *L, tensor x, tensor cos, tensor sin) {
  const int64_t S = m->cfg.seq, H = m->cfg.hidden, R = m->cfg.rope_dim, F = m->cfg.ffn;
  if (L->swapped) {
    /* x is positional; cos and sin come in as the keyword argument rotary_cos_sin. */
    uintptr_t inputs[3] = {storage_base(x.st), storage_base(cos.st), storage_base(sin.st)};
    swap_region_enter(L->group, inputs, 3, 1);
  } else {
    swap_scope_enter(L->group); /* declared, not swapped: where its temporaries die */
  }
  tensor qe = rope_part(m, L, x, P_WQ, cos, sin, SV_ROT_Q, SV_X_Q, SV_WQ, SV_X_QR, SV_WQR, SV_COS_Q, SV_SIN_Q);
  tensor ke = rope_part(m, L, x, P_WK, cos, sin, SV_ROT_K, SV_X_K, SV_WK, SV_X_KR, SV_WKR, SV_COS_K, SV_SIN_K);
  tensor a = tensor_new(S, R);
  op_mul(a, qe, ke);
  save(L, SV_QE, qe, 0);
  save(L, SV_KE, ke, 0);
  tensor o = tensor_new(S, H);
  op_matmul(o, a, L->w[P_WO]);
  save(L, SV_A, a, 0);
  save(L, SV_WO, L->w[P_WO], SWAPAGENT_SAVE_PARAM);
  tensor h = tensor_new(S, H);
  op_add(h, x, o, 1.0f);

  /* With --streams 2 the MLP runs on its own stream once h is ready (fork) ... */
  ops_use_stream(OPS_MLP);
  tensor u = tensor_new(S, F);
  op_matmul(u, h, L->w[P_W1]);
  save(L, SV_H_1, h, 0);
  save(L, SV_W1, L->w[P_W1], SWAPAGENT_SAVE_PARAM);
  tensor g = tensor_new(S, F);
  op_matmul(g, h, L->w[P_W3]);
  save(L, SV_H_3, h, 0);
  save(L, SV_W3, L->w[P_W3], SWAPAGENT_SAVE_PARAM);
  tensor mm = tensor_new(S, F);
  op_mul(mm, u, g);
  save(L, SV_U, u, 0);
  save(L, SV_G, g, 0);
  tensor y = tensor_new(S, H);
  op_matmul(y, mm, L->w[P_W2]);
  save(L, SV_M, mm, 0);
  save(L, SV_W2, L->w[P_W2], SWAPAGENT_SAVE_PARAM);
  tensor out = tensor_new(S, H);
  op_add(out, h, y, 1.0f);
  /* ... and the main stream waits for it before the next layer reads out (join). */
  ops_use_stream(OPS_MAIN);

  tensor *tmp[] = {&qe, &ke, &a, &o, &h, &u, &g, &mm, &y};
  for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) tensor_free(tmp[i]);
  if (L->swapped) {
    uintptr_t outputs[1] = {storage_base(out.st)};
    swap_region_exit(L->group, outputs, 1);
  } else {
    swap_scope_exit(L->group);
  }
  if (ops_sync_mode() == OPS_SYNC_LAYER) ops_sync();
  return out;
}

/* add_into returns acc + t as a new tensor and frees both: a node of its own, as autograd's accumulation. */
static tensor add_into(tensor *acc, tensor *t) {
  swap_scope_enter("accumulate");
  tensor r = tensor_new(acc->rows, acc->cols);
  op_add(r, *acc, *t, 1.0f);
  tensor_free(acc);
  tensor_free(t);
  swap_scope_exit("accumulate");
  return r;
}

/* rope_back: given d(e) for e = (x @ w) * cos + (x @ wr) * sin, wr = w @ rot, adds the input gradient into
 * *dx and returns d(w). Reads cos and sin through Mul (as tensor 0), as autograd's Mul backward does. */
static tensor rope_back(model *m, layer *L, tensor de, tensor *dx, int sv_rot, int sv_x, int sv_w, int sv_xr,
                        int sv_wr, int sv_cos, int sv_sin) {
  const int64_t S = m->cfg.seq, H = m->cfg.hidden, R = m->cfg.rope_dim;
  swap_scope_enter(L->rope);
  tensor dpr = tensor_new(S, R);
  op_mul(dpr, use(L, sv_sin), de);
  tensor dp = tensor_new(S, R);
  op_mul(dp, use(L, sv_cos), de);

  tensor xr = use(L, sv_xr), wr = use(L, sv_wr);
  tensor dwr = tensor_new(H, R);
  op_matmul(dwr, tensor_t(xr), dpr);
  tensor t = tensor_new(S, H);
  op_matmul(t, dpr, tensor_t(wr));
  *dx = add_into(dx, &t);

  tensor x = use(L, sv_x), w = use(L, sv_w);
  tensor dw = tensor_new(H, R);
  op_matmul(dw, tensor_t(x), dp);
  t = tensor_new(S, H);
  op_matmul(t, dp, tensor_t(w));
  *dx = add_into(dx, &t);

  tensor rot = use(L, sv_rot);
  t = tensor_new(H, R);
  op_matmul(t, dwr, tensor_t(rot));
  dw = add_into(&dw, &t);
  tensor_free(&dwr);
  tensor_free(&dp);
  tensor_free(&dpr);
  swap_scope_exit(L->rope);
  return dw;
}

/* layer_backward takes d(out) and returns d(x); the weight gradients land in L->grad. */
static tensor layer_backward(model *m, layer *L, tensor dout) {
  const int64_t S = m->cfg.seq, H = m->cfg.hidden, R = m->cfg.rope_dim, F = m->cfg.ffn;
  if (L->swapped)
    swap_backward_enter(L->group);
  else
    swap_scope_enter(L->group);

  /* Backward nodes as autograd runs them: each is a scope (swap_scope_enter) and a gradient dies when the
   * last node that reads it returns, a layer's saved tensors when its backward ends (drop_saved). */
  /* MLP: out = h + (u*g) @ W2, u = h @ W1, g = h @ W3; on the MLP stream once dout is ready. */
  ops_use_stream(OPS_MLP);
  swap_scope_enter(L->node);
  tensor mm = use(L, SV_M), w2 = use(L, SV_W2);
  L->grad[P_W2] = tensor_new(F, H);
  op_matmul(L->grad[P_W2], tensor_t(mm), dout);
  tensor dm = tensor_new(S, F);
  op_matmul(dm, dout, tensor_t(w2));
  swap_scope_exit(L->node);
  swap_scope_enter(L->node);
  tensor u = use(L, SV_U), g = use(L, SV_G);
  tensor du = tensor_new(S, F), dg = tensor_new(S, F);
  op_mul(du, dm, g);
  op_mul(dg, dm, u);
  tensor_free(&dm);
  swap_scope_exit(L->node);
  swap_scope_enter(L->node);
  tensor h3 = use(L, SV_H_3), w3 = use(L, SV_W3);
  L->grad[P_W3] = tensor_new(H, F);
  op_matmul(L->grad[P_W3], tensor_t(h3), dg);
  tensor dhg = tensor_new(S, H);
  op_matmul(dhg, dg, tensor_t(w3));
  tensor_free(&dg);
  swap_scope_exit(L->node);
  swap_scope_enter(L->node);
  tensor h1 = use(L, SV_H_1), w1 = use(L, SV_W1);
  L->grad[P_W1] = tensor_new(H, F);
  op_matmul(L->grad[P_W1], tensor_t(h1), du);
  tensor dhu = tensor_new(S, H);
  op_matmul(dhu, du, tensor_t(w1));
  tensor_free(&du);
  swap_scope_exit(L->node);
  swap_scope_enter(L->node);
  tensor dh = tensor_new(S, H);
  op_add(dh, dout, dhu, 1.0f);
  tensor_free(&dhu);
  swap_scope_exit(L->node);
  dh = add_into(&dh, &dhg);
  ops_use_stream(OPS_MAIN); /* join: the attention backward reads dh, SGD the MLP's gradients */

  /* Attention: h = x + (qe*ke) @ Wo. */
  swap_scope_enter(L->node);
  tensor a = use(L, SV_A), wo = use(L, SV_WO);
  L->grad[P_WO] = tensor_new(R, H);
  op_matmul(L->grad[P_WO], tensor_t(a), dh);
  tensor da = tensor_new(S, R);
  op_matmul(da, dh, tensor_t(wo));
  swap_scope_exit(L->node);
  swap_scope_enter(L->node);
  tensor qe = use(L, SV_QE), ke = use(L, SV_KE);
  tensor dqe = tensor_new(S, R), dke = tensor_new(S, R);
  op_mul(dqe, da, ke);
  op_mul(dke, da, qe);
  tensor_free(&da);
  swap_scope_exit(L->node);
  tensor dx = dh; /* the residual path; rope_back adds the projections' input gradients */
  L->grad[P_WK] = rope_back(m, L, dke, &dx, SV_ROT_K, SV_X_K, SV_WK, SV_X_KR, SV_WKR, SV_COS_K, SV_SIN_K);
  tensor_free(&dke);
  L->grad[P_WQ] = rope_back(m, L, dqe, &dx, SV_ROT_Q, SV_X_Q, SV_WQ, SV_X_QR, SV_WQR, SV_COS_Q, SV_SIN_Q);
  tensor_free(&dqe);

  if (ops_sync_mode() == OPS_SYNC_LAYER) ops_sync();
  if (L->swapped)
    swap_backward_exit(L->group);
  else
    swap_scope_exit(L->group);
  drop_saved(L);
  return dx;
}

void model_step(model *m, double *loss, double *grad_norm) {
  const int64_t S = m->cfg.seq, H = m->cfg.hidden, R = m->cfg.rope_dim;
  /* RoPE cos/sin: computed once, copied into fresh storages each step, shared by every layer. */
  tensor cos = tensor_new(S, R), sin = tensor_new(S, R);
  ops_h2d_async(cos, m->cos_host);
  ops_h2d_async(sin, m->sin_host);
  tensor x = tensor_new(S, H);
  op_copy(x, m->embed);

  for (int i = 0; i < m->cfg.layers; i++) {
    tensor out = layer_forward(m, &m->layers[i], x, cos, sin);
    tensor_free(&x);
    x = out;
  }
  /* The host reads the loss: the step's first wait. */
  ops_d2h_async(m->out_host, x);
  ops_sync();
  double sum = 0;
  for (int64_t i = 0; i < S * H; i++) {
    double d = (double)m->out_host[i] - (double)m->target_host[i];
    sum += d * d;
  }
  *loss = sum / (double)(S * H);

  swap_scope_enter("loss");
  tensor diff = tensor_new(S, H);
  op_add(diff, x, m->target, -1.0f);
  tensor_free(&x);
  swap_scope_exit("loss");
  swap_scope_enter("loss");
  tensor dout = tensor_new(S, H);
  op_mul(dout, diff, m->scale);
  tensor_free(&diff);
  swap_scope_exit("loss");
  for (int i = m->cfg.layers - 1; i >= 0; i--) {
    tensor dx = layer_backward(m, &m->layers[i], dout);
    tensor_free(&dout);
    dout = dx;
  }
  tensor_free(&dout);
  tensor_free(&cos);
  tensor_free(&sin);

  /* The host reads the gradients: the step's second and last wait. */
  float *gh = m->grad_host;
  for (int i = 0; i < m->cfg.layers; i++)
    for (int k = 0; k < P_COUNT; k++) {
      tensor gk = m->layers[i].grad[k];
      ops_d2h_async(gh, gk);
      gh += gk.rows * gk.cols;
    }
  ops_sync();
  /* Every stream is idle and the launch queue empty: MindSpore's eager free (empty cache) can unmap the free
   * chunks at the end of a VMM pool with nothing queued or running on them (a no-op with --alloc malloc). */
  pool_empty_cache();
  if (pool_mode() == POOL_VMM) swap_empty_cache();
  double gsum = 0;
  for (const float *g = m->grad_host; g < gh; g++) gsum += (double)*g * (double)*g;
  *grad_norm = sqrt(gsum);

  /* SGD in place (p -= lr * grad), then the gradients are dropped (zero_grad(set_to_none)). */
  for (int i = 0; i < m->cfg.layers; i++)
    for (int k = 0; k < P_COUNT; k++) {
      layer *L = &m->layers[i];
      op_add(L->w[k], L->w[k], L->grad[k], -m->cfg.lr);
      tensor_free(&L->grad[k]);
    }
  /* No wait: the next step's loss read (or the exit) waits for the update. */
}

void model_free(model *m) {
  for (int i = 0; i < m->cfg.layers; i++)
    for (int k = 0; k < P_COUNT; k++) tensor_free(&m->layers[i].w[k]);
  free(m->layers);
  tensor_free(&m->rot);
  tensor_free(&m->embed);
  tensor_free(&m->target);
  tensor_free(&m->scale);
  rt_check(RT(aclrtFreeHost)(m->cos_host), "aclrtFreeHost", NULL);
  rt_check(RT(aclrtFreeHost)(m->sin_host), "aclrtFreeHost", NULL);
  free(m->target_host);
  rt_check(RT(aclrtFreeHost)(m->out_host), "aclrtFreeHost", NULL);
  rt_check(RT(aclrtFreeHost)(m->grad_host), "aclrtFreeHost", NULL);
}
