/* calls.c: the control calls' one path (swapagent.h, "Every call as one record"). A call with arguments comes
 * here as a record, from swapagent_call or from a v1 function's fixed form (control.c), and its arguments
 * are copied once into an sa_call (sa_go.h): bounded by SWAPAGENT_MAX_*, read through the kernel (a pointer
 * the process cannot read fails the read instead of faulting the host) or, for the caller's own memory
 * (SWAPAGENT_OPT_OWN_MEMORY), with plain loads. The copy is then either queued, as one SA_FN_QUEUED event in
 * the ring that the drain runs in its place, or run in the agent now through its one Go entry (sa_go_run);
 * the outputs (handles, token) go back to the caller's memory by the same rule.
 *
 * Queueing is open where nothing a caller waits for depends on the agent's answers, as the agent says (asked
 * once: sa_go_queueing, enum sa_queueing): always, or until it first moves a storage (sa_queue_close), a
 * region exit there only when each save is below the size the agent said it keeps on device. The saves of a
 * queued exit get handles from a counter of this library and stay resident (resident.c answers their
 * unpacks). No call into Go on the queued path but the first question and a refusal (logged by the agent). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sa.h"
#include "swapagent.h"

/* Implemented in Go (shim/exports.go). */
extern int64_t sa_go_run(uintptr_t call);
extern int sa_go_refused(int kind, char *call, char *detail);
extern int sa_go_queueing(uint64_t *keep_below);

#define SA_MAX_GROUP SWAPAGENT_MAX_GROUP
#define SA_MAX_PTRS SWAPAGENT_MAX_PTRS
#define SA_MAX_TEXT ((size_t)SWAPAGENT_MAX_PTRS * SWAPAGENT_MAX_DESC) /* every description of its longest */
/* Queued saves' handles start far above the engine's own, which count from 1: both kinds can live together. */
#define SA_QUEUED_HANDLES (1LL << 40)

/* A refused call, logged once and counted by the agent: named by its kind, or (call not NULL) by name. */
static int refuse(int kind, const char *detail) { return SA_GO(sa_go_refused(kind, NULL, (char *)detail)); }
int sa_call_refused(const char *call, const char *detail) {
  return SA_GO(sa_go_refused(0, (char *)call, (char *)detail));
}

/* ---- The caller's memory, read and written without trusting it. ---- */

/* The page size, read once (any thread may be first: every one stores the same value). */
static size_t page_size(void) {
  static _Atomic size_t page;
  size_t p = atomic_load_explicit(&page, memory_order_relaxed);
  if (p == 0) atomic_store_explicit(&page, p = (size_t)sysconf(_SC_PAGESIZE), memory_order_relaxed);
  return p;
}

/* Whether the kernel lets this process read and write its own memory through process_vm_readv and
 * process_vm_writev (a seccomp filter may not): 1 yes, 0 no (a pipe then carries the bytes). */
static int kernel_copies(void) {
  static _Atomic int works = -1;
  int w = atomic_load_explicit(&works, memory_order_relaxed);
  if (w < 0) {
    static const char probe = 1;
    char got = 0;
    struct iovec l = {&got, 1}, r = {(void *)&probe, 1};
    w = process_vm_readv(getpid(), &l, 1, &r, 1, 0) == 1 && got == 1;
    if (getenv("SWAPAGENT_TEST_PIPE_COPIES") != NULL) w = 0; /* tests: the pipe on a kernel that has both */
    atomic_store_explicit(&works, w, memory_order_relaxed);
  }
  return w;
}

/* Where process_vm_* is refused, bytes go through a pipe: write(2) of memory the process cannot read, and
 * read(2) into memory it cannot write, fail with EFAULT where a load or store would fault. One pipe, one
 * page at a time (it is empty before each write, so a page always fits), under a lock. */
static pthread_mutex_t pipe_mu = PTHREAD_MUTEX_INITIALIZER;
static int pipe_fd[2] = {-1, -1};

