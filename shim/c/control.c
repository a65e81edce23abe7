/* control.c: the process-level C side of libswapagent.so: the constructor (dl bootstrap, fork handler,
 * msrun scheduler check), the exported control ABI of swapagent.h (each wrapper refuses in a forked child
 * or an inert agent before any Go call, then calls the Go implementation), the fatal-signal handler that
 * lets the Go drainer put the ring on disk before the process dies, the exit hook, and the small helpers Go
 * calls: registered storage ops and the real runtime functions of the mover. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sa.h"
#include "swapagent.h"

/* Implemented in Go (shim/exports.go). */
extern int sa_go_set_storage_ops(uintptr_t release, uintptr_t restore, uintptr_t ctx);
extern uintptr_t sa_go_unpack(int64_t handle);
extern int sa_go_state(int64_t handle);
extern int sa_go_keep_reason(int64_t handle);
extern char *sa_go_stats_json(size_t *len);
extern void sa_go_shutdown(void);

_Atomic int sa_go_ready;
static void sa_install_crash_handlers(void);
/* The trace's clock starts once, at the first of sa_init and the Go agent's init to ask: in a c-shared
 * library the Go runtime runs its package inits on a thread of its own, concurrently with this library's
 * constructors, so the agent may read the start before sa_init ran. */
static int64_t start_mono, start_wall;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;

static void take_start(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  start_wall = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
  start_mono = sa_now();
}

static void sa_atfork_child(void) {
  /* The child never enters Go: the runtime's threads did not survive the fork. */
  atomic_store(&sa_forked, 1);
  atomic_store(&sa_mode, SA_INERT);
  sa_tramp_after_fork();
}

/* Runs after the Go runtime's entry (signals.c blocked the asynchronous signals around it). */
__attribute__((constructor)) static void sa_init(void) {
  sa_restore_loader_mask();
  /* Tests only: lose the race to the Go runtime's init thread for certain, as a loaded machine sometimes does. */
  if (getenv("SWAPAGENT_TEST_LATE_INIT") != NULL) usleep(50000);
  pthread_once(&start_once, take_start);
  sa_dl_bootstrap();
  pthread_atfork(NULL, NULL, sa_atfork_child);
  const char *role = getenv("MS_ROLE");
  if (role != NULL && strcmp(role, "MS_SCHED") == 0) {
    atomic_store(&sa_mode, SA_INERT);
    return;
  }
  /* Installed now, so a crash before the Go runtime is up is covered too. Whichever of this and the Go
   * runtime's own handlers is installed second forwards to the other for signals in non-Go code. */
  sa_install_crash_handlers();
}

/* At exit the agent drains the ring and writes its stats, unless this is a forked child or the agent is
 * inert. A process that exits before the Go runtime finished starting waits for it here (a Go call blocks
 * until the runtime is initialised), so even its first milliseconds are traced. Interposers pass through
 * afterwards (later destructors may still call the runtime). */
__attribute__((destructor)) static void sa_fini(void) {
  if (atomic_load(&sa_forked)) return;
  if (atomic_load(&sa_mode) != SA_INERT) SA_GO_VOID(sa_go_shutdown());
  atomic_store(&sa_mode, SA_INERT);
}

int64_t sa_start_mono(void) {
  pthread_once(&start_once, take_start);
  return start_mono;
}
int64_t sa_start_wall(void) {
  pthread_once(&start_once, take_start);
  return start_wall;
}
void sa_set_active(void) {
  int expected = SA_STARTING;
  atomic_compare_exchange_strong(&sa_mode, &expected, SA_ACTIVE);
  atomic_store(&sa_go_ready, 1);
}
void sa_set_inert(void) {
  atomic_store(&sa_mode, SA_INERT);
  atomic_store(&sa_go_ready, 1);
}
int sa_is_forked(void) { return atomic_load(&sa_forked); }

/* ---- Control ABI. ---- */
SA_EXPORT int swapagent_abi_version(void) { return SWAPAGENT_ABI_VERSION; }

SA_EXPORT int swapagent_set_storage_ops(swapagent_release_fn release, swapagent_restore_fn restore, void *ctx) {
  if (sa_refuse()) return SWAPAGENT_EDISABLED;
  return SA_GO(sa_go_set_storage_ops((uintptr_t)release, (uintptr_t)restore, (uintptr_t)ctx));
}

/* The v1 calls that take a group or pointers are records' fixed forms: one path reads their arguments and
 * runs them (calls.c). */
#define SA_RECORD(...) (&(struct swapagent_call){.size = sizeof(struct swapagent_call), __VA_ARGS__})

SA_EXPORT int swapagent_region_enter(const char *group, const uintptr_t *input_ptrs, size_t n) {
  return (int)sa_call_run(
      SA_RECORD(.kind = SWAPAGENT_CALL_REGION_ENTER, .group = group, .ptrs = input_ptrs, .n = n, .n_positional = n), 0);
}

