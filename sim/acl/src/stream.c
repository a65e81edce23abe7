/* stream.c: streams (one worker thread each, running its queue in order), events, the copy engine with
 * its optional host-link throttle, the copy/memset API, and the kernel launch libnnopbase.so's executors
 * go through. Synchronous copies and memsets run as tasks on the default stream and wait for it, so they
 * are ordered after earlier default-stream work. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aclsim.h"

enum task_kind { TK_COPY, TK_MEMSET, TK_KERNEL, TK_RECORD, TK_WAIT, TK_RESET };

struct sim_event {
  uint32_t flags;
  int refs;           /* the handle plus each queued task naming it; guarded by ev_mu */
  uint64_t seqs;      /* records enqueued so far: each takes the next sequence */
  uint64_t recorded;  /* sequence of the latest record enqueued; 0 when none, or reset since */
  uint64_t *pend;     /* sequences of the records enqueued and not run yet (on any streams, in any order) */
  size_t npend, cappend;
  uint64_t ts_seq;    /* the highest record run so far, and when it ran */
  uint64_t ts_ns;
  struct sim_vc hz;   /* hazard checker: the stream's clock at the latest record enqueued */
};

struct sim_task {
  struct sim_task *next;
  enum task_kind kind;
  uint32_t id;
  uint32_t tid;
  bool sync;                  /* issued by a synchronous API call (names the fault "Memcpy" not "MemcpyAsync") */
  void *dst;
  const void *src;
  size_t n;
  aclrtMemcpyKind dir;
  bool dst_dev, src_dev, dst_pinned, src_pinned;
  int value;
  struct sim_exec *exec;
  struct sim_event *ev;
  uint64_t seq;
};

struct sim_stream {
  uint32_t id;
  pthread_t thr;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast on new work, on completion and on stop */
  struct sim_task *head, *tail;
  uint64_t enq, done;
  uint32_t next_task;
  bool stop;
  uint64_t rng; /* ACLSIM_JITTER_US delays; only the worker touches it */
};

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sim_stream **streams; /* every live stream, the default one first */
static size_t nstreams, capstreams;
static struct sim_stream *default_stream;
static uint32_t next_stream_id;
static struct sim_ptrset stream_set = SIM_PTRSET_INIT;
static struct sim_ptrset event_set = SIM_PTRSET_INIT;

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv;
static pthread_once_t ev_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t lane_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t lane_free_at[2]; /* H2D, D2H: when each direction of the host link is next idle */

#define STREAM_ANY (UINT32_MAX - 1)

