/* model.h: the DeepSeek-V3-shaped decoder stack decoder-sim trains: per layer an attention-like part
 * (q/k projections to rope-dim columns, rotary embedding with the shared cos/sin, a gated mix back to
 * hidden) and a gated MLP, residuals, a hand-written backward that reads everything through saved
 * tensors, and SGD. */
#ifndef DECODER_MODEL_H_
#define DECODER_MODEL_H_

#include <stdint.h>

#include "ops.h"

enum { P_WQ, P_WK, P_WO, P_W1, P_W3, P_W2, P_COUNT };

/* What each layer saves for backward, one slot per (node, input) as autograd would: x is saved by four
 * projections, cos and sin by two Muls each (the q and the k rotary embedding), the rotation buffer by two
 * matmuls. */
enum {
  SV_ROT_Q, SV_X_Q, SV_WQ, SV_X_QR, SV_WQR, SV_COS_Q, SV_SIN_Q,
  SV_ROT_K, SV_X_K, SV_WK, SV_X_KR, SV_WKR, SV_COS_K, SV_SIN_K,
  SV_QE, SV_KE, SV_A, SV_WO,
  SV_H_1, SV_W1, SV_H_3, SV_W3, SV_U, SV_G, SV_M, SV_W2,
  SV_COUNT
};

typedef struct saved {
  tensor t;       /* holds a storage reference while saved */
  int64_t handle; /* the agent's handle, or -1 */
} saved;

typedef struct layer {
  int index;
  int swapped;
  char group[32]; /* "layer.<i>" */
  char rope[40];  /* "layer.<i>.rope": rope_part's and rope_back's scope */
  char node[40];  /* "layer.<i>.node": a backward node's scope */
  tensor w[P_COUNT];
  tensor grad[P_COUNT];
  saved sv[SV_COUNT];
} layer;

typedef struct model_config {
  int layers;
  const unsigned char *swap; /* swap[i] != 0: layer i is wrapped */
  int64_t seq, hidden, rope_dim, ffn;
  uint64_t seed;
  float lr;
} model_config;

typedef struct model {
  model_config cfg;
  layer *layers;
  tensor rot;    /* [R, R]: x @ rot = rotate_half(x) = [-x2, x1]. A buffer shared by all layers */
  tensor embed;  /* [S, H] the fixed input hidden states */
  tensor target; /* [S, H] */
  tensor scale;  /* [1, H] filled with 2/(S*H): d(mean squared error)/d(out) = scale * (out - target) */
  float *cos_host, *sin_host; /* pinned; computed once */
  float *target_host, *out_host, *grad_host;
} model;

void model_init(model *m, const model_config *cfg);
/* model_step runs forward, loss, backward and SGD; returns loss and grad_norm. */
void model_step(model *m, double *loss, double *grad_norm);
void model_free(model *m);

#endif