/* The save itself is this function's own memory; its group is the caller's. */
SA_EXPORT int64_t swapagent_save(const char *group, uintptr_t storage_ptr, size_t nbytes, uint32_t flags) {
  int64_t handle = 0;
  int64_t rc = sa_call_run(SA_RECORD(.kind = SWAPAGENT_CALL_SAVE, .group = group, .save_ptrs = &storage_ptr,
                                     .save_nbytes = &nbytes, .save_flags = &flags, .n_save = 1, .handles = &handle),
                           0);
  return handle != 0 ? handle : rc; /* refused whole: no handle written */
}

SA_EXPORT int swapagent_region_exit(const char *group, const uintptr_t *output_ptrs, size_t n) {
  return (int)sa_call_run(SA_RECORD(.kind = SWAPAGENT_CALL_REGION_EXIT, .group = group, .ptrs = output_ptrs, .n = n), 0);
}

SA_EXPORT int swapagent_protect(const char *group, const uintptr_t *ptrs, size_t n) {
  return (int)sa_call_run(SA_RECORD(.kind = SWAPAGENT_CALL_PROTECT, .group = group, .ptrs = ptrs, .n = n), 0);
}

SA_EXPORT int swapagent_backward_enter(const char *group) {
  return (int)sa_call_run(SA_RECORD(.kind = SWAPAGENT_CALL_BACKWARD_ENTER, .group = group), 0);
}

SA_EXPORT int swapagent_backward_exit(const char *group) {
  return (int)sa_call_run(SA_RECORD(.kind = SWAPAGENT_CALL_BACKWARD_EXIT, .group = group), 0);
}

/* A storage the agent said stays on device (resident.c): nothing to bring back, no call into Go, no wait. */
SA_EXPORT uintptr_t swapagent_unpack_resident(int64_t handle) {
  if (sa_refuse()) return 0;
  uintptr_t base = sa_resident_get(handle);
  if (base != 0) sa_record(SA_FN_UNPACK, (int64_t)base, (uint64_t)handle, 0, 0, 0, 0, 0);
  return base;
}

SA_EXPORT uintptr_t swapagent_unpack(int64_t handle) {
  uintptr_t base = swapagent_unpack_resident(handle);
  if (base != 0 || sa_refuse()) return base;
  return SA_GO(sa_go_unpack(handle));
}

SA_EXPORT int swapagent_state(int64_t handle) {
  if (sa_refuse()) return SWAPAGENT_EDISABLED;
  return SA_GO(sa_go_state(handle));
}

SA_EXPORT int swapagent_keep_reason(int64_t handle) {
  if (sa_refuse()) return SWAPAGENT_EDISABLED;
  return SA_GO(sa_go_keep_reason(handle));
}

/* The JSON and its NUL go to buf when they fit in cap; the JSON's length comes back either way. */
SA_EXPORT int swapagent_stats_json(char *buf, size_t cap) {
  if (sa_refuse()) return SWAPAGENT_EDISABLED;
  if (buf == NULL && cap > 0) return sa_call_refused("stats_json", "NULL buf with cap > 0");
  size_t len = 0;
  char *js = SA_GO(sa_go_stats_json(&len));
  if (js == NULL) return SWAPAGENT_EDISABLED;
  int rc = (int)len;
  if (buf != NULL && len < cap && !sa_mem_write(buf, js, len + 1)) rc = sa_call_refused("stats_json", "buf is not writable memory");
  free(js);
  return rc;
}

/* ---- Helpers Go calls. ---- */
int sa_call_release(uintptr_t fn, uintptr_t ctx, int64_t handle, uintptr_t ptr, size_t nbytes) {
  if (fn == 0) return SWAPAGENT_ENOOPS;
  return ((swapagent_release_fn)fn)((void *)ctx, handle, ptr, nbytes);
}

uintptr_t sa_call_restore(uintptr_t fn, uintptr_t ctx, int64_t handle, size_t nbytes) {
  if (fn == 0) return 0;
  return ((swapagent_restore_fn)fn)((void *)ctx, handle, nbytes);
}

typedef aclError (*sa_memcpy_async_t)(void *, size_t, const void *, size_t, aclrtMemcpyKind, aclrtStream);
typedef aclError (*sa_handle_t)(void *);
typedef aclError (*sa_out_t)(void **);
typedef aclError (*sa_malloc_host_t)(void **, size_t);
typedef aclError (*sa_record_t)(aclrtEvent, aclrtStream);
typedef aclError (*sa_wait_t)(aclrtStream, aclrtEvent);
typedef aclError (*sa_elapsed_t)(float *, aclrtEvent, aclrtEvent);
typedef aclError (*sa_query_t)(aclrtEvent, aclrtEventRecordedStatus *);
/* After the application's aclFinalize the runtime is gone for the agent too: its stream, events and pinned
 * buffers went with it, and a call is undefined on real hardware. The mover then finds no runtime. */
static _Atomic int rt_final;
#define SA_REALCALL(id, type)                                                                   \
  type f = atomic_load_explicit(&rt_final, memory_order_acquire) ? NULL : (type)sa_real_fn(id); \
  if (f == NULL) return SA_NORT
