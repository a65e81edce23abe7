/* vmm.c: virtual memory management, as the VMM pools of MindSpore and torch_npu use it: reserve a range of
 * device address space, allocate physical memory in units of the granularity, map it into the range on
 * demand, unmap it on an eager free, remap cached physical memory elsewhere.
 * A reservation is a range of the device address space (mem.c), PROT_NONE like freed memory, so a kernel,
 * copy or host access to an unmapped part faults. Physical allocations are ranges of one memfd, counted
 * against the device capacity; mapping one places its pages at the virtual address (mmap MAP_SHARED |
 * MAP_FIXED), so its bytes survive an unmap and a map elsewhere; unmapping puts PROT_NONE pages back.
 * Lock order: the map lock (unmap), then V.mu, then mem.c's and the hazard checker's locks. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "aclsim.h"

#define GRANULARITY (2ull << 20)
/* Physical handles are ids, never dereferenced; they increase, so the sorted array appends. A base far
 * from small integers keeps a stray int from passing for a handle. */
#define PHYS_ID_BASE 0x5a5a00000000ull

struct resv {
  uintptr_t base;
  size_t size;
  size_t nmaps;
};

struct mapping {
  uintptr_t base;
  size_t size;
  uintptr_t resv; /* the reservation's base */
  uintptr_t phys; /* the physical allocation's id */
};

struct phys {
  uintptr_t id;
  off_t off; /* in the memfd */
  size_t size;
  uintptr_t mapped; /* where it is mapped, 0 when it is not */
};

static struct {
  pthread_mutex_t mu;
  int fd;          /* the memfd backing every physical allocation; -1 until the first */
  off_t next_off;  /* each allocation takes fresh offsets; a freed one's pages are punched out */
  uintptr_t next_id;
  struct sim_vec resv, maps, phys; /* sorted by base, base, id */
} V = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .next_id = PHYS_ID_BASE};

/* ---- lookups (caller holds V.mu) ---- */
/* find: the record of v whose key is exactly key, else NULL; *at is where it is or would go. */
static void *find(const struct sim_vec *v, size_t elem, uintptr_t key, size_t *at) {
  size_t i = sim_vec_upper(v, elem, key);
  char *rec = i ? (char *)v->p + (i - 1) * elem : NULL;
  if (rec && *(uintptr_t *)rec == key) {
    *at = i - 1;
    return rec;
  }
  *at = i;
  return NULL;
}

/* resv_holding: the reservation holding [a, a+len), else NULL. */
static struct resv *resv_holding(uintptr_t a, size_t len) {
  size_t i = sim_vec_upper(&V.resv, sizeof(struct resv), a);
  if (i == 0) return NULL;
  struct resv *r = (struct resv *)V.resv.p + i - 1;
  return len <= r->size && a - r->base <= r->size - len ? r : NULL;
}

static struct phys *phys_of(aclrtDrvMemHandle h) {
  size_t at;
  return find(&V.phys, sizeof(struct phys), (uintptr_t)h, &at);
}

uintptr_t sim_vmm_base(uintptr_t addr, size_t len) {
  pthread_mutex_lock(&V.mu);
  const struct mapping *m = V.maps.p;
  size_t i = sim_vec_upper(&V.maps, sizeof *m, addr);
  uintptr_t base = 0;
  if (i && addr - m[i - 1].base < m[i - 1].size) {
    i--;
    base = m[i].base;
    /* a range may go on into the next mapping when it follows on in the same reservation */
    for (size_t covered = m[i].base + m[i].size - addr; covered < len; covered += m[i].size) {
      if (i + 1 == V.maps.n || m[i + 1].base != m[i].base + m[i].size || m[i + 1].resv != m[i].resv) {
        base = 0;
        break;
      }
      i++;
    }
  }
  pthread_mutex_unlock(&V.mu);
  return base;
}

void sim_vmm_fini(void) {
  pthread_mutex_lock(&V.mu);
  if (V.fd >= 0) close(V.fd);
  V.fd = -1;
  V.next_off = 0;
  sim_vec_free(&V.resv);
  sim_vec_free(&V.maps);
  sim_vec_free(&V.phys);
  pthread_mutex_unlock(&V.mu);
}

/* ---- API ---- */
static aclError check_prop(const char *fn, const aclrtPhysicalMemProp *prop) {
  if (!prop) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: prop is NULL", fn);
  if (prop->location.type != ACL_MEM_LOCATION_TYPE_DEVICE || prop->location.id >= sim_cfg.device_count)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: prop's location (type %d, id %u) is not a device", fn,
                    (int)prop->location.type, prop->location.id);
  return ACL_SUCCESS;
}

