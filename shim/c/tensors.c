/* tensors.c: which tensors a launch reads and writes, for the launch check. Frameworks make tensors
 * (aclCreateTensor), hand them to an op's GetWorkspaceSize, which returns an executor, and launch the
 * executor: inline on the same thread, or on a launch thread (MindSpore), possibly many times (a cached,
 * repeatable executor whose tensors get new addresses with aclSetTensorAddr, and no new tensors at all).
 * So a launch's tensors are the executor's when the executor is known, else those the launching thread
 * created since its previous launch. An executor becomes known when a known op's GetWorkspaceSize returns
 * it or when it is made repeatable, taking the tensors its thread created since then; aclSetTensorAddr
 * moves them, aclDestroyAclOpExecutor (or the launch of a one-shot executor) forgets them.
 *
 * Launches read the executor table without a lock: per-entry sequence locks, keys and fields as relaxed
 * atomics. Writers (GetWorkspaceSize, aclSetAclOpExecutorRepeatable, aclSetTensorAddr, destroy) are rarer
 * and serialize on a mutex; a one-shot executor is forgotten by its launch with a compare-and-swap. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>

#include "sa.h"

/* ---- The thread's tensors since its previous launch (or executor binding). The array uses the default
 * TLS model (it is large); the count is initial-exec so the launch path reads it without a call. ---- */
static __thread sa_tensor tls_tensors[SA_TENSORS];
static SA_TLS uint32_t tls_ntensors;

void sa_tensor_note(const aclTensor *t, const void *addr, uint64_t extent) {
  uint32_t i = tls_ntensors++;
  sa_tensor *s = &tls_tensors[i % SA_TENSORS];
  s->handle = (uint64_t)(uintptr_t)t;
  s->addr = (uint64_t)(uintptr_t)addr;
  s->extent = extent;
}

int sa_thread_tensors(sa_tensor *out, int max) {
  uint32_t n = tls_ntensors < SA_TENSORS ? tls_ntensors : SA_TENSORS;
  int k = 0;
  for (uint32_t i = tls_ntensors - n; i < tls_ntensors && k < max; i++) out[k++] = tls_tensors[i % SA_TENSORS];
  return k;
}

/* take_thread moves the thread's tensors (the last SA_TENSORS of them) into out. */
static uint32_t take_thread(sa_tensor *out) {
  uint32_t n = tls_ntensors < SA_TENSORS ? tls_ntensors : SA_TENSORS;
  for (uint32_t i = 0; i < n; i++) out[i] = tls_tensors[(tls_ntensors - n + i) % SA_TENSORS];
  tls_ntensors = 0;
  return n;
}

/* ---- The executor table: SA_EXEC_SETS sets of SA_EXEC_WAYS entries, by executor address. ---- */
#define SA_EXEC_SETS 1024
#define SA_EXEC_WAYS 4

typedef struct {
  _Atomic uint64_t handle, addr, extent;
} sa_atensor;

typedef struct {
  _Atomic uint64_t seq; /* odd while a writer changes the entry */
  _Atomic uint64_t key; /* the executor; 0 free */
  _Atomic uint32_t n;
  _Atomic uint32_t repeatable;
  uint64_t age; /* writers only: the set's least recently bound entry is replaced first */
  sa_atensor t[SA_TENSORS];
} sa_exec_entry;

static sa_exec_entry table[SA_EXEC_SETS][SA_EXEC_WAYS];
static pthread_mutex_t writer = PTHREAD_MUTEX_INITIALIZER;
static uint64_t clock_;

static inline sa_exec_entry *set_of(uint64_t ex) {
  uint64_t h = ex * 0x9E3779B97F4A7C15ull;
  return table[(h >> 40) % SA_EXEC_SETS];
}