static void init_cond(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

static void ev_init_once(void) { init_cond(&ev_cv); }

static struct timespec ts_of(uint64_t ns) {
  return (struct timespec){.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
}

static struct timespec abs_after_ns(uint64_t ns) { return ts_of(sim_now_ns() + ns); }

static void sleep_until(uint64_t t) {
  struct timespec ts = ts_of(t);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void event_unref(struct sim_event *e) {
  pthread_mutex_lock(&ev_mu);
  bool last = --e->refs == 0;
  pthread_mutex_unlock(&ev_mu);
  if (last) {
    free(e->hz.v);
    free(e->pend);
    free(e);
  }
}

/* rec_done: record seq of e has run (0, no record, counts as run). Records of one event may be pending on
 * several streams at once and run in any order: a wait is for its own record, not for a later one that
 * happened to run first. Caller holds ev_mu. */
static bool rec_done(const struct sim_event *e, uint64_t seq) {
  for (size_t i = 0; i < e->npend; i++)
    if (e->pend[i] == seq) return false;
  return true;
}

/* ---- faults from copies ---- */
static const char *dir_name(aclrtMemcpyKind d) {
  switch (d) {
    case ACL_MEMCPY_HOST_TO_DEVICE: return "H2D";
    case ACL_MEMCPY_DEVICE_TO_HOST: return "D2H";
    case ACL_MEMCPY_DEVICE_TO_DEVICE: return "D2D";
    default: return "H2H";
  }
}

/* task_name names a copy or memset the way fault reports and hazard lines do. */
static const char *task_name(const struct sim_task *t) {
  static const char *const names[2][4] = {
      {"MemcpyAsync_H2H", "MemcpyAsync_H2D", "MemcpyAsync_D2H", "MemcpyAsync_D2D"},
      {"Memcpy_H2H", "Memcpy_H2D", "Memcpy_D2H", "Memcpy_D2D"}};
  if (t->kind == TK_MEMSET) return "Memset";
  return names[t->sync][t->dir];
}

static void copy_fault(struct sim_stream *s, struct sim_task *t, int index, const void *addr, size_t size) {
  char lines[1024];
  snprintf(lines, sizeof lines,
           "there is a sdma error exception, core id is 0, error code = 0x800000\n"
           "errorStr: The DDR address of the SDMA copy is out of range. device_id=%d, stream_id=%u, "
           "task_id=%u, subErrType:4\n"
           "Memory copy task happen error, retCode=0x%x, [sdma exception]\n"
           "fault kernel_name=%s\n"
           "tensor index:%d\n"
           "addr:%#lx\n"
           "size:%zu bytes",
           (int)sim_device(), s->id, t->id, ACL_ERROR_RT_DEVICE_MEM_ERROR, task_name(t), index,
           (unsigned long)addr, size);
  struct sim_fault f = {ACL_ERROR_RT_DEVICE_MEM_ERROR, s->id, t->id, t->tid, lines};
  sim_fault_raise(&f);
}

/* side_ok re-validates one side of a copy at execution time (the memory may have been freed since). */
static bool side_ok(const void *p, size_t n, bool dev, bool pinned) {
  if (dev) return sim_dev_range_ok((uintptr_t)p, n);
  if (pinned) return sim_pinned_check(p, n) == 1;
  return true; /* pageable host memory: the caller's to keep valid, as on hardware */
}

static void run_copy(struct sim_stream *s, struct sim_task *t) {
  int lane = t->dir == ACL_MEMCPY_HOST_TO_DEVICE ? 0 : t->dir == ACL_MEMCPY_DEVICE_TO_HOST ? 1 : -1;
  double gbps = sim_cfg.copy_gbps;
  bool throttled = gbps > 0 && lane >= 0;
  uint64_t start = 0;
  size_t chunk = t->n;
  if (throttled) {
    /* Reserve this copy's slot on its direction of the link; copies queued behind it wait their turn. */
    uint64_t dur = (uint64_t)((double)t->n / gbps); /* 1 GB/s moves one byte per ns */
    pthread_mutex_lock(&lane_mu);
    uint64_t now = sim_now_ns();
    start = lane_free_at[lane] > now ? lane_free_at[lane] : now;
    lane_free_at[lane] = start + dur;
    pthread_mutex_unlock(&lane_mu);
    sleep_until(start);
    /* Bytes land progressively, as a DMA would deliver them; chunks stay large enough for memcpy to run
     * at full speed (glibc streams big copies). */
    chunk = t->n / 16;
    if (chunk < 256 * 1024) chunk = 256 * 1024;
    if (chunk > 8u << 20) chunk = 8u << 20;
  }
  for (size_t off = 0; off < t->n; off += chunk) {
    size_t len = t->n - off < chunk ? t->n - off : chunk;
    sim_mem_rdlock();
    if (!side_ok(t->dst, t->n, t->dst_dev, t->dst_pinned)) {
      sim_mem_unlock();
      copy_fault(s, t, 0, t->dst, t->n);
      return;
    }
    if (!side_ok(t->src, t->n, t->src_dev, t->src_pinned)) {
      sim_mem_unlock();
      copy_fault(s, t, 1, t->src, t->n);
      return;
    }
    if (t->kind == TK_MEMSET) memset((char *)t->dst + off, t->value, len);
    else memmove((char *)t->dst + off, (const char *)t->src + off, len);
    sim_mem_unlock();
    if (throttled) sleep_until(start + (uint64_t)((double)(off + len) / gbps));
  }
}

static void run_task(struct sim_stream *s, struct sim_task *t) {
  bool dead = sim_poisoned(); /* a poisoned context runs nothing; records still complete so waits end */
  switch (t->kind) {
    case TK_COPY:
    case TK_MEMSET:
      if (!dead) run_copy(s, t);
      break;
    case TK_KERNEL:
      if (!dead) sim_exec_run(t->exec, s->id, t->id, t->tid);
      free(t->exec);
      break;
    case TK_RECORD:
      pthread_mutex_lock(&ev_mu);
      for (size_t i = 0; i < t->ev->npend; i++)
        if (t->ev->pend[i] == t->seq) {
          t->ev->pend[i] = t->ev->pend[--t->ev->npend];
          break;
        }
      if (t->seq > t->ev->ts_seq) {
        t->ev->ts_seq = t->seq;
        t->ev->ts_ns = sim_now_ns();
      }
      pthread_cond_broadcast(&ev_cv);
      pthread_mutex_unlock(&ev_mu);
      event_unref(t->ev);
      break;
    case TK_WAIT:
      pthread_mutex_lock(&ev_mu);
      while (!rec_done(t->ev, t->seq) && !sim_poisoned()) {
        struct timespec ts = abs_after_ns(10 * 1000000ull); /* re-check poison now and then */
        pthread_cond_timedwait(&ev_cv, &ev_mu, &ts);
      }
      pthread_mutex_unlock(&ev_mu);
      event_unref(t->ev);
      break;
    case TK_RESET: /* the event stopped counting as recorded when the reset was enqueued */
      event_unref(t->ev);
      break;
  }
}

/* jitter sleeps 0..ACLSIM_JITTER_US us before a task (splitmix64 per stream, seeded from ACLSIM_SEED and
 * the stream id), so streams interleave differently from run to run and seed to seed. */
static void jitter(struct sim_stream *s) {
  uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  uint64_t ns = z % ((uint64_t)sim_cfg.jitter_us + 1) * 1000;
  struct timespec ts = ts_of(ns);
  nanosleep(&ts, NULL);
}

static void *worker(void *arg) {
  struct sim_stream *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    struct sim_task *t = s->head;
    if (!t) {
      pthread_mutex_unlock(&s->mu);
      return NULL;
    }
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    if (sim_cfg.jitter_us) jitter(s);
    run_task(s, t);
    free(t);
    pthread_mutex_lock(&s->mu);
    s->done++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
}

static struct sim_stream *stream_new(void) {
  struct sim_stream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  init_cond(&s->cv);
  pthread_mutex_lock(&streams_mu);
  s->id = next_stream_id++;
  s->rng = sim_cfg.seed ^ ((uint64_t)s->id << 32);
  if (nstreams == capstreams) {
    size_t ncap = capstreams ? capstreams * 2 : 16;
    struct sim_stream **p = realloc(streams, ncap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&streams_mu);
      free(s);
      return NULL;
    }
    streams = p;
    capstreams = ncap;
  }
  if (pthread_create(&s->thr, NULL, worker, s) != 0) {
    pthread_mutex_unlock(&streams_mu);
    free(s);
    return NULL;
  }
  streams[nstreams++] = s;
  pthread_mutex_unlock(&streams_mu);
  return s;
}

/* stream_stop joins the worker once its queue is empty and frees the stream. */
static void stream_stop(struct sim_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thr, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

int sim_streams_init(void) {
  pthread_once(&ev_once, ev_init_once);
  next_stream_id = 0;
  lane_free_at[0] = lane_free_at[1] = 0;
  default_stream = stream_new();
  return default_stream ? 0 : -1;
}

void sim_streams_fini(void) {
  pthread_mutex_lock(&streams_mu);
  struct sim_stream **all = streams;
  size_t n = nstreams;
  streams = NULL;
  nstreams = capstreams = 0;
  default_stream = NULL;
  pthread_mutex_unlock(&streams_mu);
  for (size_t i = 0; i < n; i++) stream_stop(all[i]);
  free(all);
  sim_ptrset_clear(&stream_set);
  /* Events are freed by their handles' owners; forget the handles so stale ones are rejected. */
  sim_ptrset_clear(&event_set);
}

/* resolve maps an API stream handle (NULL = default) to a live stream. */
static struct sim_stream *resolve(aclrtStream h) {
  if (!h) return default_stream;
  return sim_ptrset_has(&stream_set, h) ? (struct sim_stream *)h : NULL;
}

/* track adds an access that lies in a live device or pinned allocation at enqueue (a device range that
 * does not faults at execution instead; pageable host memory is the caller's to order). */
static void track(struct sim_access *acc, int *n, const void *p, size_t len, bool write, bool dev, bool pinned) {
  uintptr_t base = dev || pinned ? sim_alloc_base((uintptr_t)p, len, pinned) : 0;
  if (base) acc[(*n)++] = (struct sim_access){(uintptr_t)p, len, write, base};
}

/* hz_accesses lists a task's tracked accesses. It runs before the stream lock is taken: the lookups take
 * the allocation lock, which workers take too. */
static int hz_accesses(const struct sim_task *t, struct sim_access *acc, const char **name) {
  struct sim_access all[3];
  int n = 0;
  *name = task_name(t);
  switch (t->kind) {
    case TK_KERNEL:
      for (int i = 0, m = sim_exec_accesses(t->exec, all, name); i < m; i++)
        track(acc, &n, (const void *)all[i].addr, all[i].len, all[i].write, true, false);
      break;
    case TK_COPY:
    case TK_MEMSET:
      if (t->kind == TK_COPY) track(acc, &n, t->src, t->n, false, t->src_dev, t->src_pinned);
      track(acc, &n, t->dst, t->n, true, t->dst_dev, t->dst_pinned);
      break;
    default: break;
  }
  return n;
}

static void enqueue(struct sim_stream *s, struct sim_task *t) {
  struct sim_access acc[3];
  const char *name = NULL;
  int n = sim_cfg.check_hazards ? hz_accesses(t, acc, &name) : 0;
  t->tid = (uint32_t)sim_gettid();
  pthread_mutex_lock(&s->mu);
  t->id = s->next_task++;
  /* the checker sees a stream's tasks in queue order, so its epochs and sync snapshots match the queue */
  if (t->kind == TK_RECORD) sim_hz_record(s->id, &t->ev->hz);
  else if (t->kind == TK_WAIT) sim_hz_wait(s->id, &t->ev->hz);
  else sim_hz_task(s->id, t->id, name, acc, n);
  t->next = NULL;
  if (s->tail) s->tail->next = t;
  else s->head = t;
  s->tail = t;
  s->enq++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

uint64_t sim_deadline(int32_t timeout_ms) {
  return timeout_ms < 0 ? SIM_FOREVER : sim_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

/* stream_wait waits for everything enqueued on s before the call, until deadline. */
static aclError stream_wait(struct sim_stream *s, uint64_t deadline, uint32_t report_as) {
  struct sim_vc seen = {NULL, 0}; /* the stream's clock at the call: what the host has seen once drained */
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->enq;
  sim_hz_snap_stream(s->id, &seen);
  struct timespec dl = ts_of(deadline);
  while (s->done < target) {
    if (deadline == SIM_FOREVER) {
      pthread_cond_wait(&s->cv, &s->mu);
    } else if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT && s->done < target) {
      pthread_mutex_unlock(&s->mu);
      free(seen.v);
      return ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
    }
  }
  pthread_mutex_unlock(&s->mu);
  sim_hz_host_join(&seen);
  return sim_wait_result(report_as);
}

aclError sim_sync_all(uint64_t deadline) {
  pthread_mutex_lock(&streams_mu);
  size_t n = nstreams;
  struct sim_stream **all = malloc((n ? n : 1) * sizeof *all);
  if (all) memcpy(all, streams, n * sizeof *all);
  pthread_mutex_unlock(&streams_mu);
  if (!all) return sim_fail(ACL_ERROR_BAD_ALLOC, "device sync: out of host memory");
  /* Streams are only freed by aclrtDestroyStream/aclFinalize; racing those with a device sync is a misuse. */
  aclError rc = ACL_SUCCESS;
  for (size_t i = 0; i < n && rc != ACL_ERROR_RT_STREAM_SYNC_TIMEOUT; i++)
    rc = stream_wait(all[i], deadline, UINT32_MAX);
  free(all);
  return rc == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT ? rc : sim_wait_result(STREAM_ANY);
}

ACLSIM_INTERNAL aclError aclsim_internal_launch(const char *fn, struct sim_exec *e, aclrtStream stream) {
  struct sim_stream *s = resolve(stream);
  struct sim_task *t = s ? calloc(1, sizeof *t) : NULL;
  if (!t) {
    free(e);
    return s ? sim_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn)
             : sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a stream", fn, stream);
  }
  t->kind = TK_KERNEL;
  t->exec = e;
  enqueue(s, t);
  return ACL_SUCCESS;
}

/* ---- streams API ---- */
static aclError stream_create(const char *fn, aclrtStream *stream) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!stream) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", fn);
  struct sim_stream *s = stream_new();
  if (!s) return sim_fail(ACL_ERROR_INTERNAL_ERROR, "%s: cannot start a stream worker", fn);
  sim_ptrset_add(&stream_set, s);
  *stream = s;
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtCreateStream(aclrtStream *stream) {
  return stream_create("aclrtCreateStream", stream);
}

/* As on CANN, a priority out of [0, 7] is clamped and flags other than the documented ones give a plain
 * stream, so nothing here is rejected; neither changes how the emulated stream runs. */
ACL_FUNC_VISIBILITY aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag) {
  (void)priority;
  (void)flag;
  return stream_create("aclrtCreateStreamWithConfig", stream);
}

ACL_FUNC_VISIBILITY aclError aclrtDestroyStream(aclrtStream stream) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!stream || !sim_ptrset_del(&stream_set, stream))
    return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyStream: %p is not a created stream", stream);
  struct sim_stream *s = stream;
  pthread_mutex_lock(&streams_mu);
  for (size_t i = 0; i < nstreams; i++)
    if (streams[i] == s) {
      streams[i] = streams[--nstreams];
      break;
    }
  pthread_mutex_unlock(&streams_mu);
  uint32_t id = s->id;
  stream_stop(s); /* drains the queue first, like the runtime's implicit sync */
  sim_hz_stream_gone(id);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtSynchronizeStream(aclrtStream stream) {
  if (!sim_initialized()) return sim_check();
  struct sim_stream *s = resolve(stream);
  if (!s) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSynchronizeStream: %p is not a stream", stream);
  return stream_wait(s, SIM_FOREVER, s->id);
}