static int pipe_copy(void *dst, const void *src, size_t n) {
  pthread_mutex_lock(&pipe_mu);
  int ok = pipe_fd[0] >= 0 || pipe2(pipe_fd, O_CLOEXEC | O_NONBLOCK) == 0;
  for (size_t done = 0; ok && done < n;) {
    size_t want = n - done < 4096 ? n - done : 4096;
    ssize_t w = write(pipe_fd[1], (const char *)src + done, want);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ok = 0;
      break;
    }
    for (ssize_t got = 0; got < w;) {
      ssize_t r = read(pipe_fd[0], (char *)dst + done + got, (size_t)(w - got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) { /* dst not writable: empty the pipe for the next caller */
        char sink[4096];
        while (got < w && (r = read(pipe_fd[0], sink, (size_t)(w - got))) > 0) got += r;
        ok = 0;
        break;
      }
      got += r;
    }
    done += (size_t)w;
  }
  pthread_mutex_unlock(&pipe_mu);
  return ok;
}

/* Copies the caller's n bytes at src to dst: 1 when they could be read whole. */
static int mem_read(void *dst, const void *src, size_t n) {
  if (n == 0) return 1;
  if (!kernel_copies()) return pipe_copy(dst, src, n);
  struct iovec l = {dst, n}, r = {(void *)src, n};
  return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n;
}

