/* pool.c: the caching allocator behind decoder-sim's storages. Blocks inside a chunk are split on
 * allocation (best fit over all free blocks, lowest address on ties, so runs are deterministic) and
 * coalesced with free neighbours when returned. A mutex guards it because the swap agent may call
 * release/restore from its own thread.
 *
 * One block logic, two sources of chunks. With --alloc malloc every chunk is an aclrtMalloc kept until
 * exit. With --alloc vmm (MindSpore's pool on 910B) there is a single chunk, the segment at the start of one
 * aclrtReserveMemAddress range: it grows at its end by 2 MiB physical chunks (aclrtMallocPhysical +
 * aclrtMapMem at the next offset; the tail free block grows, or a new free block is added), so a block larger
 * than 2 MiB lies on several adjacent physical chunks, and pool_empty_cache shrinks it from the end
 * (aclrtUnmapMem + aclrtFreePhysical of the chunks inside the tail free block).
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
#include <string.h>

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
static size_t in_use, peak, reserved, reserved_peak;
static int next_storage_id;
/* Why the pool could not grow, for the caller's report. */
static const char *last_fail_call = "aclrtMalloc";
static aclError last_fail_code;

static enum pool_mode mode = POOL_MALLOC;
/* VMM: the reservation, the segment (the only chunk) and one physical handle per mapped chunk. */
static struct {
  uintptr_t base;
  size_t size;
  pool_chunk *seg;
  aclrtDrvMemHandle *handles; /* [size / chunk_size] */
  size_t mapped;              /* chunks mapped, from the start of the reservation */
  aclrtPhysicalMemProp prop;
} vmm;

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL) {
    fprintf(stderr, "decoder-sim: out of host memory\n");
    exit(1);
  }
  return p;
}

void pool_init(enum pool_mode m, size_t vmm_reserve) {
  mode = m;
  if (mode != POOL_VMM) return;
  /* Device memory, huge pages, on device 0 (the one decoder-sim set). */
  memset(&vmm.prop, 0, sizeof vmm.prop);
  vmm.prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
  vmm.prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
  vmm.prop.memAttr = ACL_HBM_MEM_HUGE;
  vmm.prop.location.id = 0;
  vmm.prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  size_t gran = 0;
  aclError rc = RT(aclrtMemGetAllocationGranularity)(&vmm.prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &gran);
  if (rc != ACL_SUCCESS) rt_fail("aclrtMemGetAllocationGranularity", NULL, rc);
  /* 2 MiB chunks, as MindSpore maps them (a multiple of the granularity should it be larger). */
  if (gran > 0 && chunk_size % gran != 0) chunk_size = (chunk_size + gran - 1) / gran * gran;
  vmm.size = (vmm_reserve + chunk_size - 1) / chunk_size * chunk_size;
  if (vmm.size == 0) vmm.size = chunk_size;
  void *p = NULL;
  rc = RT(aclrtReserveMemAddress)(&p, vmm.size, 0, NULL, 0);
  if (rc != ACL_SUCCESS || p == NULL) rt_fail("aclrtReserveMemAddress", NULL, rc != ACL_SUCCESS ? rc : ACL_ERROR_BAD_ALLOC);
  vmm.base = (uintptr_t)p;
  vmm.handles = xcalloc(vmm.size / chunk_size, sizeof *vmm.handles);
  vmm.seg = xcalloc(1, sizeof *vmm.seg);
  vmm.seg->base = vmm.base;
  chunks = vmm.seg;
}

enum pool_mode pool_mode(void) { return mode; }

static pool_block *block_new(uintptr_t addr, size_t size, int free) {
  pool_block *b = xcalloc(1, sizeof *b);
  b->addr = addr;
  b->size = size;
  b->free = free;
  return b;
}

/* last_block returns the block at the end of chunk c (NULL when it has none). */
static pool_block *last_block(pool_chunk *c) {
  pool_block *b = c->first;
  while (b != NULL && b->next != NULL) b = b->next;
  return b;
}

/* grow_malloc adds a chunk of at least n bytes from aclrtMalloc and returns its one free block, or NULL.
 * Caller holds pool_mu. */
static pool_block *grow_malloc(size_t n) {
  size_t csize = n > chunk_size ? n : chunk_size;
  void *p = NULL;
  aclError rc = RT(aclrtMalloc)(&p, csize, ACL_MEM_MALLOC_HUGE_FIRST);
  if (rc != ACL_SUCCESS || p == NULL) {
    last_fail_call = "aclrtMalloc";
    last_fail_code = rc != ACL_SUCCESS ? rc : ACL_ERROR_RT_MEMORY_ALLOCATION;
    return NULL;
  }
  pool_chunk *c = xcalloc(1, sizeof *c);
  c->base = (uintptr_t)p;
  c->size = csize;
  c->first = block_new(c->base, csize, 1);
  /* Keep chunks in allocation order so best-fit ties resolve the same way every run. */
  pool_chunk **tail = &chunks;
  while (*tail != NULL) tail = &(*tail)->next;
  *tail = c;
  reserved += csize;
  return c->first;
}

/* grow_vmm maps chunks at the end of the segment until its tail free block holds n bytes and returns that
 * block, or NULL (what was mapped stays in the segment). Caller holds pool_mu. */
