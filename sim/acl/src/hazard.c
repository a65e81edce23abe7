/* hazard.c: the hazard checker (ACLSIM_CHECK_HAZARDS=1), after compute-sanitizer's racecheck/synccheck.
 * Every device or pinned-host access of a queued task is checked when it is ENQUEUED against earlier
 * accesses to overlapping bytes by other streams that are not ordered before it, so a missing event or
 * sync is reported whether or not the race manifested in this run. Tasks still run exactly as before.
 *
 * Ordering is vector clocks: stream s keeps V_s; a task enqueued on s first joins the host clock H, then
 * takes epoch ++V_s[s]. A record copies V_s into the event, a wait joins the event's copy into V_s, and a
 * host wait joins into H what it saw complete. An access p is ordered before task t iff
 * p.epoch <= V_t[p.stream]. There is one H for the whole process, not one per host thread.
 *
 * Shadow records sit in buckets per 2 MiB chunk of their allocation, so a small allocation has a bucket
 * of its own (a record is in each chunk it spans; a bucket entry carries the record's generation, so the
 * entries of a forgotten record go stale). Records the host has seen complete (epoch <= H[stream]) are
 * dropped when met and by a periodic sweep, and a record covered by a later access ordered after it is
 * superseded (whatever races the old access races the new one), so the live set stays about the working
 * set between syncs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aclsim.h"

#define CHUNK (2ull << 20)
#define PRINT_CAP 100

struct rec {
  uintptr_t base, lo, hi; /* base: the allocation's, which anchors its chunks */
  uint64_t epoch;
  uint32_t stream, task, gen;
  bool write;
  const char *name; /* a static string */
};

struct ref {
  uint32_t idx, gen;
};

struct bucket {
  uintptr_t chunk; /* the chunk's first address */
  struct ref *v;
  size_t n, cap;
  bool used;
};

struct sclk {
  struct sim_vc v;
  uint64_t hgen; /* the H generation V last joined */
};

struct pair {
  uint32_t stream, task;
};

static pthread_mutex_t hz_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  struct sim_vc host; /* H */
  uint64_t hgen;      /* bumped whenever H grows, so a stream joins it only when it changed */
  struct sclk *clk;   /* V_s by stream id */
  size_t nclk;
  struct rec *recs;
  size_t nrecs, caprecs;
  uint32_t *freel;
  size_t nfree, capfree;
  struct bucket *tab; /* open addressing by chunk */
  size_t tabcap, tabused;
  size_t refs, swept; /* bucket entries now and right after the last sweep */
  struct pair *seen;  /* earlier tasks already reported against the current one */
  size_t nseen, capseen;
  uint64_t count;
} Z;

static bool reserve(void *pp, size_t *cap, size_t need, size_t elem) {
  void **p = pp;
  if (need <= *cap) return true;
  size_t ncap = *cap ? *cap * 2 : 16;
  while (ncap < need) ncap *= 2;
  void *q = realloc(*p, ncap * elem);
  if (!q) return false;
  *p = q;
  *cap = ncap;
  return true;
}

/* ---- vector clocks ---- */
static uint64_t vc_get(const struct sim_vc *c, uint32_t i) { return i < c->n ? c->v[i] : 0; }

static bool vc_fit(struct sim_vc *c, uint32_t n) {
  if (n <= c->n) return true;
  uint64_t *v = realloc(c->v, n * sizeof *v);
  if (!v) return false;
  memset(v + c->n, 0, (n - c->n) * sizeof *v);
  c->v = v;
  c->n = n;
  return true;
}

/* vc_join: d = max(d, s) elementwise; true when d grew. */
static bool vc_join(struct sim_vc *d, const struct sim_vc *s) {
  bool grew = false;
  if (!vc_fit(d, s->n)) return false;
  for (uint32_t i = 0; i < s->n; i++)
    if (s->v[i] > d->v[i]) {
      d->v[i] = s->v[i];
      grew = true;
    }
  return grew;
}

static void vc_copy(struct sim_vc *d, const struct sim_vc *s) {
  if (!vc_fit(d, s->n)) return;
  if (s->n) memcpy(d->v, s->v, s->n * sizeof *d->v);
  if (d->n > s->n) memset(d->v + s->n, 0, (d->n - s->n) * sizeof *d->v);
}