static aclError check_size(const char *fn, size_t size) {
  if (size == 0 || size % GRANULARITY)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: size %zu is not a positive multiple of the granularity (2 MiB)",
                    fn, size);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
                                                              aclrtMemGranularityOptions option,
                                                              size_t *granularity) {
  const char *fn = "aclrtMemGetAllocationGranularity";
  aclError rc = sim_check();
  if (!rc) rc = check_prop(fn, prop);
  if (rc) return rc;
  if (!granularity) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: granularity is NULL", fn);
  if (option != ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM && option != ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: invalid option %d", fn, (int)option);
  *granularity = GRANULARITY;
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr,
                                                    uint64_t flags) {
  const char *fn = "aclrtReserveMemAddress";
  aclError rc = sim_check();
  if (rc) return rc;
  if (!virPtr) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", fn);
  if ((rc = check_size(fn, size))) return rc;
  if (alignment) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: alignment %zu (only 0 is supported)", fn, alignment);
  if (flags > 1)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: invalid flags %#llx (0 normal pages, 1 huge pages)", fn,
                    (unsigned long long)flags);
  /* CANN: a requested address is aligned to 1 GiB for sizes from 1 GiB, else to the granularity */
  uintptr_t at = (uintptr_t)expectPtr, align = size >= SIM_GIB ? SIM_GIB : GRANULARITY;
  if (at % align)
    return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: expectPtr %p is not aligned to %#lx", fn, expectPtr,
                    (unsigned long)align);
  uintptr_t base;
  if (!sim_va_reserve(size, GRANULARITY, at, &base))
    return at ? sim_fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: [%p,+%zu) is not free device address space", fn,
                         expectPtr, size)
              : sim_fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of device address space for %zu bytes", fn, size);
  struct resv r = {base, size, 0};
  pthread_mutex_lock(&V.mu);
  bool ok = sim_vec_insert(&V.resv, sizeof r, sim_vec_upper(&V.resv, sizeof r, base), &r);
  pthread_mutex_unlock(&V.mu);
  if (!ok) {
    sim_va_release(base, size);
    return sim_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  }
  *virPtr = (void *)base;
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtReleaseMemAddress(void *virPtr) {
  const char *fn = "aclrtReleaseMemAddress";
  aclError rc = sim_check();
  if (rc) return rc;
  if (!virPtr) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", fn);
  pthread_mutex_lock(&V.mu);
  size_t at;
  struct resv *r = find(&V.resv, sizeof *r, (uintptr_t)virPtr, &at);
  struct resv gone = r ? *r : (struct resv){0};
  if (r && !r->nmaps) sim_vec_remove(&V.resv, sizeof *r, at);
  pthread_mutex_unlock(&V.mu);
  if (!r) return sim_fail(ACL_ERROR_RT_MEMORY_FREE, "%s: %p is not a reservation", fn, virPtr);
  if (gone.nmaps)
    return sim_fail(ACL_ERROR_RT_MEMORY_FREE, "%s: the reservation at %p still has %zu mappings: unmap them first",
                    fn, virPtr, gone.nmaps);
  sim_va_release(gone.base, gone.size);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
                                                 const aclrtPhysicalMemProp *prop, uint64_t flags) {
  const char *fn = "aclrtMallocPhysical";
  aclError rc = sim_check();
  if (!rc) rc = check_prop(fn, prop);
  if (!rc) rc = check_size(fn, size);
  if (rc) return rc;
  if (!handle) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", fn);
  if (flags) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: flags %#llx (only 0)", fn, (unsigned long long)flags);
  if (!sim_mem_charge(size)) {
    size_t fr, tot;
    sim_mem_info(&fr, &tot);
    return sim_fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of device memory: requested %zu bytes, %zu of %zu free",
                    fn, size, fr, tot);
  }
  pthread_mutex_lock(&V.mu);
  if (V.fd < 0) V.fd = memfd_create("aclsim-device-memory", MFD_CLOEXEC);
  struct phys p = {V.next_id, V.next_off, size, 0};
  bool ok = V.fd >= 0 && ftruncate(V.fd, p.off + (off_t)size) == 0 && sim_vec_insert(&V.phys, sizeof p, V.phys.n, &p);
  if (ok) {
    V.next_id += 16;
    V.next_off += (off_t)size;
  }
  int err = errno;
  pthread_mutex_unlock(&V.mu);
  if (!ok) {
    sim_mem_uncharge(size);
    return sim_fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot back %zu bytes: %s", fn, size, strerror(err));
  }
  *handle = (aclrtDrvMemHandle)p.id;
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtFreePhysical(aclrtDrvMemHandle handle) {
  const char *fn = "aclrtFreePhysical";
  aclError rc = sim_check();
  if (rc) return rc;
  if (!handle) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", fn);
  pthread_mutex_lock(&V.mu);
  size_t at;
  struct phys *p = find(&V.phys, sizeof *p, (uintptr_t)handle, &at);
  struct phys gone = p ? *p : (struct phys){0};
  if (p && !p->mapped) {
    fallocate(V.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, p->off, (off_t)p->size); /* drop its pages */
    sim_vec_remove(&V.phys, sizeof *p, at);
  }
  pthread_mutex_unlock(&V.mu);
  if (!p) return sim_fail(ACL_ERROR_RT_MEMORY_FREE, "%s: %p is not a live physical allocation", fn, handle);
  if (gone.mapped)
    return sim_fail(ACL_ERROR_RT_MEMORY_FREE, "%s: %p is mapped at %#lx: unmap it first", fn, handle,
                    (unsigned long)gone.mapped);
  sim_mem_uncharge(gone.size);
  return ACL_SUCCESS;
}

