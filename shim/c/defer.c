/* defer.c: the deferred control calls of swapagent.h. Where nothing a caller waits for depends on the
 * agent's answers (policy off; policy safe while no storage has moved and a region end saves only storages
 * below SWAPAGENT_MIN_BYTES, which stay), a region's enter and end and its backward's enter and exit are
 * answered here: their arguments are copied in one read through the kernel (process_vm_readv: a bad pointer
 * fails the read instead of faulting the host; the _direct forms, for a native caller whose arrays are its
 * own, copy them with plain loads: that read is microseconds, most of the call), the saves get handles from
 * a counter of this library and stay resident (resident.c answers their unpacks), and the copy goes into
 * the ring as one SA_FN_DEFER event. The drain runs it in its place, in host order, as the plain call
 * (agent.Deferred). Under safe, a call that may move something runs in the agent at once instead
 * (sa_go_run_deferred), and before the agent first moves a storage it ends deferral for good
 * (sa_defer_close): the drain never runs a call that would call the framework's storage ops. No call into
 * Go on the deferred path but the first swapagent_deferred and a refusal (logged by the agent). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sa.h"
#include "swapagent.h"

/* Implemented in Go (shim/exports.go). */
extern int sa_go_deferred(uint64_t *min_bytes);
extern int sa_go_defer_refused(char *call, char *detail);
extern int64_t sa_go_run_deferred(uintptr_t d);

#define SA_MAX_GROUP SWAPAGENT_MAX_GROUP
#define SA_MAX_PTRS SWAPAGENT_MAX_PTRS
#define SA_MAX_TEXT ((size_t)SWAPAGENT_MAX_PTRS * SWAPAGENT_MAX_DESC) /* every description of its longest */
/* Deferred handles start far above the engine's own, which count from 1: both kinds can live together. */
#define SA_DEFER_HANDLES (1LL << 40)

/* What the deferred calls do (swapagent_deferred asks the agent once). */
enum { DEFER_UNKNOWN, DEFER_OFF_POLICY, DEFER_NONE, DEFER_SAFE, DEFER_SAFE_CLOSED };
static _Atomic int defer_on;
static uint64_t defer_min_bytes;  /* under safe: a region end whose saves are all below it moves nothing */
static _Atomic int defer_inflight; /* calls between their look at defer_on and their event in the ring (finish) */
static _Atomic int64_t defer_next;

static const char *const call_names[] = {"", "region_enter_deferred", "region_end_deferred",
                                         "backward_enter_deferred", "backward_exit_deferred"};

/* The kernel lets this process read its own memory through process_vm_readv (a seccomp filter may not). */
static int self_read_works(void) {
  static const char probe = 1;
  char got = 0;
  struct iovec l = {&got, 1}, r = {(void *)&probe, 1};
  return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == 1 && got == 1;
}

SA_EXPORT int swapagent_deferred(void) {
  if (sa_refuse()) return SWAPAGENT_EDISABLED;
  int on = atomic_load_explicit(&defer_on, memory_order_acquire);
  if (on == DEFER_UNKNOWN) {
    uint64_t min = 0;
    int mode = SA_GO(sa_go_deferred(&min));
    defer_min_bytes = min;
    on = !self_read_works() ? DEFER_NONE : mode == 1 ? DEFER_OFF_POLICY : mode == 2 ? DEFER_SAFE : DEFER_NONE;
    int expected = DEFER_UNKNOWN;
    if (!atomic_compare_exchange_strong(&defer_on, &expected, on)) on = expected;
  }
  return on != DEFER_NONE;
}

/* Ends deferral under safe for good, and waits until every call that looked at it while it was open has its
 * event in the ring: the agent is about to move a storage (its next drain runs those calls first). */
void sa_defer_close(void) {
  int expected = DEFER_UNKNOWN; /* not asked yet: it never opens */
  if (!atomic_compare_exchange_strong(&defer_on, &expected, DEFER_SAFE_CLOSED) && expected == DEFER_SAFE)
    atomic_compare_exchange_strong(&defer_on, &expected, DEFER_SAFE_CLOSED);
  while (atomic_load(&defer_inflight) != 0) sa_cpu_relax();
}

void sa_deferred_free(uintptr_t d) { free((void *)d); }

static int refuse(int call, const char *detail) {
  return SA_GO(sa_go_defer_refused((char *)call_names[call], (char *)detail));
}

/* A piece of the caller's memory to copy: n elements of size bytes at p, into the copy at off (rounded up
 * to 8 bytes); zeros where p is NULL and the piece is optional. */
