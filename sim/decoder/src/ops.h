/* ops.h: decoder-sim's 2-D float32 tensors (views on pool storages) and the aclnn kernels it launches on
 * them. A kernel reads each tensor's storage base when it is described (aclCreateTensor), never a cached
 * pointer: a released storage therefore reaches the device as data address 0. */
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