/* map_locked does aclrtMapMem's checks that need the state, and the mapping. Caller holds V.mu. */
static aclError map_locked(const char *fn, uintptr_t a, size_t size, aclrtDrvMemHandle handle) {
  struct phys *p = phys_of(handle);
  if (!p) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a live physical allocation", fn, handle);
  if (size != p->size)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: size %zu is not the physical allocation's %zu", fn, size, p->size);
  if (p->mapped)
    return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is already mapped at %#lx", fn, handle,
                    (unsigned long)p->mapped);
  struct resv *r = resv_holding(a, size);
  if (!r) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: [%#lx,+%zu) is not inside one reservation", fn,
                          (unsigned long)a, size);
  const struct mapping *m = V.maps.p;
  size_t i = sim_vec_upper(&V.maps, sizeof *m, a);
  if ((i && m[i - 1].base + m[i - 1].size > a) || (i < V.maps.n && m[i].base < a + size))
    return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: [%#lx,+%zu) overlaps a mapping", fn, (unsigned long)a, size);
  if (mmap((void *)a, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, V.fd, p->off) == MAP_FAILED)
    return sim_fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: cannot map [%#lx,+%zu): %s", fn, (unsigned long)a, size,
                    strerror(errno));
  struct mapping add = {a, size, r->base, p->id};
  if (!sim_vec_insert(&V.maps, sizeof add, i, &add)) {
    mmap((void *)a, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return sim_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  }
  r->nmaps++;
  p->mapped = a;
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                                         uint64_t flags) {
  const char *fn = "aclrtMapMem";
  aclError rc = sim_check();
  if (rc) return rc;
  if (!virPtr || !handle) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr or handle is NULL", fn);
  if (offset || flags)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: offset %zu and flags %#llx must be 0", fn, offset,
                    (unsigned long long)flags);
  if ((uintptr_t)virPtr % GRANULARITY)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr %p is not aligned to the granularity (2 MiB)", fn, virPtr);
  pthread_mutex_lock(&V.mu);
  rc = map_locked(fn, (uintptr_t)virPtr, size, handle);
  pthread_mutex_unlock(&V.mu);
  return rc;
}

ACL_FUNC_VISIBILITY aclError aclrtUnmapMem(void *virPtr) {
  const char *fn = "aclrtUnmapMem";
  aclError rc = sim_check();
  if (rc) return rc;
  if (!virPtr) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", fn);
  uintptr_t a = (uintptr_t)virPtr;
  sim_mem_wrlock(); /* no task is touching memory while the pages lose their protection */
  pthread_mutex_lock(&V.mu);
  size_t at;
  struct mapping *m = find(&V.maps, sizeof *m, a, &at);
  if (!m) {
    rc = sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not the start of a mapping", fn, virPtr);
  } else if (mmap(virPtr, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
             MAP_FAILED) {
    rc = sim_fail(ACL_ERROR_INTERNAL_ERROR, "%s: cannot unmap [%p,+%zu): %s", fn, virPtr, m->size, strerror(errno));
  } else {
    sim_hz_free(fn, a, m->size);
    resv_holding(a, m->size)->nmaps--;
    phys_of((aclrtDrvMemHandle)m->phys)->mapped = 0;
    sim_vec_remove(&V.maps, sizeof *m, at);
  }
  pthread_mutex_unlock(&V.mu);
  sim_mem_unlock();
  return rc;
}