static void write_begin(sa_exec_entry *e) {
  atomic_store_explicit(&e->seq, atomic_load_explicit(&e->seq, memory_order_relaxed) + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
}

static void write_end(sa_exec_entry *e) {
  atomic_store_explicit(&e->seq, atomic_load_explicit(&e->seq, memory_order_relaxed) + 1, memory_order_release);
}

/* find_locked returns ex's entry, or with make a free or reclaimed one bound to ex (writer held). */
static sa_exec_entry *find_locked(uint64_t ex, int make) {
  sa_exec_entry *set = set_of(ex), *victim = NULL;
  for (int w = 0; w < SA_EXEC_WAYS; w++) {
    sa_exec_entry *e = &set[w];
    uint64_t k = atomic_load_explicit(&e->key, memory_order_relaxed);
    if (k == ex) return e;
    if (!make) continue;
    if (k == 0) {
      if (victim == NULL || atomic_load_explicit(&victim->key, memory_order_relaxed) != 0) victim = e;
    } else if (victim == NULL || (atomic_load_explicit(&victim->key, memory_order_relaxed) != 0 &&
                                  e->age < victim->age)) {
      victim = e;
    }
  }
  return victim; /* an executor replaced to make room goes unchecked at its later launches */
}

/* bind gives ex the thread's tensors since its previous launch or binding; repeatable marks it. */
static void bind(uint64_t ex, int repeatable) {
  sa_tensor ts[SA_TENSORS];
  uint32_t n = take_thread(ts);
  pthread_mutex_lock(&writer);
  sa_exec_entry *e = find_locked(ex, 1);
  int known = atomic_load_explicit(&e->key, memory_order_relaxed) == ex;
  write_begin(e);
  atomic_store_explicit(&e->key, ex, memory_order_relaxed);
  if (!known || n > 0) { /* made repeatable after its GetWorkspaceSize bound it: keep those tensors */
    for (uint32_t i = 0; i < n; i++) {
      atomic_store_explicit(&e->t[i].handle, ts[i].handle, memory_order_relaxed);
      atomic_store_explicit(&e->t[i].addr, ts[i].addr, memory_order_relaxed);
      atomic_store_explicit(&e->t[i].extent, ts[i].extent, memory_order_relaxed);
    }
    atomic_store_explicit(&e->n, n, memory_order_relaxed);
  }
  if (!known) atomic_store_explicit(&e->repeatable, 0, memory_order_relaxed);
  if (repeatable) atomic_store_explicit(&e->repeatable, 1, memory_order_relaxed);
  e->age = ++clock_;
  write_end(e);
  pthread_mutex_unlock(&writer);
}

void sa_exec_bind(const aclOpExecutor *ex) {
  if (ex != NULL) bind((uint64_t)(uintptr_t)ex, 0);
}

void sa_exec_repeatable(const aclOpExecutor *ex) {
  if (ex != NULL) bind((uint64_t)(uintptr_t)ex, 1);
}

void sa_exec_set_addr(const aclOpExecutor *ex, const aclTensor *t, const void *addr) {
  uint64_t k = (uint64_t)(uintptr_t)ex, h = (uint64_t)(uintptr_t)t;
  pthread_mutex_lock(&writer);
  sa_exec_entry *e = find_locked(k, 0);
  if (e != NULL) {
    uint32_t n = atomic_load_explicit(&e->n, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++) {
      if (atomic_load_explicit(&e->t[i].handle, memory_order_relaxed) != h) continue;
      write_begin(e);
      atomic_store_explicit(&e->t[i].addr, (uint64_t)(uintptr_t)addr, memory_order_relaxed);
      write_end(e);
    }
  }
  pthread_mutex_unlock(&writer);
}

void sa_exec_forget(const aclOpExecutor *ex) {
  uint64_t k = (uint64_t)(uintptr_t)ex;
  pthread_mutex_lock(&writer);
  sa_exec_entry *e = find_locked(k, 0);
  if (e != NULL) {
    write_begin(e);
    atomic_store_explicit(&e->key, 0, memory_order_relaxed);
    write_end(e);
  }
  pthread_mutex_unlock(&writer);
}

/* read copies ex's entry; -1 when ex is not in the table. */
static int read_entry(uint64_t ex, sa_tensor *out, int *repeatable, sa_exec_entry **where) {
  sa_exec_entry *set = set_of(ex);
  for (int w = 0; w < SA_EXEC_WAYS; w++) {
    sa_exec_entry *e = &set[w];
    if (atomic_load_explicit(&e->key, memory_order_relaxed) != ex) continue;
    for (;;) {
      uint64_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
      if (s1 & 1) {
        sa_cpu_relax();
        continue;
      }
      uint32_t n = atomic_load_explicit(&e->n, memory_order_relaxed);
      if (n > SA_TENSORS) n = SA_TENSORS;
      for (uint32_t i = 0; i < n; i++) {
        out[i].handle = atomic_load_explicit(&e->t[i].handle, memory_order_relaxed);
        out[i].addr = atomic_load_explicit(&e->t[i].addr, memory_order_relaxed);
        out[i].extent = atomic_load_explicit(&e->t[i].extent, memory_order_relaxed);
      }
      *repeatable = (int)atomic_load_explicit(&e->repeatable, memory_order_relaxed);
      uint64_t key = atomic_load_explicit(&e->key, memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s1) continue;
      if (key != ex) break; /* replaced while we read: look at the other ways */
      *where = e;
      return (int)n;
    }
  }
  return -1;
}

uint32_t sa_launch_tensors(const aclOpExecutor *ex, sa_tensor *out) {
  uint64_t k = (uint64_t)(uintptr_t)ex;
  int repeatable = 0;
  sa_exec_entry *e = NULL;
  int n = k != 0 ? read_entry(k, out, &repeatable, &e) : -1;
  if (n < 0) return take_thread(out);
  tls_ntensors = 0; /* tensors made on this thread for another executor's launch stay unchecked */
  if (!repeatable) { /* a one-shot executor is consumed by its launch */
    uint64_t key = k;
    atomic_compare_exchange_strong_explicit(&e->key, &key, 0, memory_order_relaxed, memory_order_relaxed);
  }
  return (uint32_t)n;
}