ACL_FUNC_VISIBILITY aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) {
  if (!sim_initialized()) return sim_check();
  if (timeout < -1)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtSynchronizeStreamWithTimeout: invalid timeout %d", timeout);
  struct sim_stream *s = resolve(stream);
  if (!s) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSynchronizeStreamWithTimeout: %p is not a stream", stream);
  aclError rc = stream_wait(s, sim_deadline(timeout), s->id);
  if (rc == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT)
    return sim_fail(rc, "aclrtSynchronizeStreamWithTimeout: stream %u not done after %d ms", s->id, timeout);
  return rc;
}

ACL_FUNC_VISIBILITY aclError aclrtSynchronizeDevice(void) {
  if (!sim_initialized()) return sim_check();
  return sim_sync_all(SIM_FOREVER);
}

ACL_FUNC_VISIBILITY aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout) {
  if (!sim_initialized()) return sim_check();
  if (timeout < -1)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtSynchronizeDeviceWithTimeout: invalid timeout %d", timeout);
  aclError rc = sim_sync_all(sim_deadline(timeout));
  if (rc == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT)
    return sim_fail(rc, "aclrtSynchronizeDeviceWithTimeout: the device is not done after %d ms", timeout);
  return rc;
}

/* A query that answers COMPLETE is a host wait that saw the stream drained (for the hazard checker). */
ACL_FUNC_VISIBILITY aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!status) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtStreamQuery: status is NULL");
  struct sim_stream *s = resolve(stream);
  if (!s) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamQuery: %p is not a stream", stream);
  struct sim_vc seen = {NULL, 0};
  pthread_mutex_lock(&s->mu);
  bool done = s->done == s->enq;
  if (done) sim_hz_snap_stream(s->id, &seen);
  pthread_mutex_unlock(&s->mu);
  sim_hz_host_join(&seen);
  *status = done ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

