/* ops.c: launches aclnn kernels the two-phase way (GetWorkspaceSize, then launch on the current stream) on
 * tensors described with aclCreateTensor from the storages at that moment, switches between the compute
 * streams through events, and syncs per op, per layer or only where the host reads results. A failed sync
 * names the last kernel launched on that stream, as MindSpore's "SyncStream failed for op aclnnMul" does.
 *
 * Two framework behaviours of MindSpore 2.10, each behind a flag:
 * - the launch thread (--launch thread): every piece of stream work (kernel launch, async copy, stream
 *   switch) becomes a task; inline it runs at once on the main thread, else it is queued and the launch
 *   thread runs the tasks in FIFO order. Tensors and GetWorkspaceSize stay on the main thread; the launch's
 *   tensors and scalar are destroyed by the launch thread right after the launch. A block freed on the main
 *   thread may be handed out again while a task using it is still queued: still safe, because its next user
 *   is queued (so issued, and ordered on the streams) after it, exactly as inline.
 * - the executor cache (--executor-cache on, PyBoost's LRU): executors are made repeatable and kept with
 *   their aclTensor handles under a key of the op, every tensor's dtype, shape, strides, offset and storage
 *   size, and Add's alpha, never addresses. A hit makes no tensor and no GetWorkspaceSize: the task calls
 *   aclSetTensorAddr(executor, i, tensor_i, address) for every tensor just before the launch (on the thread
 *   that launches, so a second queued launch of the same executor cannot overwrite the first one's
 *   addresses). An eviction destroys the executor, its tensors and its scalar through the queue too, after
 *   every launch of it already queued. */
#include "ops.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static aclrtStream streams[OPS_MAX_STREAMS];
/* events[k] is recorded on stream k each time work leaves it; created once and re-recorded every layer
 * (a wait waits for the latest record enqueued before it). */
static aclrtEvent events[OPS_MAX_STREAMS];
static int n_streams = 1, cur = OPS_MAIN, events_off;
static enum ops_sync sync_mode;
/* Written by the thread that issues stream work, read by the main thread after a drain. */
static const char *last_op[OPS_MAX_STREAMS] = {"none", "none"};

typedef aclnnStatus (*launch_fn)(void *, uint64_t, aclOpExecutor *, aclrtStream);

/* ---- Tasks: the stream work, run inline or by the launch thread. ---- */
enum { OPS_MAX_TENSORS = 3 };

enum task_kind { TASK_KERNEL, TASK_COPY, TASK_SWITCH, TASK_DESTROY };

typedef struct task {
  enum task_kind kind;
  int stream; /* kernel, copy: where it runs; switch: the stream left */
  /* TASK_KERNEL */
  const char *op;
  int fn_index;
  launch_fn fn;
  void *ws;
  uint64_t ws_size;
  aclOpExecutor *exec;
  int n_set; /* cache hit: aclSetTensorAddr(exec, i, set[i], set_addr[i]) before the launch */
  aclTensor *set[OPS_MAX_TENSORS];
  void *set_addr[OPS_MAX_TENSORS];
  /* TASK_KERNEL (after the launch, cache off) and TASK_DESTROY (an evicted executor) */
  int n_destroy;
  aclTensor *destroy[OPS_MAX_TENSORS];
  aclScalar *scalar;
  aclOpExecutor *destroy_exec;
  /* TASK_COPY */
  void *dst;
  size_t dmax, count;
  const void *src;
  aclrtMemcpyKind copy_kind;
  /* TASK_SWITCH */
  int to;
} task;

/* A failed runtime call met while running a task: rt_fail(call, op, code). */
typedef struct task_error {
  const char *call, *op;
  long code;
} task_error;

static int task_failed(task_error *err, const char *call, const char *op, long code) {
  err->call = call;
  err->op = op;
  err->code = code;
  return -1;
}

static int destroy_handles(task *t, task_error *err) {
  for (int i = 0; i < t->n_destroy; i++) {
    aclnnStatus rc = RT(aclDestroyTensor)(t->destroy[i]);
    if (rc != ACL_SUCCESS) return task_failed(err, "aclDestroyTensor", NULL, rc);
  }
  if (t->scalar != NULL) {
    aclnnStatus rc = RT(aclDestroyScalar)(t->scalar);
    if (rc != ACL_SUCCESS) return task_failed(err, "aclDestroyScalar", NULL, rc);
  }
  return 0;
}