static pool_block *grow_vmm(size_t n) {
  pool_chunk *seg = vmm.seg;
  pool_block *tail = last_block(seg);
  size_t have = tail != NULL && tail->free ? tail->size : 0;
  size_t need = (n - have + chunk_size - 1) / chunk_size;
  if ((vmm.mapped + need) * chunk_size > vmm.size) {
    last_fail_call = "vmm pool growth (the reservation is full: see --vmm-reserve)";
    last_fail_code = ACL_ERROR_RT_MEMORY_ALLOCATION;
    return NULL;
  }
  size_t added = 0;
  aclError rc = ACL_SUCCESS;
  for (size_t k = 0; k < need; k++) {
    aclrtDrvMemHandle h = NULL;
    rc = RT(aclrtMallocPhysical)(&h, chunk_size, &vmm.prop, 0);
    if (rc != ACL_SUCCESS) {
      last_fail_call = "aclrtMallocPhysical";
      break;
    }
    rc = RT(aclrtMapMem)((void *)(vmm.base + vmm.mapped * chunk_size), chunk_size, 0, h, 0);
    if (rc != ACL_SUCCESS) {
      last_fail_call = "aclrtMapMem";
      (void)RT(aclrtFreePhysical)(h);
      break;
    }
    vmm.handles[vmm.mapped++] = h;
    added += chunk_size;
  }
  if (added > 0) {
    if (tail != NULL && tail->free) {
      tail->size += added;
    } else {
      pool_block *b = block_new(seg->base + seg->size, added, 1);
      b->prev = tail;
      if (tail != NULL) tail->next = b;
      else seg->first = b;
      tail = b;
    }
    seg->size += added;
    reserved += added;
    if (reserved > reserved_peak) reserved_peak = reserved;
  }
  if (rc != ACL_SUCCESS) {
    last_fail_code = rc;
    return NULL;
  }
  return tail;
}

/* pool_alloc returns a block of at least n bytes, or NULL when the pool cannot grow (last_fail_call and
 * last_fail_code say why). Caller holds pool_mu. */
static pool_block *pool_alloc(size_t n) {
  n = (n + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  pool_block *best = NULL;
  for (pool_chunk *c = chunks; c != NULL; c = c->next)
    for (pool_block *b = c->first; b != NULL; b = b->next)
      if (b->free && b->size >= n && (best == NULL || b->size < best->size)) best = b;
  if (best == NULL) {
    best = mode == POOL_VMM ? grow_vmm(n) : grow_malloc(n);
    if (best == NULL) return NULL;
    if (reserved > reserved_peak) reserved_peak = reserved;
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

/* unmap_from unmaps and frees the physical chunks from index k to the end of the mapping. Caller holds
 * pool_mu; returns the first failure's call (NULL on success) and its code in *rc. */
static const char *unmap_from(size_t k, aclError *rc) {
  while (vmm.mapped > k) {
    size_t i = vmm.mapped - 1;
    *rc = RT(aclrtUnmapMem)((void *)(vmm.base + i * chunk_size));
    if (*rc != ACL_SUCCESS) return "aclrtUnmapMem";
    *rc = RT(aclrtFreePhysical)(vmm.handles[i]);
    if (*rc != ACL_SUCCESS) return "aclrtFreePhysical";
    vmm.handles[i] = NULL;
    vmm.mapped = i;
    reserved -= chunk_size;
  }
  return NULL;
}

void pool_empty_cache(void) {
  if (mode != POOL_VMM) return;
  pthread_mutex_lock(&pool_mu);
  pool_chunk *seg = vmm.seg;
  pool_block *tail = last_block(seg);
  const char *failed = NULL;
  aclError rc = ACL_SUCCESS;
  if (tail != NULL && tail->free) {
    /* Keep the chunk the tail block starts in when a used block shares it. */
    size_t keep = (tail->addr - seg->base + chunk_size - 1) / chunk_size;
    if (keep < vmm.mapped) {
      failed = unmap_from(keep, &rc);
      seg->size = vmm.mapped * chunk_size;
      if (seg->base + seg->size > tail->addr) {
        tail->size = seg->base + seg->size - tail->addr;
      } else {
        if (tail->prev != NULL) tail->prev->next = NULL;
        else seg->first = NULL;
        free(tail);
      }
    }
  }
  pthread_mutex_unlock(&pool_mu);
  if (failed != NULL) rt_fail(failed, NULL, rc);
}

static void free_blocks(pool_chunk *c) {
  for (pool_block *b = c->first; b != NULL;) {
    pool_block *n = b->next;
    free(b);
    b = n;
  }
}

void pool_release_all(void) {
  pthread_mutex_lock(&pool_mu);
  if (mode == POOL_VMM) {
    aclError rc = ACL_SUCCESS;
    const char *failed = vmm.seg != NULL ? unmap_from(0, &rc) : NULL;
    if (failed == NULL && vmm.base != 0) {
      rc = RT(aclrtReleaseMemAddress)((void *)vmm.base);
      if (rc != ACL_SUCCESS) failed = "aclrtReleaseMemAddress";
    }
    if (vmm.seg != NULL) {
      free_blocks(vmm.seg);
      free(vmm.seg);
    }
    free(vmm.handles);
    memset(&vmm, 0, sizeof vmm);
    chunks = NULL;
    reserved = 0;
    pthread_mutex_unlock(&pool_mu);
    if (failed != NULL) rt_fail(failed, NULL, rc);
    return;
  }
  while (chunks != NULL) {
    pool_chunk *c = chunks;
    chunks = c->next;
    aclError rc = RT(aclrtFree)((void *)c->base);
    free_blocks(c);
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
size_t pool_device_peak_bytes(void) { return reserved_peak; }
size_t pool_vmm_reserve_bytes(void) { return vmm.size; }

storage *storage_new(size_t nbytes) {
  storage *s = xcalloc(1, sizeof *s);
  s->refs = 1;
  s->capacity = nbytes;
  pthread_mutex_lock(&pool_mu);
  s->id = next_storage_id++;
  s->block = pool_alloc(nbytes);
  if (s->block == NULL) {
    pthread_mutex_unlock(&pool_mu);
    rt_fail(last_fail_call, NULL, last_fail_code);
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