/* ---- events API ---- */
static aclError event_create(const char *fn, aclrtEvent *event, uint32_t flag) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!event) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: event is NULL", fn);
  if (flag & ~0x3Fu) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: invalid flag %#x", fn, flag);
  pthread_once(&ev_once, ev_init_once);
  struct sim_event *e = calloc(1, sizeof *e);
  if (!e) return sim_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  e->flags = flag;
  e->refs = 1;
  sim_ptrset_add(&event_set, e);
  *event = e;
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag) {
  return event_create("aclrtCreateEventWithFlag", event, flag);
}

ACL_FUNC_VISIBILITY aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag) {
  return event_create("aclrtCreateEventExWithFlag", event, flag);
}

ACL_FUNC_VISIBILITY aclError aclrtCreateEvent(aclrtEvent *event) {
  return event_create("aclrtCreateEvent", event, ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE);
}

static struct sim_event *event_of(aclrtEvent h) {
  return sim_ptrset_has(&event_set, h) ? (struct sim_event *)h : NULL;
}

ACL_FUNC_VISIBILITY aclError aclrtDestroyEvent(aclrtEvent event) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!event || !sim_ptrset_del(&event_set, event))
    return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyEvent: %p is not a created event", event);
  event_unref(event); /* queued records and waits keep it alive until they ran */
  return ACL_SUCCESS;
}

