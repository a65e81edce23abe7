/* aclrt.h: the C side of package aclrt: AscendCL reached through dlopen/dlsym (never linked), so one
 * swapagent binary can replay against whichever runtime it finds. Every helper returns the runtime's
 * code, or SA_RT_MISSING when the runtime lacks the symbol. Pointers cross as uintptr_t. */
#ifndef SWAPAGENT_REPLAY_ACLRT_H
#define SWAPAGENT_REPLAY_ACLRT_H
#include <stddef.h>
#include <stdint.h>

#define SA_RT_MISSING (-1)

/* Opens the runtime at path (libascendcl.so), then libnnopbase.so and libopapi.so from the same directory,
 * and resolves every symbol; 0 on success, else -1 with a message in err. A companion library that cannot
 * be opened is not an error: its calls are missing, and note says why. */
int sa_rt_open(const char *path, char *err, size_t errcap, char *note, size_t notecap);
const char *sa_rt_recent_err(void);

int sa_rt_init(void);
int sa_rt_finalize(void);
int sa_rt_set_device(int32_t dev);
int sa_rt_sync_device(void);
int sa_rt_malloc(int which, uint64_t size, int32_t policy, uintptr_t *out); /* which: 0 plain, 1 align32, 2 cached */
int sa_rt_free(uintptr_t p);
int sa_rt_malloc_host(uint64_t size, uintptr_t *out);
int sa_rt_free_host(uintptr_t p);
int sa_rt_memcpy(uintptr_t dst, uint64_t dmax, uintptr_t src, uint64_t count, int32_t kind);
int sa_rt_memcpy_async(uintptr_t dst, uint64_t dmax, uintptr_t src, uint64_t count, int32_t kind, uintptr_t stream);
int sa_rt_memset(uintptr_t p, uint64_t maxc, int32_t value, uint64_t count);
int sa_rt_memset_async(uintptr_t p, uint64_t maxc, int32_t value, uint64_t count, uintptr_t stream);
int sa_rt_sync_stream(uintptr_t stream);
int sa_rt_sync_stream_timeout(uintptr_t stream, int32_t ms);
int sa_rt_sync_event(uintptr_t ev);
int sa_rt_create_stream(uintptr_t *out);
int sa_rt_destroy_stream(uintptr_t stream);
int sa_rt_create_event(uintptr_t *out);
int sa_rt_destroy_event(uintptr_t ev);
int sa_rt_record_event(uintptr_t ev, uintptr_t stream);
int sa_rt_stream_wait_event(uintptr_t stream, uintptr_t ev);

/* A 1-D tensor of n elements at data + offset elements, over a storage of storage_elems elements. */
uintptr_t sa_rt_tensor_1d(uintptr_t data, int64_t n, int32_t dtype, int64_t offset, int64_t storage_elems);
int sa_rt_destroy_tensor(uintptr_t t);
/* op: 0 Mul(a, b, out), 1 Add(a, b, alpha=1, out), 2 InplaceCopy(a <- b). stage says which phase failed
 * (0 workspace query, 1 launch). */
int sa_rt_op(int op, uintptr_t a, uintptr_t b, uintptr_t out, uintptr_t stream, int *stage);
/* Scratch host memory (calloc/free) standing in for the recording's pageable host buffers. */
uintptr_t sa_rt_scratch(uint64_t n);
void sa_rt_scratch_free(uintptr_t p);
#endif
