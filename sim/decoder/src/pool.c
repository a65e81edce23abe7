/* pool.c: the caching allocator behind decoder-sim's storages. Chunks come from aclrtMalloc and are kept
 * until exit; blocks inside a chunk are split on allocation (best fit over all free blocks, lowest address
 * on ties, so runs are deterministic) and coalesced with free neighbours when returned. A mutex guards it
 * because the swap agent may call release/restore from its own thread.
 *
 * A block goes back at free time, in host order, with no record of the streams that used it: still safe
 * with --streams 2 because decoder-sim changes stream only through ops_use_stream, which records an event
 * on the stream it leaves and makes the next one wait for it. Every task is then ordered after every task
 * enqueued before it, so the next user of a block (on either stream) runs after its last use, as on one
 * stream: e.g. a block freed mid-MLP is reused by later MLP work or, after the join, by main-stream work.
 * Per-block stream records (torch's record_stream) are needed only if both streams ran unordered work. */
#include "pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "rt.h"

#define POOL_ALIGN 512u

typedef struct pool_block {
  uintptr_t addr;
  size_t size;
  int free;
  struct pool_block *prev, *next; /* neighbours in address order within the chunk */
} pool_block;

typedef struct pool_chunk {
  uintptr_t base;
  size_t size;
  pool_block *first;
  struct pool_chunk *next;
} pool_chunk;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pool_chunk *chunks;
static size_t chunk_size = 2u << 20; /* small chunks keep the pool's peak close to what is in use */
static size_t in_use, peak, reserved;
static int next_storage_id;
static aclError last_malloc_error;

void pool_init(size_t chunk_bytes) {
  if (chunk_bytes > 0) chunk_size = chunk_bytes;
}

static pool_block *block_new(uintptr_t addr, size_t size, int free) {
  pool_block *b = calloc(1, sizeof *b);
  if (b == NULL) {
    fprintf(stderr, "decoder-sim: out of host memory\n");
    exit(1);
  }
  b->addr = addr;
  b->size = size;
  b->free = free;
  return b;
}

/* pool_alloc returns a block of at least n bytes, or NULL when aclrtMalloc fails (last_malloc_error says
 * why). Caller holds pool_mu. */
static pool_block *pool_alloc(size_t n) {
  n = (n + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  pool_block *best = NULL;
  for (pool_chunk *c = chunks; c != NULL; c = c->next)
    for (pool_block *b = c->first; b != NULL; b = b->next)
      if (b->free && b->size >= n && (best == NULL || b->size < best->size)) best = b;
  if (best == NULL) {
    size_t csize = n > chunk_size ? n : chunk_size;
    void *p = NULL;
    aclError rc = RT(aclrtMalloc)(&p, csize, ACL_MEM_MALLOC_HUGE_FIRST);
    if (rc != ACL_SUCCESS || p == NULL) {
      last_malloc_error = rc != ACL_SUCCESS ? rc : ACL_ERROR_RT_MEMORY_ALLOCATION;
      return NULL;
    }
    pool_chunk *c = calloc(1, sizeof *c);
    if (c == NULL) {
      fprintf(stderr, "decoder-sim: out of host memory\n");
      exit(1);
    }
    c->base = (uintptr_t)p;
    c->size = csize;
    c->first = block_new(c->base, csize, 1);
    /* Keep chunks in allocation order so best-fit ties resolve the same way every run. */
    pool_chunk **tail = &chunks;
    while (*tail != NULL) tail = &(*tail)->next;
    *tail = c;
    reserved += csize;
    best = c->first;
  }
  if (best->size - n >= POOL_ALIGN) {
    pool_block *rest = block_new(best->addr + n, best->size - n, 1);
    rest->prev = best;
    rest->next = best->next;
    if (best->next != NULL) best->next->prev = rest;
    best->next = rest;
    best->size = n;
  }
  best->free = 0;
  in_use += best->size;
  if (in_use > peak) peak = in_use;
  return best;
}

/* pool_free returns a block and merges it with free neighbours. Caller holds pool_mu. */
static void pool_free(pool_block *b) {
  in_use -= b->size;
  b->free = 1;
  pool_block *n = b->next;
  if (n != NULL && n->free) {
    b->size += n->size;
    b->next = n->next;
    if (n->next != NULL) n->next->prev = b;
    free(n);
  }
  pool_block *p = b->prev;
  if (p != NULL && p->free) {
    p->size += b->size;
    p->next = b->next;
    if (b->next != NULL) b->next->prev = p;
    free(b);
  }
}

void pool_release_all(void) {
  pthread_mutex_lock(&pool_mu);
  while (chunks != NULL) {
    pool_chunk *c = chunks;
    chunks = c->next;
    aclError rc = RT(aclrtFree)((void *)c->base);
    for (pool_block *b = c->first; b != NULL;) {
      pool_block *n = b->next;
      free(b);
      b = n;
    }
    free(c);
    if (rc != ACL_SUCCESS) {
      pthread_mutex_unlock(&pool_mu);
      rt_fail("aclrtFree", NULL, rc);
    }
  }
  reserved = 0;
  pthread_mutex_unlock(&pool_mu);
}

size_t pool_peak_bytes(void) { return peak; }
size_t pool_reserved_bytes(void) { return reserved; }

storage *storage_new(size_t nbytes) {
  storage *s = calloc(1, sizeof *s);
  if (s == NULL) {
    fprintf(stderr, "decoder-sim: out of host memory\n");
    exit(1);
  }
  s->refs = 1;
  s->capacity = nbytes;
  pthread_mutex_lock(&pool_mu);
  s->id = next_storage_id++;
  s->block = pool_alloc(nbytes);
  if (s->block == NULL) {
    pthread_mutex_unlock(&pool_mu);
    rt_fail("aclrtMalloc", NULL, last_malloc_error);
  }
  __atomic_store_n(&s->base, s->block->addr, __ATOMIC_RELEASE);
  s->nbytes = nbytes;
  pthread_mutex_unlock(&pool_mu);
  return s;
}

storage *storage_ref(storage *s) {
  pthread_mutex_lock(&pool_mu);
  s->refs++;
  pthread_mutex_unlock(&pool_mu);
  return s;
}

void storage_unref(storage *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&pool_mu);
  int last = --s->refs == 0;
  if (last && s->block != NULL) pool_free(s->block);
  pthread_mutex_unlock(&pool_mu);
  if (last) free(s);
}

int storage_resize(storage *s, size_t nbytes) {
  pthread_mutex_lock(&pool_mu);
  int rc = 0;
  if (nbytes == 0) {
    if (s->block != NULL) pool_free(s->block);
    s->block = NULL;
    s->nbytes = 0;
    __atomic_store_n(&s->base, 0, __ATOMIC_RELEASE);
  } else if (s->block == NULL || nbytes != s->nbytes) {
    /* Like resize_ on a storage: a new block; decoder-sim only ever restores a released storage. */
    if (s->block != NULL) pool_free(s->block);
    s->block = pool_alloc(nbytes);
    if (s->block == NULL) {
      s->nbytes = 0;
      __atomic_store_n(&s->base, 0, __ATOMIC_RELEASE);
      rc = -1;
    } else {
      s->nbytes = nbytes;
      if (nbytes > s->capacity) s->capacity = nbytes;
      __atomic_store_n(&s->base, s->block->addr, __ATOMIC_RELEASE);
    }
  }
  pthread_mutex_unlock(&pool_mu);
  return rc;
}

uintptr_t storage_base(const storage *s) { return __atomic_load_n(&s->base, __ATOMIC_ACQUIRE); }