/* event_task checks an event call's handles and makes its task on the stream, the event referenced. */
static aclError event_task(const char *fn, aclrtEvent event, aclrtStream stream, enum task_kind kind,
                           struct sim_stream **s, struct sim_task **t) {
  aclError rc = sim_check();
  if (rc) return rc;
  struct sim_event *e = event_of(event);
  if (!e) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not an event", fn, event);
  *s = resolve(stream);
  if (!*s) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a stream", fn, stream);
  *t = calloc(1, sizeof **t);
  if (!*t) return sim_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  (*t)->kind = kind;
  (*t)->ev = e;
  pthread_mutex_lock(&ev_mu);
  e->refs++;
  pthread_mutex_unlock(&ev_mu);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  struct sim_stream *s;
  struct sim_task *t;
  aclError rc = event_task("aclrtRecordEvent", event, stream, TK_RECORD, &s, &t);
  if (rc) return rc;
  struct sim_event *e = t->ev;
  pthread_mutex_lock(&ev_mu);
  if (e->npend == e->cappend) {
    size_t cap = e->cappend ? 2 * e->cappend : 4;
    uint64_t *p = realloc(e->pend, cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&ev_mu);
      free(t);
      event_unref(e);
      return sim_fail(ACL_ERROR_BAD_ALLOC, "aclrtRecordEvent: out of host memory");
    }
    e->pend = p;
    e->cappend = cap;
  }
  t->seq = e->recorded = ++e->seqs;
  e->pend[e->npend++] = t->seq;
  pthread_mutex_unlock(&ev_mu);
  enqueue(s, t);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  struct sim_stream *s;
  struct sim_task *t;
  aclError rc = event_task("aclrtStreamWaitEvent", event, stream, TK_WAIT, &s, &t);
  if (rc) return rc;
  pthread_mutex_lock(&ev_mu);
  t->seq = t->ev->recorded; /* waits for the record enqueued before this call; none (or reset) = no wait */
  pthread_mutex_unlock(&ev_mu);
  enqueue(s, t);
  return ACL_SUCCESS;
}