typedef struct {
  const void *p;
  size_t n, size;
  int optional;
  const char *what;
  size_t off;
} piece;

/* The page size, read once (any thread may be first: every one stores the same value). */
static size_t page_size(void) {
  static _Atomic size_t page;
  size_t p = atomic_load_explicit(&page, memory_order_relaxed);
  if (p == 0) atomic_store_explicit(&page, p = (size_t)sysconf(_SC_PAGESIZE), memory_order_relaxed);
  return p;
}

/* Reads the group name into buf (SA_MAX_GROUP+1 bytes) as far as its NUL, in pieces bounded by its pages;
 * its length (SA_MAX_GROUP+1: it ran on), or -1 when it runs into memory that cannot be read. */
static long read_group(const char *g, char *buf) {
  size_t page = page_size(), done = 0;
  while (done < SA_MAX_GROUP + 1) {
    uintptr_t at = (uintptr_t)g + done;
    size_t want = page - at % page;
    if (want > SA_MAX_GROUP + 1 - done) want = SA_MAX_GROUP + 1 - done;
    struct iovec l = {buf + done, want}, r = {(void *)at, want};
    if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != (ssize_t)want) return -1;
    char *nul = memchr(buf + done, 0, want);
    if (nul != NULL) return nul - buf;
    done += want;
  }
  return SA_MAX_GROUP + 1;
}

/* The pieces given (an optional one not given is zeros already) and the name copied with plain loads (a
 * _direct call: its caller vouches for the memory): the name's length, SA_MAX_GROUP+1 when it runs on. */
static long copy_direct(char *base, char *gbuf, const char *group, const piece *ps, int np) {
  for (int i = 0; i < np; i++)
    if (ps[i].n > 0 && ps[i].p != NULL) memcpy(base + ps[i].off, ps[i].p, ps[i].n * ps[i].size);
  size_t len = strnlen(group, SA_MAX_GROUP + 1);
  memcpy(gbuf, group, len);
  return (long)len;
}

/* The pieces given and the name copied in one read through the kernel, which takes the name as far as the end of
 * its page (a name that runs on is read again by read_group): the name's length (SA_MAX_GROUP+1 when it runs
 * on), or -1 when memory could not be read (*why says which). */
static long copy_checked(char *base, char *gbuf, const char *group, const piece *ps, int np, const char **why) {
  size_t chunk = page_size() - (uintptr_t)group % page_size();
  if (chunk > SA_MAX_GROUP + 1) chunk = SA_MAX_GROUP + 1;
  struct iovec l[8] = {{gbuf, chunk}}, r[8] = {{(void *)group, chunk}};
  size_t want = chunk;
  int nv = 1;
  for (int i = 0; i < np; i++) {
    const piece *p = &ps[i];
    if (p->n == 0 || p->p == NULL) continue;
    l[nv] = (struct iovec){base + p->off, p->n * p->size};
    r[nv] = (struct iovec){(void *)p->p, p->n * p->size};
    want += p->n * p->size;
    nv++;
  }
  long glen = -1;
  if (process_vm_readv(getpid(), l, (unsigned long)nv, r, (unsigned long)nv, 0) == (ssize_t)want) {
    char *nul = memchr(gbuf, 0, chunk);
    glen = nul != NULL ? nul - gbuf : chunk == SA_MAX_GROUP + 1 ? (long)chunk : read_group(group, gbuf);
  } else if (read_group(group, gbuf) >= 0) { /* which one could not be read */
    *why = "an array or the description text is not readable memory";
    return -1;
  }
  if (glen < 0) *why = "group: not readable memory, or it runs into unreadable memory";
  return glen;
}

/* Copies a call's arguments: the pieces (after the header) and the group name (after them), through the
 * kernel or (direct) with plain loads. NULL with n > 0, n above the limits and (through the kernel)
 * unreadable memory are refused: *rc gets the code. */
