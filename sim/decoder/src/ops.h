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

/* Who issues stream work. INLINE: the main thread launches each kernel right after its GetWorkspaceSize.
 * THREAD: MindSpore's launch thread: the main thread makes the tensors and runs GetWorkspaceSize, then queues
 * the launch (op name, launch function, workspace, executor, stream); the launch thread pops it, sets cached
 * executors' tensor addresses (aclSetTensorAddr), calls aclnnXxx(workspace, size, executor, stream) and then
 * destroys the launch's tensors and scalar. Every other stream call (aclrtMemcpyAsync, aclrtRecordEvent,
 * aclrtStreamWaitEvent) goes through the same queue, so stream work is issued in host program order. */
enum ops_launch { OPS_LAUNCH_INLINE, OPS_LAUNCH_THREAD };

/* OPS_CACHE_DEFAULT: the executor cache's default capacity (MindSpore PyBoost's LRU). */
enum { OPS_CACHE_DEFAULT = 1024 };

/* Compute streams: everything runs on OPS_MAIN, except the MLP half of each layer with --streams 2. */
enum { OPS_MAIN, OPS_MLP, OPS_MAX_STREAMS };

/* ops_init creates the streams (and, with two, the two events that order them; none when the test-only
 * DECODER_SIM_TEST_NO_EVENTS=1 is set), starts the launch thread with OPS_LAUNCH_THREAD, and turns the
 * executor cache on with cache_entries > 0 (an LRU of that many repeatable executors; 0: off). ops_fini,
 * after a final ops_sync, stops the launch thread, destroys the cached executors and their tensors and
 * scalars, then the events and streams. */
void ops_init(int streams, enum ops_sync mode, enum ops_launch launch, size_t cache_entries);
void ops_fini(void);
/* ops_drain returns once the launch thread has issued everything queued before the call (no-op inline); a
 * failure the launch thread met ends the run here (exit 1, naming the call and the op). Syncs drain first,
 * and so does every swap ABI call (swap.c): the agent sees launches and ABI calls in host program order. */
void ops_drain(void);
/* ops_cache_summary prints one stderr line of executor-cache counts when the cache is on. */
void ops_cache_summary(void);
int ops_streams(void);
/* ops_events_off is 1 when the test-only switch removed the event ordering. */
int ops_events_off(void);
enum ops_sync ops_sync_mode(void);
/* ops_use_stream sends later launches and copies to stream k (OPS_MAIN or OPS_MLP; one stream: a no-op).
 * Leaving a stream records its event there and makes k wait for it, so every task is ordered after every
 * task enqueued before it, whichever streams they run on: see pool.c for why the pool relies on this. */
void ops_use_stream(int k);

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

/* ops_sync waits for every stream (the host is about to read results), after draining the launch queue; a
 * failure names the last kernel launched on the stream that failed. With --sync op every launch also drains
 * and waits for its own stream. */
void ops_sync(void);
/* Asynchronous copies of a contiguous tensor on the current stream, from or into pinned host memory; the
 * host reads a d2h result only after ops_sync. */
void ops_h2d_async(tensor dst, const float *host);
void ops_d2h_async(float *host, tensor src);

#endif