/* run_task issues one task; returns 0, or -1 with *err filled. */
static int run_task(task *t, task_error *err) {
  switch (t->kind) {
    case TASK_KERNEL: {
      for (int i = 0; i < t->n_set; i++) {
        aclnnStatus rc = RT(aclSetTensorAddr)(t->exec, (size_t)i, t->set[i], t->set_addr[i]);
        if (rc != ACL_SUCCESS) return task_failed(err, "aclSetTensorAddr", t->op, rc);
      }
      rt_count(t->fn_index);
      aclnnStatus rc = t->fn(t->ws, t->ws_size, t->exec, streams[t->stream]);
      last_op[t->stream] = t->op;
      if (rc != ACL_SUCCESS) return task_failed(err, t->op, NULL, rc);
      return destroy_handles(t, err);
    }
    case TASK_COPY: {
      aclError rc = RT(aclrtMemcpyAsync)(t->dst, t->dmax, t->src, t->count, t->copy_kind, streams[t->stream]);
      last_op[t->stream] = "aclrtMemcpyAsync";
      if (rc != ACL_SUCCESS) return task_failed(err, "aclrtMemcpyAsync", NULL, rc);
      return 0;
    }
    case TASK_SWITCH: {
      aclError rc = RT(aclrtRecordEvent)(events[t->stream], streams[t->stream]);
      if (rc != ACL_SUCCESS) return task_failed(err, "aclrtRecordEvent", NULL, rc);
      rc = RT(aclrtStreamWaitEvent)(streams[t->to], events[t->stream]);
      if (rc != ACL_SUCCESS) return task_failed(err, "aclrtStreamWaitEvent", NULL, rc);
      return 0;
    }
    case TASK_DESTROY: {
      aclnnStatus rc = RT(aclDestroyAclOpExecutor)(t->destroy_exec);
      if (rc != ACL_SUCCESS) return task_failed(err, "aclDestroyAclOpExecutor", NULL, rc);
      return destroy_handles(t, err);
    }
  }
  return 0;
}

/* ---- The launch thread and its queue. ---- */
enum { QUEUE_CAP = 1024 };

static struct {
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t work; /* a task was queued, or stop */
  pthread_cond_t done; /* a task finished */
  task ring[QUEUE_CAP];
  unsigned head, tail; /* pop at head, push at tail */
  int busy;            /* the launch thread is running a popped task */
  int stop;            /* exit once the queue is empty */
  int failed;          /* a task failed: the rest are dropped, the main thread reports err */
  task_error err;
} q = {.mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void *launch_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&q.mu);
  for (;;) {
    while (q.head == q.tail && !q.stop) pthread_cond_wait(&q.work, &q.mu);
    if (q.head == q.tail) break;
    task t = q.ring[q.head % QUEUE_CAP];
    int skip = q.failed;
    q.busy = 1;
    pthread_mutex_unlock(&q.mu);
    task_error err = {NULL, NULL, 0};
    int rc = skip ? 0 : run_task(&t, &err);
    pthread_mutex_lock(&q.mu);
    if (rc != 0 && !q.failed) {
      q.failed = 1;
      q.err = err;
    }
    q.head++;
    q.busy = 0;
    pthread_cond_broadcast(&q.done);
  }
  pthread_mutex_unlock(&q.mu);
  return NULL;
}

/* report_failure ends the run on the main thread with the launch thread's first failure. Caller holds no
 * lock. */
static void report_failure(void) {
  pthread_mutex_lock(&q.mu);
  int failed = q.failed;
  task_error err = q.err;
  pthread_mutex_unlock(&q.mu);
  if (failed) rt_fail(err.call, err.op, err.code);
}

/* quiesce (rt_fail's hook, main thread): let the launch thread drop what is queued and go idle, so no
 * runtime call is in flight while the process exits. */
