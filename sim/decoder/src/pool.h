/* pool.h: decoder-sim's framework-like device memory: a caching allocator that grows in 2 MiB chunks (from
 * aclrtMalloc, or, like MindSpore's VMM pool, physical chunks mapped into one reserved address range) and
 * hands out best-fit blocks, and refcounted storages carved from it. A storage can be released
 * (resize to 0: its block returns to the pool and its base becomes 0) and restored (resize to n: a new
 * block, maybe at another address), exactly what the swap agent's storage ops do. */
#ifndef DECODER_POOL_H_
#define DECODER_POOL_H_

#include <stddef.h>
#include <stdint.h>

struct pool_block;

typedef struct storage {
  uintptr_t base;           /* device address; 0 while released */
  size_t nbytes;            /* current size; 0 while released */
  size_t capacity;          /* size it was created with: views keep describing this extent */
  struct pool_block *block; /* NULL while released */
  int refs;
  int id;                   /* creation order, for messages */
} storage;

/* Where the pool's chunks come from. MALLOC: each chunk is an aclrtMalloc (a request above 2 MiB gets its
 * own chunk), kept until exit. VMM: one aclrtReserveMemAddress of vmm_reserve bytes at pool_init; the pool is
 * one segment at its start, grown by mapping 2 MiB physical chunks (aclrtMallocPhysical + aclrtMapMem) at
 * its end, so a block may span several adjacent chunks; pool_empty_cache unmaps the free ones at the end. */
enum pool_mode { POOL_MALLOC, POOL_VMM };

/* pool_init picks the mode; with VMM it reserves vmm_reserve bytes (rounded up to the chunk size) and exits
 * 1 naming the call when the runtime refuses. */
void pool_init(enum pool_mode mode, size_t vmm_reserve);
enum pool_mode pool_mode(void);
/* pool_empty_cache is MindSpore's eager free: with VMM, the chunks at the end of the segment that no block
 * uses are unmapped and their physical memory freed (the address range stays reserved and is mapped again
 * when the pool grows). No-op with MALLOC. The caller guarantees that no queued or running device work uses
 * a free block (decoder-sim calls it right after a wait for every stream, with the launch queue drained). */
void pool_empty_cache(void);
/* pool_release_all returns everything to the runtime at exit: aclrtFree per chunk, or aclrtUnmapMem +
 * aclrtFreePhysical per mapped chunk and aclrtReleaseMemAddress of the reservation. */
void pool_release_all(void);
/* pool_peak_bytes: most bytes in blocks at once. pool_reserved_bytes: device bytes the pool holds now
 * (aclrtMalloc'd, or mapped); pool_device_peak_bytes: the most it ever held. pool_vmm_reserve_bytes: the
 * size of the VMM reservation (0 with MALLOC). */
size_t pool_peak_bytes(void);
size_t pool_reserved_bytes(void);
size_t pool_device_peak_bytes(void);
size_t pool_vmm_reserve_bytes(void);

/* storage_new allocates nbytes from the pool (exits on failure); refs = 1. */
storage *storage_new(size_t nbytes);
storage *storage_ref(storage *s);
/* storage_unref drops a reference; the last one returns the block and frees the object. */
void storage_unref(storage *s);
/* storage_resize: 0 releases the block (base becomes 0); n on a released storage takes a new block;
 * resizing to the current size is a no-op. Returns 0, or -1 when the pool cannot grow. Thread-safe. */
int storage_resize(storage *s, size_t nbytes);
uintptr_t storage_base(const storage *s);

#endif