static sa_deferred *copy_call(int call, const char *group, piece *ps, int np, int direct, int *rc) {
  if (group == NULL) {
    *rc = refuse(call, "NULL group");
    return NULL;
  }
  size_t total = 0;
  for (int i = 0; i < np; i++) {
    piece *p = &ps[i];
    if (p->n > (p->size == 1 ? SA_MAX_TEXT : SA_MAX_PTRS) || (p->n > 0 && p->p == NULL && !p->optional)) {
      *rc = refuse(call, p->what);
      return NULL;
    }
    p->off = total;
    total += (p->n * p->size + 7) & ~(size_t)7;
  }
  sa_deferred *d = malloc(sizeof *d + total + SA_MAX_GROUP + 2);
  if (d == NULL) {
    *rc = SWAPAGENT_ERUNTIME;
    return NULL;
  }
  char *base = (char *)d->data, *gbuf = base + total;
  for (int i = 0; i < np; i++) /* an optional piece not given: zeros */
    if (ps[i].n > 0 && ps[i].p == NULL) memset(base + ps[i].off, 0, ps[i].n * ps[i].size);
  const char *why = NULL;
  long glen = direct ? copy_direct(base, gbuf, group, ps, np) : copy_checked(base, gbuf, group, ps, np, &why);
  if (glen < 0) {
    free(d);
    *rc = refuse(call, why);
    return NULL;
  }
  gbuf[glen] = 0;
  d->call = (uint32_t)call;
  d->group_len = (uint64_t)glen;
  d->has_text = 0;
  d->n_ptrs = d->n_pos = d->n_save = d->n_desc = d->text_len = 0;
  d->first = 0;
  return d;
}

/* SWAPAGENT_OK when the deferred calls are answered, else the code that refuses a call (nothing done). */
static int answered(void) {
  if (sa_refuse()) return SWAPAGENT_EDISABLED;
  int on = atomic_load(&defer_on);
  return on == DEFER_NONE || on == DEFER_UNKNOWN ? SWAPAGENT_ESTATE : SWAPAGENT_OK;
}

/* Ends a call with its copy d: queued for the drain while deferral is open and, under safe, nothing of the
 * call may move (may_move); else run in the agent at once. From its look at defer_on until its event is in
 * the ring the call counts in flight, which sa_defer_close waits for (sequentially consistent: the count
 * and the look must not pass each other). A queued region end's saves (bases) become resident. Returns the
 * call's answer: a queued one OK (a region end its first handle), else what the run gives. */
static int64_t finish(sa_deferred *d, int may_move, const uint64_t *bases) {
  atomic_fetch_add(&defer_inflight, 1);
  int on = atomic_load(&defer_on);
  if (on == DEFER_SAFE_CLOSED || (on == DEFER_SAFE && may_move)) {
    atomic_fetch_sub(&defer_inflight, 1); /* first: the run may close deferral, which waits for calls in flight */
    return SA_GO(sa_go_run_deferred((uintptr_t)d));
  }
  /* What stays on device stays where it is until the agent forgets the handle. */
  if (bases != NULL) sa_resident_set_n(d->first, bases, d->n_save);
  int64_t answer = d->call == SA_DEFER_END ? d->first : SWAPAGENT_OK;
  sa_record(SA_FN_DEFER, 0, (uint64_t)(uintptr_t)d, d->call, 0, 0, 0, 0);
  atomic_fetch_sub(&defer_inflight, 1);
  return answer;
}

static int region_enter(const char *group, const uintptr_t *input_ptrs, size_t n, size_t n_positional,
                        const char *descs_text, size_t text_len, int direct) {
  int rc = answered();
  if (rc != SWAPAGENT_OK) return rc;
  piece ps[] = {{input_ptrs, n, 8, 0, "input_ptrs: NULL with n > 0, or n above 262144", 0},
                {descs_text, text_len, 1, 0, "descs_text: NULL with text_len > 0, or too long", 0}};
  sa_deferred *d = copy_call(SA_DEFER_ENTER, group, ps, 2, direct, &rc);
  if (d == NULL) return rc;
  d->n_ptrs = n;
  d->n_pos = n_positional;
  d->has_text = descs_text != NULL;
  d->text_len = text_len;
  return (int)finish(d, 0, NULL);
}