static void quiesce(void) {
  pthread_mutex_lock(&q.mu);
  q.failed = 1;
  while (q.head != q.tail || q.busy) pthread_cond_wait(&q.done, &q.mu);
  pthread_mutex_unlock(&q.mu);
}

void ops_drain(void) {
  if (!q.started) return;
  pthread_mutex_lock(&q.mu);
  while (q.head != q.tail || q.busy) pthread_cond_wait(&q.done, &q.mu);
  pthread_mutex_unlock(&q.mu);
  report_failure();
}

/* dispatch runs t now (inline) or queues it for the launch thread. */
static void dispatch(const task *t) {
  if (!q.started) {
    task copy = *t;
    task_error err;
    if (run_task(&copy, &err) != 0) rt_fail(err.call, err.op, err.code);
    return;
  }
  pthread_mutex_lock(&q.mu);
  while (q.tail - q.head == QUEUE_CAP && !q.failed) pthread_cond_wait(&q.done, &q.mu);
  int failed = q.failed;
  if (!failed) {
    q.ring[q.tail % QUEUE_CAP] = *t;
    q.tail++;
    pthread_cond_signal(&q.work);
  }
  pthread_mutex_unlock(&q.mu);
  if (failed) report_failure();
}

/* ---- The executor cache: an LRU of repeatable executors. ---- */
enum { CACHE_BUCKETS = 4096 };

typedef struct cache_key {
  int64_t op, alpha_bits, nt;
  int64_t t[OPS_MAX_TENSORS][7]; /* dtype, rows, cols, row stride, column stride, offset, storage elements */
} cache_key;

typedef struct cache_entry {
  cache_key key;
  uint64_t hash;
  aclOpExecutor *exec;
  aclTensor *t[OPS_MAX_TENSORS];
  aclScalar *alpha;
  uint64_t ws_size;
  struct cache_entry *newer, *older, *bucket_next;
} cache_entry;

static struct {
  size_t cap, n;
  cache_entry *newest, *oldest;
  cache_entry *buckets[CACHE_BUCKETS];
  uint64_t hits, misses, evictions;
} cache;

