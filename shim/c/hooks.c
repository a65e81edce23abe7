/* hooks.c: the interposers generated from hooks.def, the generic aclnn launch hook with its trampoline pool
 * for ops reached through dlsym, the chained exception callback and the launch check (which tensors a
 * launch reads is tensors.c's). An
 * interposer touches only its real-function pointer, a counter and the ring: it never allocates, locks or
 * calls into Go, so it works before the Go runtime is ready and in a forked child. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "sa.h"

SA_TLS int sa_depth;
_Atomic int sa_mode = SA_STARTING;
_Atomic int sa_forked;
void *_Atomic sa_real[SA_NFN];

/* Interposers record only the outermost call of a thread (a runtime calling itself is not the
 * application's call) and nothing once the agent is inert. */
static inline int sa_skip(void) {
  return sa_depth != 0 || atomic_load_explicit(&sa_mode, memory_order_relaxed) == SA_INERT;
}

#define SA_U(x) ((uint64_t)(uintptr_t)(x))
#define SA_OUT(p) ((r) == 0 && (p) != NULL ? SA_U(*(p)) : 0)

/* The launch check: a tensor with bytes to read at address 0, or inside a watched range, is reported
 * before the kernel runs. Index is the tensor's position among the launch's tensors (tensors.c). */
static inline void sa_check_tensors(int fn, const sa_tensor *ts, uint32_t n) {
  int watched = atomic_load_explicit(&sa_dead_n, memory_order_acquire) > 0;
  for (uint32_t i = 0; i < n; i++) {
    const sa_tensor *t = &ts[i];
    if (t->extent != 0 && (t->addr == 0 || (watched && sa_dead_hit(t->addr))))
      sa_launch_fault(fn, (int)i, t->addr, t->extent);
  }
}

static uint64_t sa_dtype_size(aclDataType dt) {
  switch (dt) {
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_INT16: case ACL_UINT16: case ACL_BF16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: return 8;
    default: return 0;
  }
}

uint64_t sa_elems(const int64_t *dims, uint64_t n) {
  if (dims == NULL && n > 0) return 0;
  uint64_t e = 1;
  for (uint64_t i = 0; i < n; i++) {
    if (dims[i] < 0 || __builtin_mul_overflow(e, (uint64_t)dims[i], &e)) return 0;
  }
  return e;
}

uint64_t sa_extent(const int64_t *dims, uint64_t n, aclDataType dt) {
  uint64_t e, sz = sa_dtype_size(dt);
  if (sz == 0 || dims == NULL || __builtin_mul_overflow(sa_elems(dims, n), sz, &e)) return 0;
  return e;
}

/* ---- Generated interposers: a hidden local definition (its address is ours whoever else exports the
 * name) and a default-visibility alias with the runtime's name. ---- */