static int64_t region_end(const char *group, const uintptr_t *output_ptrs, size_t n_out, const uintptr_t *save_ptrs,
                          const size_t *save_nbytes, const uint32_t *save_flags, size_t n_save,
                          const uintptr_t *desc_ptrs, size_t n_desc, const char *descs_text, size_t text_len,
                          int direct) {
  int rc = answered();
  if (rc != SWAPAGENT_OK) return rc;
  if (n_desc > 0 && descs_text == NULL) return refuse(SA_DEFER_END, "descs_text: NULL with n_desc > 0");
  /* In sa_deferred's order; flags NULL: all 0. */
  piece ps[] = {{output_ptrs, n_out, 8, 0, "output_ptrs: NULL with n_out > 0, or n_out above 262144", 0},
                {save_ptrs, n_save, 8, 0, "save_ptrs: NULL with n_save > 0, or n_save above 262144", 0},
                {save_nbytes, n_save, 8, 0, "save_nbytes: NULL with n_save > 0", 0},
                {desc_ptrs, n_desc, 8, 0, "desc_ptrs: NULL with n_desc > 0, or n_desc above 262144", 0},
                {save_flags, n_save, 4, 1, "save_flags", 0},
                {descs_text, text_len, 1, 0, "descs_text: NULL with text_len > 0, or too long", 0}};
  sa_deferred *d = copy_call(SA_DEFER_END, group, ps, 6, direct, &rc);
  if (d == NULL) return rc;
  d->n_ptrs = n_out;
  d->n_save = n_save;
  d->n_desc = n_desc;
  d->has_text = descs_text != NULL;
  d->text_len = text_len;
  if (n_save > 0)
    d->first = SA_DEFER_HANDLES + atomic_fetch_add_explicit(&defer_next, (int64_t)n_save, memory_order_relaxed) + 1;
  /* Under safe a storage at or above the threshold may move at this exit: the agent decides now (finish). */
  const uint64_t *sizes = (const uint64_t *)((char *)d->data + ps[2].off);
  int may_move = 0;
  if (atomic_load_explicit(&defer_on, memory_order_relaxed) == DEFER_SAFE)
    for (size_t i = 0; i < n_save && !may_move; i++) may_move = sizes[i] >= defer_min_bytes;
  return finish(d, may_move, (const uint64_t *)((char *)d->data + ps[1].off));
}

static int defer_group_call(int call, const char *group, int direct) {
  int rc = answered();
  if (rc != SWAPAGENT_OK) return rc;
  sa_deferred *d = copy_call(call, group, NULL, 0, direct, &rc);
  if (d == NULL) return rc;
  return (int)finish(d, 0, NULL);
}

/* The exports: each checked form and its _direct twin (swapagent.h). */
SA_EXPORT int swapagent_region_enter_deferred(const char *group, const uintptr_t *input_ptrs, size_t n,
                                              size_t n_positional, const char *descs_text, size_t text_len) {
  return region_enter(group, input_ptrs, n, n_positional, descs_text, text_len, 0);
}

SA_EXPORT int swapagent_region_enter_deferred_direct(const char *group, const uintptr_t *input_ptrs, size_t n,
                                                     size_t n_positional, const char *descs_text, size_t text_len) {
  return region_enter(group, input_ptrs, n, n_positional, descs_text, text_len, 1);
}

SA_EXPORT int64_t swapagent_region_end_deferred(const char *group, const uintptr_t *output_ptrs, size_t n_out,
                                                const uintptr_t *save_ptrs, const size_t *save_nbytes,
                                                const uint32_t *save_flags, size_t n_save,
                                                const uintptr_t *desc_ptrs, size_t n_desc, const char *descs_text,
                                                size_t text_len) {
  return region_end(group, output_ptrs, n_out, save_ptrs, save_nbytes, save_flags, n_save, desc_ptrs, n_desc,
                    descs_text, text_len, 0);
}

SA_EXPORT int64_t swapagent_region_end_deferred_direct(const char *group, const uintptr_t *output_ptrs, size_t n_out,
                                                       const uintptr_t *save_ptrs, const size_t *save_nbytes,
                                                       const uint32_t *save_flags, size_t n_save,
                                                       const uintptr_t *desc_ptrs, size_t n_desc,
                                                       const char *descs_text, size_t text_len) {
  return region_end(group, output_ptrs, n_out, save_ptrs, save_nbytes, save_flags, n_save, desc_ptrs, n_desc,
                    descs_text, text_len, 1);
}

SA_EXPORT int swapagent_backward_enter_deferred(const char *group) {
  return defer_group_call(SA_DEFER_BACKWARD_ENTER, group, 0);
}

SA_EXPORT int swapagent_backward_enter_deferred_direct(const char *group) {
  return defer_group_call(SA_DEFER_BACKWARD_ENTER, group, 1);
}

SA_EXPORT int swapagent_backward_exit_deferred(const char *group) {
  return defer_group_call(SA_DEFER_BACKWARD_EXIT, group, 0);
}

SA_EXPORT int swapagent_backward_exit_deferred_direct(const char *group) {
  return defer_group_call(SA_DEFER_BACKWARD_EXIT, group, 1);
}