/* Copies n bytes at src to the caller's dst: 1 when it could be written whole. */
int sa_mem_write(void *dst, const void *src, size_t n) {
  if (n == 0) return 1;
  if (!kernel_copies()) return pipe_copy(dst, src, n);
  struct iovec l = {(void *)src, n}, r = {dst, n};
  return process_vm_writev(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n;
}

/* Copies n bytes to the caller's dst: with plain stores for the caller's own memory (own), else through the
 * kernel. 1 when dst took them. */
static int put_out(int own, void *dst, const void *src, size_t n) {
  if (!own) return sa_mem_write(dst, src, n);
  memcpy(dst, src, n);
  return 1;
}

/* Reads the caller's C string at s into buf (cap bytes) as far as its NUL, a page at a time: its length
 * (cap when it runs on), or -1 when it runs into memory that cannot be read. */
static long read_string(const char *s, char *buf, size_t cap) {
  size_t page = page_size(), done = 0;
  while (done < cap) {
    uintptr_t at = (uintptr_t)s + done;
    size_t want = page - at % page;
    if (want > cap - done) want = cap - done;
    if (!mem_read(buf + done, (const void *)at, want)) return -1;
    char *nul = memchr(buf + done, 0, want);
    if (nul != NULL) return nul - buf;
    done += want;
  }
  return (long)cap;
}

/* ---- The copy of a call. ---- */

/* A part of the call to copy (calls.def's SA_PART rows): n elements of size bytes at p, to the copy at off
 * (8-byte aligned). An output (handles) is not read: its room is zeros. An optional one not given
 * (save_flags) is zeros. */
typedef struct {
  const void *p;
  size_t n, size;
  int optional, output;
  const char *what;
  size_t off;
} piece;

enum { NPIECES = SA_NPARTS };
enum { SA_IN, SA_IN_OR_NULL, SA_OUT };                /* calls.def's hows */
enum { SA_NO_GROUP, SA_GROUP, SA_GROUP_OR_NULL };     /* its group rules */
enum { SA_NOW, SA_QUEUEABLE, SA_LIBRARY };            /* and its queue column */
#define SA_P(NAME) (1u << SA_PART_##NAME)

/* Each kind's row of calls.def: the parts it reads, its group rule, whether it may be queued. */
static const struct {
  uint16_t parts;
  uint8_t group, queue;
} kinds[] = {
#define SA_CTL(NAME, number, group, queue, parts) [SWAPAGENT_CALL_##NAME] = {(parts), group, queue},
#include "calls.def"
};
#define NKINDS ((uint32_t)(sizeof kinds / sizeof kinds[0]))
/* swapagent.h's numbers are genabi's copy of the table's: a stale header fails here, not at a caller. */
#define SA_CTL(NAME, number, group, queue, parts) \
  _Static_assert(SWAPAGENT_CALL_##NAME == (number), "swapagent.h is not current with calls.def: make generate");
#include "calls.def"

/* The parts of call c of kind k, laid out (off) after the header; their total size. */
static size_t lay_out(const struct swapagent_call *c, piece *ps) {
  const piece all[NPIECES] = {
#define SA_PART(NAME, field, count, size, how) \
  [SA_PART_##NAME] = {c->field, c->count, size, (how) == SA_IN_OR_NULL, (how) == SA_OUT, #field, 0},
#include "calls.def"
  };
  size_t total = 0;
  for (int i = 0; i < NPIECES; i++) {
    ps[i] = all[i];
    if (!(kinds[c->kind].parts & (1u << i))) ps[i].n = 0;
    ps[i].off = total;
    total += (ps[i].n * ps[i].size + 7) & ~(size_t)7;
  }
  return total;
}

/* Copies the parts given, and the group name into gbuf: through the kernel, in one read where it can (the
 * name as far as the end of its page; one that runs on is read again by read_string), or (own) with plain
 * loads. Returns the name's length (SA_MAX_GROUP+1 when it runs on; 0 for no group), or -1 with *why set. */
static long copy_parts(char *base, char *gbuf, const char *group, const piece *ps, int own, const char **why) {
  if (own) {
    for (int i = 0; i < NPIECES; i++)
      if (ps[i].n > 0 && ps[i].p != NULL && !ps[i].output) memcpy(base + ps[i].off, ps[i].p, ps[i].n * ps[i].size);
    if (group == NULL) return 0;
    size_t len = strnlen(group, SA_MAX_GROUP + 1);
    memcpy(gbuf, group, len);
    return (long)len;
  }
  int whole = 1;
  long glen = 0;
  if (kernel_copies()) {
    struct iovec l[NPIECES + 1], r[NPIECES + 1];
    size_t want = 0, chunk = 0;
    int nv = 0;
    if (group != NULL) {
      chunk = page_size() - (uintptr_t)group % page_size();
      if (chunk > SA_MAX_GROUP + 1) chunk = SA_MAX_GROUP + 1;
      l[nv] = (struct iovec){gbuf, chunk};
      r[nv++] = (struct iovec){(void *)group, chunk};
      want = chunk;
    }
    for (int i = 0; i < NPIECES; i++) {
      const piece *p = &ps[i];
      if (p->n == 0 || p->p == NULL || p->output) continue;
      l[nv] = (struct iovec){base + p->off, p->n * p->size};
      r[nv++] = (struct iovec){(void *)p->p, p->n * p->size};
      want += p->n * p->size;
    }
    whole = nv == 0 || process_vm_readv(getpid(), l, (unsigned long)nv, r, (unsigned long)nv, 0) == (ssize_t)want;
    if (group != NULL && whole) {
      char *nul = memchr(gbuf, 0, chunk);
      glen = nul != NULL ? nul - gbuf : chunk == SA_MAX_GROUP + 1 ? (long)chunk : read_string(group, gbuf, SA_MAX_GROUP + 1);
    } else if (group != NULL) {
      glen = read_string(group, gbuf, SA_MAX_GROUP + 1); /* which one could not be read */
    }
  } else {
    for (int i = 0; i < NPIECES && whole; i++)
      if (ps[i].n > 0 && ps[i].p != NULL && !ps[i].output)
        whole = mem_read((char *)base + ps[i].off, ps[i].p, ps[i].n * ps[i].size);
    if (group != NULL) glen = read_string(group, gbuf, SA_MAX_GROUP + 1);
  }
  if (glen < 0) {
    *why = "group: not readable memory, or it runs into unreadable memory";
    return -1;
  }
  if (!whole) {
    *why = "an array or the text is not readable memory";
    return -1;
  }
  return glen;
}

/* Frees copy d unless it is the caller's local buffer. */
static void drop(sa_call *d, const void *local) {
  if ((void *)d != local) free(d);
}

/* Copies call c (kind known): the limits and NULLs first, then the parts and the group. NULL on a refusal
 * (*rc its code). The copy goes into local (local_size bytes) when it fits, else into malloc'd memory:
 * drop frees it either way. */
static sa_call *copy_call(const struct swapagent_call *c, int own, int *rc, void *local, size_t local_size) {
  char why[96];
  if (kinds[c->kind].group == SA_GROUP && c->group == NULL) {
    *rc = refuse((int)c->kind, "NULL group");
    return NULL;
  }
  piece ps[NPIECES];
  size_t total = lay_out(c, ps);
  for (int i = 0; i < NPIECES; i++) {
    const piece *p = &ps[i];
    if (p->n > (p->size == 1 ? SA_MAX_TEXT : SA_MAX_PTRS)) {
      snprintf(why, sizeof why, "%s: %zu entries, above the limit of %zu", p->what, p->n,
               p->size == 1 ? SA_MAX_TEXT : (size_t)SA_MAX_PTRS);
      *rc = refuse((int)c->kind, why);
      return NULL;
    }
    if (p->n > 0 && p->p == NULL && !p->optional) {
      snprintf(why, sizeof why, "NULL %s with %zu entries", p->what, p->n);
      *rc = refuse((int)c->kind, why);
      return NULL;
    }
  }
  if (c->n_desc > 0 && c->text == NULL && (kinds[c->kind].parts & SA_P(DESC_PTRS))) {
    *rc = refuse((int)c->kind, "NULL text with n_desc > 0");
    return NULL;
  }
  size_t need = sizeof(sa_call) + total + SA_MAX_GROUP + 2;
  sa_call *d = need <= local_size ? local : malloc(need);
  if (d == NULL) {
    *rc = SWAPAGENT_ERUNTIME;
    return NULL;
  }
  memset(d, 0, sizeof *d);
  char *base = (char *)d->data, *gbuf = base + total;
  for (int i = 0; i < NPIECES; i++) /* outputs and optional parts not given: zeros */
    if (ps[i].n > 0 && (ps[i].p == NULL || ps[i].output)) memset(base + ps[i].off, 0, ps[i].n * ps[i].size);
  const char *bad = NULL;
  long glen = copy_parts(base, gbuf, kinds[c->kind].group != SA_NO_GROUP ? c->group : NULL, ps, own, &bad);
  if (glen < 0) {
    drop(d, local);
    *rc = refuse((int)c->kind, bad);
    return NULL;
  }
  gbuf[glen] = 0;
  d->kind = c->kind;
  d->has_group = c->group != NULL && kinds[c->kind].group != SA_NO_GROUP;
  d->has_text = c->text != NULL && (kinds[c->kind].parts & SA_P(TEXT));
  d->group_off = total;
  d->group_len = (uint64_t)glen;
  for (int i = 0; i < NPIECES; i++) {
    d->part_off[i] = ps[i].off;
    d->part_n[i] = ps[i].n;
  }
  d->n_pos = c->n_positional;
  d->ptr = c->ptr;
  d->nbytes = c->nbytes;
  d->handle = c->handle;
  d->others = -1; /* GUARD_RELEASE: unknown unless counts[0] says */
  if (c->kind == SWAPAGENT_CALL_GUARD_RELEASE && c->counts != NULL &&
      !(own ? (d->others = c->counts[0], 1) : mem_read(&d->others, c->counts, sizeof d->others))) {
    drop(d, local);
    *rc = refuse((int)c->kind, "counts: not readable memory");
    return NULL;
  }
  if (d->others < 0) d->others = -1;
  return d;
}

/* A part of a copy, where the copy says it is (the 64-bit ones), and its entries. */
static uint64_t *copy_part(sa_call *d, int part) { return d->data + d->part_off[part] / 8; }
#define N_SAVE(d) ((d)->part_n[SA_PART_SAVE_PTRS])

/* ---- Queueing. ---- */

/* queue_on: 0 until the agent is asked, then its answer (enum sa_queueing), closed for good by sa_queue_close. */
enum { QUEUE_UNKNOWN = 0, QUEUE_CLOSED = SA_QUEUE_UNTIL_MOVE + 1 };
static _Atomic int queue_on;
static uint64_t keep_below;      /* SA_QUEUE_UNTIL_MOVE: a region exit whose saves are all below it moves nothing */
static _Atomic int queue_inflight; /* calls between their look at queue_on and their event in the ring */
static _Atomic int64_t queue_next;

/* What queued calls do now: asks the agent the first time. */
static int queue_state(void) {
  int on = atomic_load_explicit(&queue_on, memory_order_acquire);
  if (on == QUEUE_UNKNOWN) {
    uint64_t below = 0;
    on = SA_GO(sa_go_queueing(&below));
    keep_below = below;
    if (on != SA_QUEUE_ALL && on != SA_QUEUE_UNTIL_MOVE) on = SA_QUEUE_NONE; /* never QUEUE_UNKNOWN */
    int expected = QUEUE_UNKNOWN;
    if (!atomic_compare_exchange_strong(&queue_on, &expected, on)) on = expected;
  }
  return on;
}

/* Ends queueing that lasts until the first move for good, and waits until every call that looked at it while
 * it was open has its event in the ring: the agent is about to move a storage (its next drain runs those calls
 * first). */
void sa_queue_close(void) {
  int expected = QUEUE_UNKNOWN; /* not asked yet: it never opens */
  if (!atomic_compare_exchange_strong(&queue_on, &expected, QUEUE_CLOSED) && expected == SA_QUEUE_UNTIL_MOVE)
    atomic_compare_exchange_strong(&queue_on, &expected, QUEUE_CLOSED);
  while (atomic_load(&queue_inflight) != 0) sa_cpu_relax();
}

void sa_call_free(uintptr_t d) { free((void *)d); }

static int queueable(uint32_t kind) { return kinds[kind].queue == SA_QUEUEABLE; }

/* Puts copy d in the ring when queueing takes it now: 1 when queued (its saves got handles, written to out
 * by put, and stay resident), 0 when it must run now, -1 when the handles could not be written (nothing
 * queued). The drain may free d as soon as it is in the ring: nothing reads it after. From its look at
 * queue_on until its event is in the ring the call counts in flight, which sa_queue_close waits for
 * (sequentially consistent: the count and the look must not pass each other). */
static int queue(sa_call *d, int64_t *out, int own) {
  int may_move = 0;
  if (queue_state() == SA_QUEUE_UNTIL_MOVE) {
    const uint64_t *sizes = copy_part(d, SA_PART_SAVE_NBYTES);
    for (uint64_t i = 0; i < N_SAVE(d) && !may_move; i++) may_move = sizes[i] >= keep_below;
  }
  atomic_fetch_add(&queue_inflight, 1);
  int on = atomic_load(&queue_on), rc = 1;
  if (!(on == SA_QUEUE_ALL || (on == SA_QUEUE_UNTIL_MOVE && !may_move))) {
    rc = 0;
  } else if (N_SAVE(d) > 0) {
    d->first = SA_QUEUED_HANDLES + atomic_fetch_add_explicit(&queue_next, (int64_t)N_SAVE(d), memory_order_relaxed) + 1;
    int64_t *handles = (int64_t *)copy_part(d, SA_PART_HANDLES);
    for (uint64_t i = 0; i < N_SAVE(d); i++) handles[i] = d->first + (int64_t)i;
    size_t bytes = (size_t)N_SAVE(d) * 8;
    if (!put_out(own, out, handles, bytes)) {
      rc = -1;
    } else { /* What stays on device stays where it is until the agent forgets the handle. */
      sa_resident_set_n(d->first, copy_part(d, SA_PART_SAVE_PTRS), N_SAVE(d));
    }
  }
  if (rc == 1) sa_record(SA_FN_QUEUED, 0, (uint64_t)(uintptr_t)d, d->kind, 0, 0, 0, 0);
  atomic_fetch_sub(&queue_inflight, 1);
  return rc;
}

/* ---- The one path. ---- */

/* The stack buffer a call's copy takes when it fits: the group's room and a few hundred pointers. */
enum { LOCAL_COPY = 8 << 10 };

int64_t sa_call_run(const struct swapagent_call *c, uint32_t opts) {
  if (sa_refuse()) return SWAPAGENT_EDISABLED;
  if (c->kind == 0 || c->kind >= NKINDS) return refuse(0, "unknown kind");
  if (c->kind == SWAPAGENT_CALL_QUEUEING) { /* the one kind the library answers (SA_LIBRARY) */
    int on = queue_state();
    return on == SA_QUEUE_ALL || on == SA_QUEUE_UNTIL_MOVE;
  }
  int own = (opts & SWAPAGENT_OPT_OWN_MEMORY) != 0, rc = 0;
  int may_queue = (opts & SWAPAGENT_OPT_QUEUE) && queueable(c->kind);
  /* A copy that is not queued lives on this stack: a malloc and free per call would hand the host's own
   * next allocations the chunk just freed, moving where its objects land (and the trace's pointers with them). */
  _Alignas(sa_call) char local[LOCAL_COPY];
  sa_call *d = copy_call(c, own, &rc, local, may_queue ? 0 : sizeof local);
  if (d == NULL) return rc;
  /* The outputs must be writable before the agent is asked: a save the caller never hears of would leak. */
  int64_t *handles = (int64_t *)copy_part(d, SA_PART_HANDLES);
  size_t hbytes = (size_t)N_SAVE(d) * 8;
  int64_t zero = 0;
  if ((N_SAVE(d) > 0 && !put_out(own, c->handles, handles, hbytes)) ||
      (c->kind == SWAPAGENT_CALL_GUARD_RELEASE && c->token != NULL && !own && !sa_mem_write(c->token, &zero, 8))) {
    drop(d, local);
    return refuse((int)c->kind, "handles or token: not writable memory");
  }
  int queued = may_queue ? queue(d, c->handles, own) : 0;
  if (queued != 0) {
    if (queued == 1) return SWAPAGENT_OK; /* d is the drain's now */
    drop(d, local);
    return refuse((int)c->kind, "handles: no longer writable memory");
  }
  int64_t r = SA_GO(sa_go_run((uintptr_t)d));
  int wrote = N_SAVE(d) == 0 || put_out(own, c->handles, handles, hbytes);
  if (c->kind == SWAPAGENT_CALL_GUARD_RELEASE && c->token != NULL)
    wrote &= put_out(own, c->token, &d->token, sizeof d->token);
  drop(d, local);
  return wrote ? r : refuse((int)c->kind, "handles or token: no longer writable memory");
}

SA_EXPORT int64_t swapagent_call(const struct swapagent_call *call, uint32_t opts) {
  if (sa_refuse()) return SWAPAGENT_EDISABLED;
  if (call == NULL) return refuse(0, "NULL call");
  /* The record as far as its size says and this library knows; the rest is zeros. */
  struct swapagent_call c;
  memset(&c, 0, sizeof c);
  uint32_t size = 0;
  if (!((opts & SWAPAGENT_OPT_OWN_MEMORY) ? (size = call->size, 1) : mem_read(&size, &call->size, sizeof size)))
    return refuse(0, "the call is not readable memory");
  if (size < offsetof(struct swapagent_call, group) || size > 65536) return refuse(0, "call: bad size");
  size_t take = size < sizeof c ? size : sizeof c;
  if (!((opts & SWAPAGENT_OPT_OWN_MEMORY) ? (memcpy(&c, call, take), 1) : mem_read(&c, call, take)))
    return refuse(0, "the call is not readable memory");
  return sa_call_run(&c, opts);
}
