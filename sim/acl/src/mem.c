/* mem.c: emulated device memory and pinned host memory.
 * Device memory is one reserved address range (mmap PROT_NONE, MAP_NORESERVE) apart from the heap;
 * an allocation makes its pages read-write, a free drops the pages and makes them PROT_NONE again and
 * parks the range in a FIFO quarantine, so a later access through a stale pointer is caught by the
 * kernel range check (and by the MMU if anything touched it directly) instead of silently reading a new
 * owner's data. Capacity is counted in the documented rounded sizes; address space is page-granular.
 * VMM reservations (vmm.c) take their ranges from the same address space, and physical VMM memory counts
 * against the same capacity. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "aclsim.h"

struct span {
  uintptr_t base;
  size_t len;
};

struct alloc {
  uintptr_t base;
  size_t size; /* the documented rounded size: what capacity counts and kernels may touch */
  size_t span; /* page-rounded address space it occupies */
};

static struct {
  pthread_rwlock_t map;
  pthread_mutex_t mu;
  bool ready;
  uintptr_t lo, hi;
  size_t page, capacity, used, qlimit, qbytes;
  struct sim_vec live;   /* struct alloc, sorted by base */
  struct sim_vec freel;  /* struct span, sorted by base, coalesced */
  struct sim_vec quar;   /* struct span, FIFO (oldest first) */
  struct sim_vec pinned; /* struct alloc, sorted by base */
} M = {.map = PTHREAD_RWLOCK_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER};

int sim_mem_init(size_t capacity, size_t quarantine) {
  M.page = (size_t)sysconf(_SC_PAGESIZE);
  /* Room for the live bytes, a quarantine as large, and page rounding of many small allocations. */
  size_t want = capacity * 4 + 16 * SIM_GIB;
  void *p = MAP_FAILED;
  while (want >= capacity * 2 && want > 0) {
    p = mmap(NULL, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) break;
    want /= 2;
  }
  if (p == MAP_FAILED) return -1;
  pthread_mutex_lock(&M.mu);
  M.lo = (uintptr_t)p;
  M.hi = M.lo + want;
  M.capacity = capacity;
  M.used = 0;
  M.qlimit = quarantine;
  M.qbytes = 0;
  M.live.n = M.freel.n = M.quar.n = M.pinned.n = 0;
  struct span all = {M.lo, want};
  sim_vec_insert(&M.freel, sizeof all, 0, &all);
  M.ready = true;
  pthread_mutex_unlock(&M.mu);
  return 0;
}

void sim_mem_fini(void) {
  pthread_rwlock_wrlock(&M.map);
  pthread_mutex_lock(&M.mu);
  if (M.ready) munmap((void *)M.lo, M.hi - M.lo);
  struct alloc *pa = M.pinned.p;
  for (size_t i = 0; i < M.pinned.n; i++) munmap((void *)pa[i].base, pa[i].span);
  sim_vec_free(&M.live);
  sim_vec_free(&M.freel);
  sim_vec_free(&M.quar);
  sim_vec_free(&M.pinned);
  M.ready = false;
  M.lo = M.hi = 0;
  M.used = M.qbytes = 0;
  pthread_mutex_unlock(&M.mu);
  pthread_rwlock_unlock(&M.map);
}

void sim_mem_rdlock(void) { pthread_rwlock_rdlock(&M.map); }
void sim_mem_wrlock(void) { pthread_rwlock_wrlock(&M.map); }
void sim_mem_unlock(void) { pthread_rwlock_unlock(&M.map); }

bool sim_in_arena(const void *p) {
  uintptr_t a = (uintptr_t)p;
  return M.ready && a >= M.lo && a < M.hi;
}