/* aclrtResetEvent is a task on the stream, like a record; from the call on the event counts as never
 * recorded, so a wait, sync or query issued afterwards does not wait for an earlier record (as on CANN,
 * a wait on a reset event does not block). Records already enqueued still run. */
ACL_FUNC_VISIBILITY aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream) {
  struct sim_stream *s;
  struct sim_task *t;
  aclError rc = event_task("aclrtResetEvent", event, stream, TK_RESET, &s, &t);
  if (rc) return rc;
  pthread_mutex_lock(&ev_mu);
  t->ev->recorded = 0;
  sim_hz_unrecord(&t->ev->hz);
  pthread_mutex_unlock(&ev_mu);
  enqueue(s, t);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtSynchronizeEvent(aclrtEvent event) {
  if (!sim_initialized()) return sim_check();
  struct sim_event *e = event_of(event);
  if (!e) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSynchronizeEvent: %p is not an event", event);
  struct sim_vc seen = {NULL, 0};
  pthread_mutex_lock(&ev_mu);
  uint64_t target = e->recorded;
  sim_hz_snap_event(&e->hz, &seen);
  while (!rec_done(e, target)) pthread_cond_wait(&ev_cv, &ev_mu);
  pthread_mutex_unlock(&ev_mu);
  sim_hz_host_join(&seen);
  return sim_wait_result(UINT32_MAX);
}

ACL_FUNC_VISIBILITY aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!ms) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtEventElapsedTime: ms is NULL");
  struct sim_event *a = event_of(startEvent), *b = event_of(endEvent);
  if (!a || !b) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtEventElapsedTime: not an event");
  pthread_mutex_lock(&ev_mu);
  bool ready = a->recorded && b->recorded && rec_done(a, a->recorded) && rec_done(b, b->recorded);
  double d = ready ? ((double)b->ts_ns - (double)a->ts_ns) / 1e6 : 0;
  pthread_mutex_unlock(&ev_mu);
  if (!ready)
    return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtEventElapsedTime: an event is not recorded or not complete");
  *ms = (float)d;
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!status) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtQueryEventStatus: status is NULL");
  struct sim_event *e = event_of(event);
  if (!e) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtQueryEventStatus: %p is not an event", event);
  struct sim_vc seen = {NULL, 0}; /* like aclrtStreamQuery: COMPLETE is a host wait that saw the record run */
  pthread_mutex_lock(&ev_mu);
  bool done = rec_done(e, e->recorded);
  if (done) sim_hz_snap_event(&e->hz, &seen);
  pthread_mutex_unlock(&ev_mu);
  sim_hz_host_join(&seen);
  *status = done ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