static uint64_t key_hash(const cache_key *k) {
  const unsigned char *b = (const unsigned char *)k;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static void lru_unlink(cache_entry *e) {
  if (e->newer != NULL) e->newer->older = e->older;
  else cache.newest = e->older;
  if (e->older != NULL) e->older->newer = e->newer;
  else cache.oldest = e->newer;
  e->newer = e->older = NULL;
}

static void lru_push_newest(cache_entry *e) {
  e->older = cache.newest;
  e->newer = NULL;
  if (cache.newest != NULL) cache.newest->newer = e;
  cache.newest = e;
  if (cache.oldest == NULL) cache.oldest = e;
}

static cache_entry *cache_find(const cache_key *k, uint64_t h) {
  for (cache_entry *e = cache.buckets[h % CACHE_BUCKETS]; e != NULL; e = e->bucket_next)
    if (e->hash == h && memcmp(&e->key, k, sizeof *k) == 0) return e;
  return NULL;
}

static void bucket_remove(cache_entry *e) {
  cache_entry **p = &cache.buckets[e->hash % CACHE_BUCKETS];
  while (*p != e) p = &(*p)->bucket_next;
  *p = e->bucket_next;
}

/* cache_drop removes e and destroys its executor, tensors and scalar through the queue (after every launch
 * of it already queued). */
static void cache_drop(cache_entry *e) {
  lru_unlink(e);
  bucket_remove(e);
  cache.n--;
  task t;
  memset(&t, 0, sizeof t);
  t.kind = TASK_DESTROY;
  t.destroy_exec = e->exec;
  t.n_destroy = (int)e->key.nt;
  for (int i = 0; i < t.n_destroy; i++) t.destroy[i] = e->t[i];
  t.scalar = e->alpha;
  dispatch(&t);
  free(e);
}

/* ---- Streams, tensors and kernels. ---- */
void ops_init(int n, enum ops_sync mode, enum ops_launch launch, size_t cache_entries) {
  n_streams = n;
  sync_mode = mode;
  cache.cap = cache_entries;
  for (int k = 0; k < n; k++) rt_check(RT(aclrtCreateStream)(&streams[k]), "aclrtCreateStream", NULL);
  /* Test only: without the events the MLP stream races the main one; the hazard checker must see it. */
  const char *off = getenv("DECODER_SIM_TEST_NO_EVENTS");
  events_off = n > 1 && off != NULL && strcmp(off, "1") == 0;
  if (n > 1 && !events_off)
    for (int k = 0; k < n; k++) rt_check(RT(aclrtCreateEvent)(&events[k]), "aclrtCreateEvent", NULL);
  if (launch == OPS_LAUNCH_THREAD) {
    int rc = pthread_create(&q.thread, NULL, launch_thread, NULL);
    if (rc != 0) {
      fprintf(stderr, "decoder-sim: cannot start the launch thread: %s\n", strerror(rc));
      exit(1);
    }
    q.started = 1;
    rt_fail_hook = quiesce;
  }
}

void ops_fini(void) {
  ops_drain();
  if (q.started) {
    pthread_mutex_lock(&q.mu);
    q.stop = 1;
    pthread_cond_signal(&q.work);
    pthread_mutex_unlock(&q.mu);
    pthread_join(q.thread, NULL);
    q.started = 0;
    rt_fail_hook = NULL;
  }
  while (cache.oldest != NULL) cache_drop(cache.oldest); /* inline now */
  for (int k = 0; k < n_streams; k++) {
    if (events[k] != NULL) rt_check(RT(aclrtDestroyEvent)(events[k]), "aclrtDestroyEvent", NULL);
    rt_check(RT(aclrtDestroyStream)(streams[k]), "aclrtDestroyStream", NULL);
    events[k] = NULL;
    streams[k] = NULL;
  }
}

int ops_streams(void) { return n_streams; }
int ops_events_off(void) { return events_off; }
enum ops_sync ops_sync_mode(void) { return sync_mode; }

void ops_cache_summary(void) {
  if (cache.cap == 0) return;
  fprintf(stderr, "decoder-sim: executor cache: %llu hits, %llu misses, %llu evictions, capacity %zu\n",
          (unsigned long long)cache.hits, (unsigned long long)cache.misses, (unsigned long long)cache.evictions,
          cache.cap);
}

void ops_use_stream(int k) {
  if (n_streams == 1 || k == cur) return;
  if (!events_off) {
    task t;
    memset(&t, 0, sizeof t);
    t.kind = TASK_SWITCH;
    t.stream = cur;
    t.to = k;
    dispatch(&t);
  }
  cur = k;
}

tensor tensor_new(int64_t rows, int64_t cols) {
  storage *st = storage_new((size_t)(rows * cols) * sizeof(float));
  tensor t = {st, rows, cols, cols, 1, 0, storage_base(st)};
  return t;
}

void tensor_free(tensor *t) {
  storage_unref(t->st);
  t->st = NULL;
}

tensor tensor_t(tensor t) {
  tensor r = {t.st, t.cols, t.rows, t.cs, t.rs, t.offset, t.addr};
  return r;
}

size_t tensor_bytes(tensor t) { return (size_t)(t.rows * t.cols) * sizeof(float); }

/* The address a kernel gets for t: the one captured when it was made, else its storage's base now. */
static void *tensor_data(tensor t) { return (void *)(t.addr != 0 ? t.addr : storage_base(t.st)); }

static int64_t storage_elems(tensor t) { return (int64_t)(t.st->capacity / sizeof(float)); }

static aclTensor *describe(tensor t) {
  int64_t dims[2] = {t.rows, t.cols};
  int64_t strides[2] = {t.rs, t.cs};
  int64_t storage_dims[1] = {storage_elems(t)};
  aclTensor *a = RT(aclCreateTensor)(dims, 2, ACL_FLOAT, strides, t.offset, ACL_FORMAT_ND, storage_dims, 1,
                                     tensor_data(t));
  if (a == NULL) rt_fail("aclCreateTensor", NULL, ACL_ERROR_INVALID_PARAM);
  return a;
}

/* --sync op waits for the stream the kernel ran on, so a failure names that kernel. */
static void sync_stream(int k) {
  aclError rc = RT(aclrtSynchronizeStream)(streams[k]);
  if (rc != ACL_SUCCESS) rt_fail("aclrtSynchronizeStream", last_op[k], rc);
}

static void maybe_sync(void) {
  if (sync_mode == OPS_SYNC_OP) {
    ops_drain();
    sync_stream(cur);
  }
}

enum op_kind { OP_MUL, OP_ADD, OP_MATMUL, OP_COPY };

static const struct {
  const char *name, *ws_name;
  int fn_index;
} op_info[] = {
    [OP_MUL] = {"aclnnMul", "aclnnMulGetWorkspaceSize", RT_FN_aclnnMul},
    [OP_ADD] = {"aclnnAdd", "aclnnAddGetWorkspaceSize", RT_FN_aclnnAdd},
    [OP_MATMUL] = {"aclnnMatmul", "aclnnMatmulGetWorkspaceSize", RT_FN_aclnnMatmul},
    [OP_COPY] = {"aclnnInplaceCopy", "aclnnInplaceCopyGetWorkspaceSize", RT_FN_aclnnInplaceCopy},
};

static launch_fn op_launch_fn(enum op_kind op) {
  switch (op) {
    case OP_MUL: return rt_fns.aclnnMul;
    case OP_ADD: return rt_fns.aclnnAdd;
    case OP_MATMUL: return rt_fns.aclnnMatmul;
    case OP_COPY: return rt_fns.aclnnInplaceCopy;
  }
  return NULL;
}

/* prepare runs phase one on new tensors for ts (in the op's GetWorkspaceSize order): a[] gets the tensors,
 * *scalar Add's alpha (else NULL). */
static void prepare(enum op_kind op, const tensor *ts, int nt, float alpha, aclTensor **a, aclScalar **scalar,
                    uint64_t *ws, aclOpExecutor **exec) {
  for (int i = 0; i < nt; i++) a[i] = describe(ts[i]);
  *scalar = NULL;
  *ws = 0;
  *exec = NULL;
  aclnnStatus rc = ACL_SUCCESS;
  switch (op) {
    case OP_MUL: rc = RT(aclnnMulGetWorkspaceSize)(a[0], a[1], a[2], ws, exec); break;
    case OP_ADD:
      *scalar = RT(aclCreateScalar)(&alpha, ACL_FLOAT);
      if (*scalar == NULL) rt_fail("aclCreateScalar", NULL, ACL_ERROR_INVALID_PARAM);
      rc = RT(aclnnAddGetWorkspaceSize)(a[0], a[1], *scalar, a[2], ws, exec);
      break;
    case OP_MATMUL: rc = RT(aclnnMatmulGetWorkspaceSize)(a[0], a[1], a[2], 0, ws, exec); break;
    case OP_COPY: rc = RT(aclnnInplaceCopyGetWorkspaceSize)(a[0], a[1], ws, exec); break;
  }
  rt_check(rc, op_info[op].ws_name, NULL);
}

/* run_op launches op on ts (GetWorkspaceSize order: Mul/Add/Matmul self, other/mat2, out; InplaceCopy
 * selfRef, src) on the current stream, with a pool workspace when one is asked for. The workspace goes back
 * to the pool once the launch is issued or queued, which is safe because everything issued later is
 * ordered after it (on this stream, or through the event of ops_use_stream). */
static void run_op(enum op_kind op, const tensor *ts, int nt, float alpha) {
  task t;
  memset(&t, 0, sizeof t);
  t.kind = TASK_KERNEL;
  t.stream = cur;
  t.op = op_info[op].name;
  t.fn_index = op_info[op].fn_index;
  t.fn = op_launch_fn(op);
  uint64_t ws = 0;
  if (cache.cap > 0) {
    cache_key k;
    memset(&k, 0, sizeof k);
    k.op = op;
    k.nt = nt;
    if (op == OP_ADD) {
      uint32_t bits;
      memcpy(&bits, &alpha, sizeof bits);
      k.alpha_bits = bits;
    }
    for (int i = 0; i < nt; i++) {
      const tensor *x = &ts[i];
      int64_t d[7] = {ACL_FLOAT, x->rows, x->cols, x->rs, x->cs, x->offset, storage_elems(*x)};
      memcpy(k.t[i], d, sizeof d);
    }
    uint64_t h = key_hash(&k);
    cache_entry *e = cache_find(&k, h);
    if (e != NULL) {
      cache.hits++;
      lru_unlink(e);
      lru_push_newest(e);
      t.n_set = nt;
      for (int i = 0; i < nt; i++) {
        t.set[i] = e->t[i];
        t.set_addr[i] = tensor_data(ts[i]);
      }
    } else {
      cache.misses++;
      e = calloc(1, sizeof *e);
      if (e == NULL) {
        fprintf(stderr, "decoder-sim: out of host memory\n");
        exit(1);
      }
      e->key = k;
      e->hash = h;
      prepare(op, ts, nt, alpha, e->t, &e->alpha, &e->ws_size, &e->exec);
      rt_check(RT(aclSetAclOpExecutorRepeatable)(e->exec), "aclSetAclOpExecutorRepeatable", NULL);
      if (cache.n == cache.cap) {
        cache.evictions++;
        cache_drop(cache.oldest);
      }
      e->bucket_next = cache.buckets[h % CACHE_BUCKETS];
      cache.buckets[h % CACHE_BUCKETS] = e;
      lru_push_newest(e);
      cache.n++;
    }
    t.exec = e->exec;
    ws = e->ws_size;
  } else {
    prepare(op, ts, nt, alpha, t.destroy, &t.scalar, &ws, &t.exec);
    t.n_destroy = nt;
  }
  storage *wst = ws > 0 ? storage_new(ws) : NULL;
  t.ws = wst != NULL ? (void *)storage_base(wst) : NULL;
  t.ws_size = ws;
  dispatch(&t);
  storage_unref(wst);
  maybe_sync();
}

void op_mul(tensor out, tensor self, tensor other) {
  tensor ts[3] = {self, other, out};
  run_op(OP_MUL, ts, 3, 1.0f);
}

void op_add(tensor out, tensor self, tensor other, float alpha) {
  tensor ts[3] = {self, other, out};
  run_op(OP_ADD, ts, 3, alpha);
}

void op_matmul(tensor out, tensor self, tensor mat2) {
  tensor ts[3] = {self, mat2, out};
  run_op(OP_MATMUL, ts, 3, 1.0f);
}

void op_copy(tensor dst, tensor src) {
  tensor ts[2] = {dst, src};
  run_op(OP_COPY, ts, 2, 1.0f);
}

/* ops_sync waits for every stream before reporting: after a fault only the faulting stream's wait returns
 * the fault's code (the others get 507899), and that one names the kernel. */
void ops_sync(void) {
  ops_drain();
  int bad = -1;
  aclError bad_rc = ACL_SUCCESS;
  for (int k = 0; k < n_streams; k++) {
    aclError rc = RT(aclrtSynchronizeStream)(streams[k]);
    if (rc != ACL_SUCCESS && (bad < 0 || bad_rc == ACL_ERROR_RT_DRV_INTERNAL_ERROR)) {
      bad = k;
      bad_rc = rc;
    }
  }
  if (bad >= 0) rt_fail("aclrtSynchronizeStream", last_op[bad], bad_rc);
}

static void copy_async(void *dst, size_t dmax, const void *src, size_t count, aclrtMemcpyKind kind) {
  task t;
  memset(&t, 0, sizeof t);
  t.kind = TASK_COPY;
  t.stream = cur;
  t.dst = dst;
  t.dmax = dmax;
  t.src = src;
  t.count = count;
  t.copy_kind = kind;
  dispatch(&t);
}

void ops_h2d_async(tensor dst, const float *host) {
  copy_async((void *)storage_base(dst.st), dst.st->nbytes, host, tensor_bytes(dst), ACL_MEMCPY_HOST_TO_DEVICE);
}

void ops_d2h_async(float *host, tensor src) {
  size_t n = tensor_bytes(src);
  copy_async(host, n, (const void *)storage_base(src.st), n, ACL_MEMCPY_DEVICE_TO_HOST);
}