/* free_insert returns a span to the free list, merging with its neighbours. Caller holds M.mu. */
static void free_insert(struct span s) {
  struct span *f = M.freel.p;
  size_t i = sim_vec_upper(&M.freel, sizeof s, s.base);
  if (i > 0 && f[i - 1].base + f[i - 1].len == s.base) {
    f[i - 1].len += s.len;
    if (i < M.freel.n && s.base + s.len == f[i].base) {
      f[i - 1].len += f[i].len;
      sim_vec_remove(&M.freel, sizeof s, i);
    }
    return;
  }
  if (i < M.freel.n && s.base + s.len == f[i].base) {
    f[i].base = s.base;
    f[i].len += s.len;
    return;
  }
  if (!sim_vec_insert(&M.freel, sizeof s, i, &s)) {
    /* Out of host memory for bookkeeping: the span is lost to reuse, which is safe. */
  }
}

/* quarantine_release moves the oldest quarantined spans back to the free list until at most keep bytes
 * stay quarantined. Caller holds M.mu. */
static void quarantine_release(size_t keep) {
  struct span *q = M.quar.p;
  size_t n = 0;
  while (n < M.quar.n && M.qbytes > keep) {
    M.qbytes -= q[n].len;
    free_insert(q[n]);
    n++;
  }
  if (n) {
    memmove(q, q + n, (M.quar.n - n) * sizeof *q);
    M.quar.n -= n;
  }
}

/* take_span takes len bytes of address space aligned to align (a power of two, at least a page), at
 * exactly `at` when it is not 0; the rest of the free span it comes from stays free. Caller holds M.mu. */
static bool take_span(size_t len, size_t align, uintptr_t at, uintptr_t *out) {
  struct span *f = M.freel.p;
  for (size_t i = 0; i < M.freel.n; i++) {
    uintptr_t base = at ? at : (f[i].base + align - 1) & ~(uintptr_t)(align - 1);
    uintptr_t end = f[i].base + f[i].len;
    if (base < f[i].base || base > end || end - base < len) continue;
    struct span tail = {base + len, end - (base + len)};
    f[i].len = base - f[i].base;
    if (f[i].len == 0) sim_vec_remove(&M.freel, sizeof *f, i);
    if (tail.len) free_insert(tail);
    *out = base;
    return true;
  }
  return false;
}

/* charge counts n more bytes of device memory in use, unless that would exceed the capacity. Caller holds
 * M.mu. */
static bool charge(size_t n) {
  if (!M.ready || n > M.capacity - M.used) return false;
  M.used += n;
  return true;
}

/* va_take is take_span, reusing quarantined ranges early when address space ran out before capacity
 * did. Caller holds M.mu. */
static bool va_take(size_t len, size_t align, uintptr_t at, uintptr_t *out) {
  if (take_span(len, align, at, out)) return true;
  quarantine_release(0);
  return take_span(len, align, at, out);
}

aclError sim_dev_malloc(void **p, size_t size, bool align32_only) {
  if (size > (1ull << 50)) return ACL_ERROR_RT_MEMORY_ALLOCATION;
  size_t rounded = (size + 31) & ~(size_t)31;
  if (!align32_only) rounded += 32;
  size_t span = (rounded + M.page - 1) & ~(M.page - 1);
  pthread_mutex_lock(&M.mu);
  uintptr_t base;
  if (!charge(rounded)) {
    pthread_mutex_unlock(&M.mu);
    return ACL_ERROR_RT_MEMORY_ALLOCATION;
  }
  if (!va_take(span, M.page, 0, &base)) {
    M.used -= rounded;
    pthread_mutex_unlock(&M.mu);
    return ACL_ERROR_RT_MEMORY_ALLOCATION;
  }
  struct alloc a = {base, rounded, span};
  if (mprotect((void *)base, span, PROT_READ | PROT_WRITE) != 0 ||
      !sim_vec_insert(&M.live, sizeof a, sim_vec_upper(&M.live, sizeof a, base), &a)) {
    mprotect((void *)base, span, PROT_NONE);
    free_insert((struct span){base, span});
    M.used -= rounded;
    pthread_mutex_unlock(&M.mu);
    return ACL_ERROR_RT_MEMORY_ALLOCATION;
  }
  pthread_mutex_unlock(&M.mu);
  *p = (void *)base;
  return ACL_SUCCESS;
}