/* ---- copies and memsets ---- */
static aclError copy_api(const char *fn, void *dst, size_t destMax, const void *src, size_t count,
                         aclrtMemcpyKind kind, aclrtStream stream, bool async) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!dst || !src) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: dst or src is NULL", fn);
  if (count > destMax)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: count %zu exceeds destMax %zu", fn, count, destMax);
  if ((int)kind < 0 || (int)kind > ACL_MEMCPY_DEFAULT)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: invalid kind %d", fn, (int)kind);
  bool ddev = sim_in_arena(dst), sdev = sim_in_arena(src);
  if (kind == ACL_MEMCPY_DEFAULT) {
    kind = ddev ? (sdev ? ACL_MEMCPY_DEVICE_TO_DEVICE : ACL_MEMCPY_HOST_TO_DEVICE)
                : (sdev ? ACL_MEMCPY_DEVICE_TO_HOST : ACL_MEMCPY_HOST_TO_HOST);
  } else {
    bool want_d = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    bool want_s = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    if (ddev != want_d || sdev != want_s)
      return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: kind %s does not match dst %p (%s) and src %p (%s)", fn,
                      dir_name(kind), dst, ddev ? "device" : "host", src, sdev ? "device" : "host");
  }
  if (async && kind == ACL_MEMCPY_HOST_TO_HOST)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: host-to-host copies are not supported", fn);
  int dp = ddev ? 0 : sim_pinned_check(dst, count), sp = sdev ? 0 : sim_pinned_check(src, count);
  if (dp < 0 || sp < 0)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: %zu bytes overrun the pinned host allocation at %s", fn, count,
                    dp < 0 ? "dst" : "src");
  struct sim_stream *s = async ? resolve(stream) : default_stream;
  if (!s) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a stream", fn, stream);
  if (count == 0) return async ? ACL_SUCCESS : stream_wait(s, SIM_FOREVER, s->id);
  struct sim_task *t = calloc(1, sizeof *t);
  if (!t) return sim_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  *t = (struct sim_task){.kind = TK_COPY, .sync = !async, .dst = dst, .src = src, .n = count, .dir = kind,
                         .dst_dev = ddev, .src_dev = sdev, .dst_pinned = dp == 1, .src_pinned = sp == 1};
  enqueue(s, t);
  return async ? ACL_SUCCESS : stream_wait(s, SIM_FOREVER, s->id);
}

