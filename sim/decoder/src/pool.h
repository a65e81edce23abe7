/* pool.h: decoder-sim's framework-like device memory: a caching allocator that grows with aclrtMalloc in
 * chunks and hands out best-fit blocks, and refcounted storages carved from it. A storage can be released
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

void pool_init(size_t chunk_bytes);
/* pool_release_all returns every chunk to the runtime with aclrtFree (at exit). */
void pool_release_all(void);
size_t pool_peak_bytes(void);
size_t pool_reserved_bytes(void);

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