/* begin starts a task on stream: V_s joins H, then ticks. NULL when out of host memory. */
static struct sclk *begin(uint32_t stream) {
  if (stream >= Z.nclk) {
    size_t n = (size_t)stream + 1;
    struct sclk *c = realloc(Z.clk, n * sizeof *c);
    if (!c) return NULL;
    memset(c + Z.nclk, 0, (n - Z.nclk) * sizeof *c);
    Z.clk = c;
    Z.nclk = n;
  }
  struct sclk *c = &Z.clk[stream];
  if (c->hgen != Z.hgen) {
    vc_join(&c->v, &Z.host);
    c->hgen = Z.hgen;
  }
  if (!vc_fit(&c->v, stream + 1)) return NULL;
  c->v.v[stream]++;
  return c;
}

static void host_join(const struct sim_vc *v) {
  if (vc_join(&Z.host, v)) Z.hgen++;
}

/* ---- shadow records ---- */
static size_t slot_of(uintptr_t chunk, size_t cap) {
  return (size_t)(((chunk >> 12) * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static uintptr_t first_chunk(uintptr_t base, uintptr_t lo) { return base + ((lo - base) & ~(CHUNK - 1)); }

static void tab_grow(void) {
  size_t ncap = Z.tabcap ? Z.tabcap * 2 : 64;
  struct bucket *t = calloc(ncap, sizeof *t);
  if (!t) return;
  for (size_t i = 0; i < Z.tabcap; i++) {
    if (!Z.tab[i].used) continue;
    size_t j = slot_of(Z.tab[i].chunk, ncap);
    while (t[j].used) j = (j + 1) & (ncap - 1);
    t[j] = Z.tab[i];
  }
  free(Z.tab);
  Z.tab = t;
  Z.tabcap = ncap;
}

static struct bucket *bucket_of(uintptr_t chunk, bool add) {
  if (add && (Z.tabused + 1) * 2 > Z.tabcap) tab_grow();
  if (!Z.tabcap || (add && Z.tabused + 1 >= Z.tabcap)) return NULL; /* keep one slot free: probes end */
  for (size_t i = slot_of(chunk, Z.tabcap);; i = (i + 1) & (Z.tabcap - 1)) {
    struct bucket *b = &Z.tab[i];
    if (b->used && b->chunk == chunk) return b;
    if (b->used) continue;
    if (!add) return NULL;
    b->used = true;
    b->chunk = chunk;
    Z.tabused++;
    return b;
  }
}

/* bucket_drop removes an empty bucket, moving later entries of its probe run back (no tombstones). */
static void bucket_drop(struct bucket *b) {
  size_t mask = Z.tabcap - 1, hole = (size_t)(b - Z.tab);
  free(b->v);
  for (size_t j = (hole + 1) & mask; Z.tab[j].used; j = (j + 1) & mask) {
    size_t home = slot_of(Z.tab[j].chunk, Z.tabcap);
    if (((j - home) & mask) >= ((j - hole) & mask)) { /* the hole lies on j's probe path */
      Z.tab[hole] = Z.tab[j];
      hole = j;
    }
  }
  Z.tab[hole] = (struct bucket){0};
  Z.tabused--;
}

static void rec_kill(uint32_t idx) {
  Z.recs[idx].gen++; /* its bucket entries go stale */
  if (reserve(&Z.freel, &Z.capfree, Z.nfree + 1, sizeof *Z.freel)) Z.freel[Z.nfree++] = idx;
}

static bool done_by_host(const struct rec *p) { return p->epoch <= vc_get(&Z.host, p->stream); }

/* compact drops a bucket's stale entries and the records the host has seen complete, and, when fn is
 * given, offers fn every other record overlapping [lo,hi) (fn returns true to forget it). */
static void compact(struct bucket *b, uintptr_t lo, uintptr_t hi, bool (*fn)(struct rec *, void *), void *ctx) {
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++) {
    struct ref f = b->v[i];
    struct rec *p = &Z.recs[f.idx];
    if (p->gen != f.gen) continue;
    if (done_by_host(p) || (fn && p->lo < hi && lo < p->hi && fn(p, ctx))) {
      rec_kill(f.idx);
      continue;
    }
    b->v[k++] = f;
  }
  Z.refs -= b->n - k;
  b->n = k;
}

/* visit: [lo,hi) lies in the allocation at base. */
static void visit(uintptr_t base, uintptr_t lo, uintptr_t hi, bool (*fn)(struct rec *, void *), void *ctx) {
  for (uintptr_t c = first_chunk(base, lo); c < hi; c += CHUNK) {
    struct bucket *b = bucket_of(c, false);
    if (b) compact(b, lo, hi, fn, ctx);
  }
}

/* sweep runs when the entries have doubled since the last one, so buckets no access visits stay bounded. */
static void maybe_sweep(void) {
  if (Z.refs <= 2 * Z.swept + 4096) return;
  for (size_t i = 0; i < Z.tabcap; i++)
    if (Z.tab[i].used) compact(&Z.tab[i], 0, 0, NULL, NULL);
  Z.swept = Z.refs;
}

static void insert(struct rec r) {
  uint32_t idx;
  if (Z.nfree) idx = Z.freel[--Z.nfree];
  else if (Z.nrecs < UINT32_MAX && reserve(&Z.recs, &Z.caprecs, Z.nrecs + 1, sizeof *Z.recs)) {
    idx = (uint32_t)Z.nrecs++;
    Z.recs[idx].gen = 0;
  } else return;
  r.gen = Z.recs[idx].gen;
  Z.recs[idx] = r;
  for (uintptr_t c = first_chunk(r.base, r.lo); c < r.hi; c += CHUNK) {
    struct bucket *b = bucket_of(c, true);
    if (!b || !reserve(&b->v, &b->cap, b->n + 1, sizeof *b->v)) continue;
    b->v[b->n++] = (struct ref){idx, r.gen};
    Z.refs++;
  }
}

/* ---- reports ---- */
/* first_report: one line per pair of tasks, however many of their ranges conflict. */
static bool first_report(const struct rec *p) {
  for (size_t i = 0; i < Z.nseen; i++)
    if (Z.seen[i].stream == p->stream && Z.seen[i].task == p->task) return false;
  if (reserve(&Z.seen, &Z.capseen, Z.nseen + 1, sizeof *Z.seen)) Z.seen[Z.nseen++] = (struct pair){p->stream, p->task};
  return true;
}

static void report(const char *what, const char *who, const char *verb, const struct rec *p, uintptr_t lo,
                   uintptr_t hi) {
  if (lo < p->lo) lo = p->lo;
  if (hi > p->hi) hi = p->hi;
  if (++Z.count <= PRINT_CAP)
    fprintf(stderr, "aclsim: hazard: %s: %s %s [%#lx,+%zu) while %s (stream %u, task %u) %s it, unordered\n", what,
            who, verb, (unsigned long)lo, (size_t)(hi - lo), p->name, p->stream, p->task,
            p->write ? "writes" : "reads");
  else if (Z.count == PRINT_CAP + 1)
    fprintf(stderr, "aclsim: hazard lines stop at %d; the rest are only counted\n", PRINT_CAP);
}

struct tctx {
  const struct sim_vc *V;
  uint32_t stream, task;
  const char *name;
  uintptr_t lo, hi;
  bool write;
};

static bool on_task(struct rec *p, void *ctx) {
  const struct tctx *t = ctx;
  if (p->stream != t->stream && p->epoch > vc_get(t->V, p->stream)) {
    if ((p->write || t->write) && first_report(p)) {
      char who[128];
      snprintf(who, sizeof who, "%s (stream %u, task %u)", t->name, t->stream, t->task);
      report(!t->write ? "read-after-write" : p->write ? "write-after-write" : "write-after-read", who,
             t->write ? "writes" : "reads", p, t->lo, t->hi);
    }
    return false;
  }
  /* p is ordered before t: t's access supersedes it when it covers p and is at least as strong */
  return t->lo <= p->lo && p->hi <= t->hi && (t->write || !p->write);
}

struct fctx {
  const char *fn;
  uintptr_t lo, hi;
};

static bool on_free(struct rec *p, void *ctx) {
  const struct fctx *f = ctx;
  if (first_report(p)) {
    char who[64];
    snprintf(who, sizeof who, "%s (host)", f->fn);
    report("free racing a queued task", who, "frees", p, f->lo, f->hi);
  }
  return true;
}

/* ---- entry points ---- */
void sim_hz_task(uint32_t stream, uint32_t task, const char *name, const struct sim_access *acc, int n) {
  if (!sim_cfg.check_hazards) return;
  pthread_mutex_lock(&hz_mu);
  struct sclk *c = begin(stream);
  if (c) {
    uint64_t epoch = c->v.v[stream];
    Z.nseen = 0;
    for (int i = 0; i < n; i++) {
      if (!acc[i].len) continue;
      struct tctx t = {&c->v, stream, task, name, acc[i].addr, acc[i].addr + acc[i].len, acc[i].write};
      visit(acc[i].base, t.lo, t.hi, on_task, &t);
      insert((struct rec){acc[i].base, t.lo, t.hi, epoch, stream, task, 0, t.write, name});
    }
    maybe_sweep();
  }
  pthread_mutex_unlock(&hz_mu);
}

void sim_hz_record(uint32_t stream, struct sim_vc *event_clock) {
  if (!sim_cfg.check_hazards) return;
  pthread_mutex_lock(&hz_mu);
  struct sclk *c = begin(stream);
  if (c) vc_copy(event_clock, &c->v);
  pthread_mutex_unlock(&hz_mu);
}

void sim_hz_wait(uint32_t stream, const struct sim_vc *event_clock) {
  if (!sim_cfg.check_hazards) return;
  pthread_mutex_lock(&hz_mu);
  struct sclk *c = begin(stream);
  if (c) vc_join(&c->v, event_clock);
  pthread_mutex_unlock(&hz_mu);
}

void sim_hz_unrecord(struct sim_vc *event_clock) {
  if (!sim_cfg.check_hazards) return;
  pthread_mutex_lock(&hz_mu);
  if (event_clock->n) memset(event_clock->v, 0, event_clock->n * sizeof *event_clock->v);
  pthread_mutex_unlock(&hz_mu);
}

void sim_hz_snap_stream(uint32_t stream, struct sim_vc *out) {
  if (!sim_cfg.check_hazards) return;
  pthread_mutex_lock(&hz_mu);
  if (stream < Z.nclk) vc_copy(out, &Z.clk[stream].v);
  pthread_mutex_unlock(&hz_mu);
}

void sim_hz_snap_event(const struct sim_vc *event_clock, struct sim_vc *out) {
  if (!sim_cfg.check_hazards) return;
  pthread_mutex_lock(&hz_mu);
  vc_copy(out, event_clock);
  pthread_mutex_unlock(&hz_mu);
}

void sim_hz_host_join(struct sim_vc *snap) {
  if (snap->n) {
    pthread_mutex_lock(&hz_mu);
    host_join(snap);
    pthread_mutex_unlock(&hz_mu);
  }
  free(snap->v);
  *snap = (struct sim_vc){NULL, 0};
}

void sim_hz_stream_gone(uint32_t stream) {
  if (!sim_cfg.check_hazards) return;
  pthread_mutex_lock(&hz_mu);
  if (stream < Z.nclk) {
    host_join(&Z.clk[stream].v);
    free(Z.clk[stream].v.v);
    Z.clk[stream].v = (struct sim_vc){NULL, 0};
  }
  pthread_mutex_unlock(&hz_mu);
}

void sim_hz_free(const char *fn, uintptr_t base, size_t len) {
  if (!sim_cfg.check_hazards || !len) return;
  pthread_mutex_lock(&hz_mu);
  struct fctx f = {fn, base, base + len};
  Z.nseen = 0;
  visit(base, f.lo, f.hi, on_free, &f);
  /* the allocation's chunks are its own buckets, now empty: drop them so churn does not grow the table */
  for (uintptr_t c = base; c < f.hi; c += CHUNK) {
    struct bucket *b = bucket_of(c, false);
    if (b && !b->n) bucket_drop(b);
  }
  pthread_mutex_unlock(&hz_mu);
}

uint64_t sim_hz_count(void) {
  pthread_mutex_lock(&hz_mu);
  uint64_t n = Z.count;
  pthread_mutex_unlock(&hz_mu);
  return n;
}

void sim_hz_reset(void) {
  pthread_mutex_lock(&hz_mu);
  free(Z.host.v);
  for (size_t i = 0; i < Z.nclk; i++) free(Z.clk[i].v.v);
  free(Z.clk);
  for (size_t i = 0; i < Z.tabcap; i++) free(Z.tab[i].v);
  free(Z.tab);
  free(Z.recs);
  free(Z.freel);
  free(Z.seen);
  memset(&Z, 0, sizeof Z);
  pthread_mutex_unlock(&hz_mu);
}