ACL_FUNC_VISIBILITY aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
                                         aclrtMemcpyKind kind) {
  return copy_api("aclrtMemcpy", dst, destMax, src, count, kind, NULL, false);
}

ACL_FUNC_VISIBILITY aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                                              aclrtMemcpyKind kind, aclrtStream stream) {
  return copy_api("aclrtMemcpyAsync", dst, destMax, src, count, kind, stream, true);
}

static aclError memset_api(const char *fn, void *devPtr, size_t maxCount, int32_t value, size_t count,
                           aclrtStream stream, bool async) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!devPtr) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", fn);
  if (count > maxCount)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: count %zu exceeds maxCount %zu", fn, count, maxCount);
  bool dev = sim_in_arena(devPtr);
  int pinned = dev ? 0 : sim_pinned_check(devPtr, count);
  if (pinned < 0) return sim_fail(ACL_ERROR_INVALID_PARAM, "%s: %zu bytes overrun the pinned allocation", fn, count);
  struct sim_stream *s = async ? resolve(stream) : default_stream;
  if (!s) return sim_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a stream", fn, stream);
  if (count == 0) return async ? ACL_SUCCESS : stream_wait(s, SIM_FOREVER, s->id);
  struct sim_task *t = calloc(1, sizeof *t);
  if (!t) return sim_fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", fn);
  *t = (struct sim_task){.kind = TK_MEMSET, .sync = !async, .dst = devPtr, .src = devPtr, .n = count,
                         .dir = ACL_MEMCPY_DEVICE_TO_DEVICE, .dst_dev = dev, .src_dev = dev,
                         .dst_pinned = pinned == 1, .src_pinned = pinned == 1, .value = value & 0xff};
  enqueue(s, t);
  return async ? ACL_SUCCESS : stream_wait(s, SIM_FOREVER, s->id);
}

ACL_FUNC_VISIBILITY aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
  return memset_api("aclrtMemset", devPtr, maxCount, value, count, NULL, false);
}

ACL_FUNC_VISIBILITY aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
                                              aclrtStream stream) {
  return memset_api("aclrtMemsetAsync", devPtr, maxCount, value, count, stream, true);
}
