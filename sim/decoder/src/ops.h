/* ops.h: decoder-sim's 2-D float32 tensors (views on pool storages) and the aclnn kernels it launches on
 * them. Like a framework's tensor object, a tensor made in forward keeps the device address its storage had
 * when it was made; a tensor saved for backward is re-read through its storage at every use (the swap may
 * have moved it). So a storage released under a live tensor goes unnoticed in forward (a stale read, which
 * the agent's launch check reports) and reaches the device as data address 0 in backward: the failure mode
 * of hyper-parallel issue 294. */
#ifndef DECODER_OPS_H_
#define DECODER_OPS_H_

#include <stdint.h>

#include "pool.h"
#include "rt.h"

typedef struct tensor {
  storage *st;
  int64_t rows, cols; /* view shape */
  int64_t rs, cs;     /* strides in elements */
  int64_t offset;     /* in elements */
  uintptr_t addr;     /* device base captured when made; 0: read the storage's base at every use */
} tensor;

enum ops_sync { OPS_SYNC_OP, OPS_SYNC_LAYER, OPS_SYNC_STEP };

void ops_init(aclrtStream stream, enum ops_sync mode);
aclrtStream ops_stream(void);
enum ops_sync ops_sync_mode(void);

/* tensor_new returns a contiguous rows x cols tensor owning a new storage (one reference). */
tensor tensor_new(int64_t rows, int64_t cols);
void tensor_free(tensor *t);
/* tensor_t is the transposed view (shares the storage; takes no reference). */
tensor tensor_t(tensor t);
size_t tensor_bytes(tensor t);

void op_mul(tensor out, tensor self, tensor other);             /* out = self * other */
void op_add(tensor out, tensor self, tensor other, float alpha); /* out = self + alpha * other */
void op_matmul(tensor out, tensor self, tensor mat2);           /* out = self @ mat2 */
void op_copy(tensor dst, tensor src);                           /* dst = src */

/* ops_sync waits for the stream; a failure names the last kernel launched. */
void ops_sync(void);
/* Host <-> device copies of a contiguous tensor (h2d async on the stream from pinned memory). */
void ops_h2d_async(tensor dst, const float *host);
void ops_d2h(float *host, tensor src);

#endif