#define SA_HOOK(RT, NAME, PARAMS, ARGS, FAIL, AFTER, A0, A1, A2, A3, A4, A5)                                  \
  typedef RT(*sa_t_##NAME) PARAMS;                                                                           \
  static RT sa_i_##NAME PARAMS {                                                                             \
    sa_t_##NAME real = (sa_t_##NAME)sa_real_fn(SA_ID_##NAME);                                                \
    if (__builtin_expect(real == NULL, 0)) return FAIL;                                                      \
    if (sa_skip()) return real ARGS;                                                                         \
    sa_depth++;                                                                                              \
    RT r = real ARGS;                                                                                        \
    sa_depth--;                                                                                              \
    AFTER;                                                                                                   \
    sa_record(SA_ID_##NAME, (int64_t)(r), SA_U(A0), SA_U(A1), SA_U(A2), SA_U(A3), SA_U(A4), SA_U(A5));       \
    return r;                                                                                                \
  }                                                                                                          \
  extern __typeof(sa_i_##NAME) NAME __attribute__((alias("sa_i_" #NAME), visibility("default")));
#define SA_CUSTOM(RT, NAME, PARAMS, ARGS, FAIL) typedef RT(*sa_t_##NAME) PARAMS;
#include "hooks.def"

/* ---- aclnn launches (four-argument phase): exported for the known ops, trampolines for the rest. ---- */
typedef aclnnStatus (*sa_launch_t)(void *, uint64_t, aclOpExecutor *, aclrtStream);

static inline aclnnStatus sa_launch(int fn, void *realp, void *ws, uint64_t wsSize, aclOpExecutor *ex,
                                    aclrtStream st) {
  sa_launch_t real = (sa_launch_t)realp;
  if (__builtin_expect(real == NULL, 0)) return SA_NORT;
  if (sa_skip()) return real(ws, wsSize, ex, st);
  sa_tensor ts[SA_TENSORS];
  uint32_t ntens = sa_launch_tensors(ex, ts);
  sa_check_tensors(fn, ts, ntens);
  sa_depth++;
  aclnnStatus r = real(ws, wsSize, ex, st);
  sa_depth--;
  sa_record(fn, r, SA_U(ws), wsSize, SA_U(ex), SA_U(st), ntens, 0);
  return r;
}

#define SA_LAUNCH(NAME)                                                                                     \
  static aclnnStatus sa_i_##NAME(void *ws, uint64_t wsSize, aclOpExecutor *ex, aclrtStream st) {            \
    return sa_launch(SA_ID_##NAME, sa_real_fn(SA_ID_##NAME), ws, wsSize, ex, st);                           \
  }                                                                                                         \
  extern __typeof(sa_i_##NAME) NAME __attribute__((alias("sa_i_" #NAME), visibility("default")));
#include "hooks.def"

/* ---- The chained exception callback: record the info, then call the application's callback. ---- */
static _Atomic(aclrtExceptionInfoCallback) user_exception_cb;

static uint64_t sa_info_get(int id, aclrtExceptionInfo *info) {
  uint32_t (*get)(const aclrtExceptionInfo *) = (uint32_t(*)(const aclrtExceptionInfo *))sa_real_fn(id);
  return get ? get(info) : 0xFFFFFFFFu;
}

static void sa_exception_cb(aclrtExceptionInfo *info) {
  if (atomic_load_explicit(&sa_mode, memory_order_relaxed) != SA_INERT) {
    sa_record(SA_ID_EXCEPTION, 0, sa_info_get(SA_ID_aclrtGetTaskIdFromExceptionInfo, info),
              sa_info_get(SA_ID_aclrtGetStreamIdFromExceptionInfo, info),
              sa_info_get(SA_ID_aclrtGetThreadIdFromExceptionInfo, info),
              sa_info_get(SA_ID_aclrtGetDeviceIdFromExceptionInfo, info),
              sa_info_get(SA_ID_aclrtGetErrorCodeFromExceptionInfo, info), 0);
  }
  aclrtExceptionInfoCallback cb = atomic_load_explicit(&user_exception_cb, memory_order_acquire);
  if (cb != NULL) cb(info);
}

static aclError sa_i_aclrtSetExceptionInfoCallback(aclrtExceptionInfoCallback callback) {
  sa_t_aclrtSetExceptionInfoCallback real =
      (sa_t_aclrtSetExceptionInfoCallback)sa_real_fn(SA_ID_aclrtSetExceptionInfoCallback);
  if (real == NULL) return SA_NORT;
  if (sa_skip()) return real(callback);
  atomic_store_explicit(&user_exception_cb, callback, memory_order_release);
  sa_depth++;
  aclError r = real(sa_exception_cb);
  sa_depth--;
  sa_record(SA_ID_aclrtSetExceptionInfoCallback, r, SA_U(callback), 0, 0, 0, 0, 0);
  return r;
}
extern __typeof(sa_i_aclrtSetExceptionInfoCallback) aclrtSetExceptionInfoCallback
    __attribute__((alias("sa_i_aclrtSetExceptionInfoCallback"), visibility("default")));

/* ---- aclFinalize: the agent is done with the runtime before it ends (sa_runtime_final). ---- */
static aclError sa_i_aclFinalize(void) {
  sa_t_aclFinalize real = (sa_t_aclFinalize)sa_real_fn(SA_ID_aclFinalize);
  if (real == NULL) return SA_NORT;
  if (sa_skip()) return real();
  sa_runtime_final();
  aclError r = real();
  sa_record(SA_ID_aclFinalize, r, 0, 0, 0, 0, 0, 0);
  return r;
}
extern __typeof(sa_i_aclFinalize) aclFinalize __attribute__((alias("sa_i_aclFinalize"), visibility("default")));

/* ---- aclGetRecentErrMsg: the application still sees a message the agent read first. ---- */
static const char *sa_i_aclGetRecentErrMsg(void) {
  sa_t_aclGetRecentErrMsg real = (sa_t_aclGetRecentErrMsg)sa_real_fn(SA_ID_aclGetRecentErrMsg);
  if (real == NULL) return NULL;
  if (sa_skip()) return real();
  sa_depth++;
  const char *r = sa_err_for_app(real());
  sa_depth--;
  sa_record(SA_ID_aclGetRecentErrMsg, 0, SA_U(r), 0, 0, 0, 0, 0);
  return r;
}
extern __typeof(sa_i_aclGetRecentErrMsg) aclGetRecentErrMsg
    __attribute__((alias("sa_i_aclGetRecentErrMsg"), visibility("default")));

/* ---- Tables by id. ---- */
void *const sa_interposer[SA_NFN] = {
#define SA_HOOK(rt, name, ...) [SA_ID_##name] = (void *)sa_i_##name,
#define SA_CUSTOM(rt, name, ...) [SA_ID_##name] = (void *)sa_i_##name,
#define SA_LAUNCH(name) [SA_ID_##name] = (void *)sa_i_##name,
#include "hooks.def"
};

const char *const sa_names[SA_NFN] = {
#define SA_HOOK(rt, name, ...) [SA_ID_##name] = #name,
#define SA_CUSTOM(rt, name, ...) [SA_ID_##name] = #name,
#define SA_LAUNCH(name) [SA_ID_##name] = #name,
#define SA_REAL(rt, name, ...) [SA_ID_##name] = #name,
#include "hooks.def"
    [SA_ID_EXCEPTION] = "aclrtExceptionCallback",
};

/* ---- Trampoline pool: slot i launches the real op it was bound to by dlsym, as function id
 * SA_TRAMP_BASE + i. Binding is rare (dlsym), so a spinlock guards it; launches read atomics only. ---- */
static struct {
  void *_Atomic real;
  char name[64];
} slots[SA_TRAMP_SLOTS];
static _Atomic int nslots;
static atomic_flag slot_lock = ATOMIC_FLAG_INIT;
static _Atomic uint64_t tramp_exhausted;

/* slot_real is what slot i launches. The application may hand the trampoline to another thread without
 * a barrier, so on a weakly ordered CPU that thread can still see the slot empty: it then takes the
 * binding lock, which orders it after the binding (slots are never rebound). */
static void *slot_real(int i) {
  void *r = atomic_load_explicit(&slots[i].real, memory_order_acquire);
  if (__builtin_expect(r != NULL, 1)) return r;
  while (atomic_flag_test_and_set_explicit(&slot_lock, memory_order_acquire)) sa_cpu_relax();
  r = atomic_load_explicit(&slots[i].real, memory_order_relaxed);
  atomic_flag_clear_explicit(&slot_lock, memory_order_release);
  return r;
}

#define SA_T(a, b, c)                                                                                       \
  static aclnnStatus sa_tramp_##a##b##c(void *ws, uint64_t wsSize, aclOpExecutor *ex, aclrtStream st) {     \
    enum { i = a * 64 + b * 8 + c };                                                                        \
    return sa_launch(SA_TRAMP_BASE + i, slot_real(i), ws, wsSize, ex, st);                                 \
  }
#define SA_T8(a, b) SA_T(a, b, 0) SA_T(a, b, 1) SA_T(a, b, 2) SA_T(a, b, 3) SA_T(a, b, 4) SA_T(a, b, 5) \
                    SA_T(a, b, 6) SA_T(a, b, 7)
#define SA_T64(a) SA_T8(a, 0) SA_T8(a, 1) SA_T8(a, 2) SA_T8(a, 3) SA_T8(a, 4) SA_T8(a, 5) SA_T8(a, 6) SA_T8(a, 7)
SA_T64(0) SA_T64(1) SA_T64(2) SA_T64(3) SA_T64(4) SA_T64(5) SA_T64(6) SA_T64(7)
#undef SA_T
#define SA_T(a, b, c) sa_tramp_##a##b##c,
static const sa_launch_t tramps[SA_TRAMP_SLOTS] = {SA_T64(0) SA_T64(1) SA_T64(2) SA_T64(3) SA_T64(4) SA_T64(5)
                                                       SA_T64(6) SA_T64(7)};

void *sa_tramp_for(const char *name, void *real) {
  void *out = real;
  while (atomic_flag_test_and_set_explicit(&slot_lock, memory_order_acquire)) sa_cpu_relax();
  int n = atomic_load_explicit(&nslots, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    if (atomic_load_explicit(&slots[i].real, memory_order_relaxed) == real) {
      out = (void *)tramps[i];
      goto done;
    }
  }
  if (n < SA_TRAMP_SLOTS) {
    size_t len = strnlen(name, sizeof slots[n].name - 1);
    memcpy(slots[n].name, name, len);
    slots[n].name[len] = 0;
    atomic_store_explicit(&slots[n].real, real, memory_order_release);
    atomic_store_explicit(&nslots, n + 1, memory_order_release);
    out = (void *)tramps[n];
  } else {
    atomic_fetch_add_explicit(&tramp_exhausted, 1, memory_order_relaxed); /* untraced, still correct */
  }
done:
  atomic_flag_clear_explicit(&slot_lock, memory_order_release);
  return out;
}

int sa_tramp_real(const void *addr, void **real) {
  int n = atomic_load_explicit(&nslots, memory_order_acquire);
  for (int i = 0; i < n; i++) {
    if ((const void *)tramps[i] == addr) {
      *real = atomic_load_explicit(&slots[i].real, memory_order_acquire);
      return 1;
    }
  }
  return 0;
}

/* The forking thread may have held the lock in the parent; the child is single-threaded. */
void sa_tramp_after_fork(void) { atomic_flag_clear(&slot_lock); }

const char *sa_fn_name(int id) {
  if (id > 0 && id < SA_NFN) return sa_names[id];
  if (id >= SA_TRAMP_BASE && id < SA_TRAMP_BASE + atomic_load_explicit(&nslots, memory_order_acquire))
    return slots[id - SA_TRAMP_BASE].name;
  return NULL;
}

int sa_nfn(void) { return SA_NFN; }