/* park puts a span that is PROT_NONE again in the quarantine (or back in the free list when there is
 * none). Caller holds M.mu. */
static void park(struct span s) {
  if (M.qlimit > 0 && sim_vec_insert(&M.quar, sizeof s, M.quar.n, &s)) {
    M.qbytes += s.len;
    quarantine_release(M.qlimit);
  } else {
    free_insert(s);
  }
}

aclError sim_dev_free(void *p) {
  uintptr_t a = (uintptr_t)p;
  /* Exclusive: no task is touching memory while the pages lose their protection. */
  pthread_rwlock_wrlock(&M.map);
  pthread_mutex_lock(&M.mu);
  struct alloc *l = M.live.p;
  size_t i = sim_vec_upper(&M.live, sizeof *l, a);
  if (i == 0 || l[i - 1].base != a) {
    pthread_mutex_unlock(&M.mu);
    pthread_rwlock_unlock(&M.map);
    return ACL_ERROR_RT_MEMORY_FREE;
  }
  struct alloc gone = l[i - 1];
  sim_hz_free("aclrtFree", gone.base, gone.size);
  sim_vec_remove(&M.live, sizeof gone, i - 1);
  M.used -= gone.size;
  madvise((void *)gone.base, gone.span, MADV_DONTNEED);
  mprotect((void *)gone.base, gone.span, PROT_NONE);
  park((struct span){gone.base, gone.span});
  pthread_mutex_unlock(&M.mu);
  pthread_rwlock_unlock(&M.map);
  return ACL_SUCCESS;
}

/* holder: the allocation in v (sorted by base) that holds [addr, addr+len), or NULL. Caller holds M.mu. */
static const struct alloc *holder(const struct sim_vec *v, uintptr_t addr, size_t len) {
  const struct alloc *l = v->p;
  size_t i = sim_vec_upper(v, sizeof *l, addr);
  if (i == 0) return NULL;
  const struct alloc *a = &l[i - 1];
  return addr >= a->base && len <= a->size && addr - a->base <= a->size - len ? a : NULL;
}

uintptr_t sim_alloc_base(uintptr_t addr, size_t len, bool pinned) {
  pthread_mutex_lock(&M.mu);
  const struct alloc *a = holder(pinned ? &M.pinned : &M.live, addr, len);
  uintptr_t base = a ? a->base : 0;
  pthread_mutex_unlock(&M.mu);
  /* not under M.mu: the VMM code takes its lock first, then M.mu */
  return base || pinned ? base : sim_vmm_base(addr, len);
}

bool sim_dev_range_ok(uintptr_t addr, size_t len) { return sim_alloc_base(addr, len, false) != 0; }

bool sim_va_reserve(size_t len, size_t align, uintptr_t at, uintptr_t *out) {
  pthread_mutex_lock(&M.mu);
  bool ok = M.ready && va_take(len, align, at, out);
  pthread_mutex_unlock(&M.mu);
  return ok;
}

void sim_va_release(uintptr_t base, size_t len) {
  pthread_mutex_lock(&M.mu);
  park((struct span){base, len});
  pthread_mutex_unlock(&M.mu);
}

bool sim_mem_charge(size_t n) {
  pthread_mutex_lock(&M.mu);
  bool ok = charge(n);
  pthread_mutex_unlock(&M.mu);
  return ok;
}

void sim_mem_uncharge(size_t n) {
  pthread_mutex_lock(&M.mu);
  M.used -= n;
  pthread_mutex_unlock(&M.mu);
}

void sim_mem_info(size_t *free_bytes, size_t *total) {
  pthread_mutex_lock(&M.mu);
  *free_bytes = M.capacity - M.used;
  *total = M.capacity;
  pthread_mutex_unlock(&M.mu);
}