void sa_real_calls_end(void) { atomic_store_explicit(&rt_final, 1, memory_order_release); }
int sa_real_memcpy_async(uintptr_t dst, size_t dest_max, uintptr_t src, size_t count, int kind, uintptr_t stream) {
  SA_REALCALL(SA_ID_aclrtMemcpyAsync, sa_memcpy_async_t);
  return f((void *)dst, dest_max, (const void *)src, count, (aclrtMemcpyKind)kind, (aclrtStream)stream);
}
int sa_real_sync_stream(uintptr_t stream) {
  SA_REALCALL(SA_ID_aclrtSynchronizeStream, sa_handle_t);
  return f((aclrtStream)stream);
}
int sa_real_create_stream(uintptr_t *stream) {
  SA_REALCALL(SA_ID_aclrtCreateStream, sa_out_t);
  aclrtStream s = NULL;
  aclError r = f(&s);
  *stream = (uintptr_t)s;
  return r;
}
int sa_real_malloc_host(uintptr_t *ptr, size_t size) {
  SA_REALCALL(SA_ID_aclrtMallocHost, sa_malloc_host_t);
  void *p = NULL;
  aclError r = f(&p, size);
  *ptr = (uintptr_t)p;
  return r;
}
int sa_real_free_host(uintptr_t ptr) {
  SA_REALCALL(SA_ID_aclrtFreeHost, sa_handle_t);
  return f((void *)ptr);
}
int sa_real_create_event(uintptr_t *event) {
  SA_REALCALL(SA_ID_aclrtCreateEvent, sa_out_t);
  aclrtEvent e = NULL;
  aclError r = f(&e);
  *event = (uintptr_t)e;
  return r;
}
int sa_real_record_event(uintptr_t event, uintptr_t stream) {
  SA_REALCALL(SA_ID_aclrtRecordEvent, sa_record_t);
  return f((aclrtEvent)event, (aclrtStream)stream);
}
int sa_real_sync_event(uintptr_t event) {
  SA_REALCALL(SA_ID_aclrtSynchronizeEvent, sa_handle_t);
  return f((aclrtEvent)event);
}
int sa_real_stream_wait_event(uintptr_t stream, uintptr_t event) {
  SA_REALCALL(SA_ID_aclrtStreamWaitEvent, sa_wait_t);
  return f((aclrtStream)stream, (aclrtEvent)event);
}
int sa_real_destroy_event(uintptr_t event) {
  SA_REALCALL(SA_ID_aclrtDestroyEvent, sa_handle_t);
  return f((aclrtEvent)event);
}
int sa_real_event_elapsed_ns(uintptr_t start, uintptr_t end, uint64_t *ns) {
  SA_REALCALL(SA_ID_aclrtEventElapsedTime, sa_elapsed_t);
  float ms = 0;
  aclError r = f(&ms, (aclrtEvent)start, (aclrtEvent)end);
  *ns = r == 0 && ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
  return r;
}
int sa_real_event_done(uintptr_t event) {
  SA_REALCALL(SA_ID_aclrtQueryEventStatus, sa_query_t);
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  aclError r = f((aclrtEvent)event, &status);
  return r != 0 ? -1 : status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
}

/* ---- Fatal signals. Go cannot run in a signal handler, but the drainer goroutine (its own locked
 * thread) can: the faulting thread raises a flag and waits, bounded, while the drainer empties the ring,
 * records the signal and flushes the trace; then the previous disposition is restored and the signal
 * re-delivered. On the drainer's own thread, or when the agent is not active, it only chains. ---- */
static const int crash_sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
#define SA_NCRASH ((int)(sizeof crash_sigs / sizeof crash_sigs[0]))
static struct sigaction old_actions[SA_NCRASH];
static _Atomic int crash_sig, crash_acked, crash_once;
static SA_TLS int is_drainer;

void sa_drainer_thread(void) { is_drainer = 1; }
int sa_crash_pending(void) { return atomic_load(&crash_sig); }
void sa_crash_ack(void) { atomic_store(&crash_acked, 1); }

static void sa_crash_handler(int sig, siginfo_t *si, void *uc) {
  int saved = errno;
  (void)uc;
  /* Starting counts too: the drainer comes up with the Go runtime, within the wait. */
  if (!is_drainer && atomic_load(&sa_mode) != SA_INERT && !atomic_load(&sa_forked) &&
      atomic_exchange(&crash_once, 1) == 0) {
    atomic_store(&crash_sig, sig);
    struct timespec d = {0, 1000000};
    for (int i = 0; i < 1000 && !atomic_load(&crash_acked); i++) nanosleep(&d, NULL); /* at most ~1 s */
  }
  for (int i = 0; i < SA_NCRASH; i++) {
    if (crash_sigs[i] == sig) sigaction(sig, &old_actions[i], NULL);
  }
  /* A fault re-executes the instruction under the old disposition; a sent signal must be re-raised. */
  if (si == NULL || si->si_code <= 0) raise(sig);
  errno = saved;
}

static void sa_install_crash_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = sa_crash_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < SA_NCRASH; i++) {
    struct sigaction old;
    if (sigaction(crash_sigs[i], NULL, &old) != 0) continue;
    /* Leave an ignored signal alone. */
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;
    old_actions[i] = old;
    sigaction(crash_sigs[i], &sa, NULL);
  }
}