aclError sim_host_malloc(void **p, size_t size) {
  size_t span = (size + M.page - 1) & ~(M.page - 1);
  void *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return ACL_ERROR_RT_MEMORY_ALLOCATION;
  struct alloc a = {(uintptr_t)m, size, span};
  pthread_mutex_lock(&M.mu);
  bool ok = sim_vec_insert(&M.pinned, sizeof a, sim_vec_upper(&M.pinned, sizeof a, a.base), &a);
  pthread_mutex_unlock(&M.mu);
  if (!ok) {
    munmap(m, span);
    return ACL_ERROR_RT_MEMORY_ALLOCATION;
  }
  *p = m;
  return ACL_SUCCESS;
}

aclError sim_host_free(void *p) {
  uintptr_t a = (uintptr_t)p;
  pthread_rwlock_wrlock(&M.map);
  pthread_mutex_lock(&M.mu);
  struct alloc *l = M.pinned.p;
  size_t i = sim_vec_upper(&M.pinned, sizeof *l, a);
  aclError rc = ACL_ERROR_RT_MEMORY_FREE;
  if (i > 0 && l[i - 1].base == a) {
    sim_hz_free("aclrtFreeHost", a, l[i - 1].size);
    munmap((void *)a, l[i - 1].span);
    sim_vec_remove(&M.pinned, sizeof *l, i - 1);
    rc = ACL_SUCCESS;
  }
  pthread_mutex_unlock(&M.mu);
  pthread_rwlock_unlock(&M.map);
  return rc;
}

int sim_pinned_check(const void *p, size_t len) {
  uintptr_t a = (uintptr_t)p;
  pthread_mutex_lock(&M.mu);
  int r = 0;
  const struct alloc *l = M.pinned.p;
  size_t i = sim_vec_upper(&M.pinned, sizeof *l, a);
  if (i > 0 && a < l[i - 1].base + l[i - 1].span)
    r = (len <= l[i - 1].size && a - l[i - 1].base <= l[i - 1].size - len) ? 1 : -1;
  pthread_mutex_unlock(&M.mu);
  return r;
}

/* ---- public memory API ---- */
static aclError dev_malloc_api(const char *fn, void **devPtr, size_t size, aclrtMemMallocPolicy policy,
                               bool align32_only) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!devPtr) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", fn);
  if (size == 0) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: size 0 is invalid", fn);
  if ((int)policy < 0 || (int)policy > ACL_MEM_MALLOC_HUGE1G_ONLY_P2P)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: invalid policy %d", fn, (int)policy);
  rc = sim_dev_malloc(devPtr, size, align32_only);
  if (rc) {
    size_t fr, tot;
    sim_mem_info(&fr, &tot);
    return sim_fail(rc, "%s: out of device memory: requested %zu bytes, %zu of %zu free", fn, size, fr, tot);
  }
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
  return dev_malloc_api("aclrtMalloc", devPtr, size, policy, false);
}

ACL_FUNC_VISIBILITY aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
  return dev_malloc_api("aclrtMallocAlign32", devPtr, size, policy, true);
}

ACL_FUNC_VISIBILITY aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
  return dev_malloc_api("aclrtMallocCached", devPtr, size, policy, false);
}

ACL_FUNC_VISIBILITY aclError aclrtFree(void *devPtr) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!devPtr) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtFree: devPtr is NULL");
  rc = sim_dev_free(devPtr);
  if (rc) return sim_fail(rc, "aclrtFree: %p is not a live device allocation", devPtr);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtMallocHost(void **hostPtr, size_t size) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!hostPtr) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: hostPtr is NULL");
  if (size == 0) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: size 0 is invalid");
  rc = sim_host_malloc(hostPtr, size);
  if (rc) return sim_fail(rc, "aclrtMallocHost: cannot allocate %zu bytes of pinned memory", size);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtFreeHost(void *hostPtr) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!hostPtr) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtFreeHost: hostPtr is NULL");
  rc = sim_host_free(hostPtr);
  if (rc) return sim_fail(rc, "aclrtFreeHost: %p is not a live pinned allocation", hostPtr);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!free || !total) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: free or total is NULL");
  if ((int)attr < 0 || (int)attr > ACL_HBM_MEM_P2P_NORMAL)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: invalid attribute %d", (int)attr);
  sim_mem_info(free, total);
  return ACL_SUCCESS;
}
