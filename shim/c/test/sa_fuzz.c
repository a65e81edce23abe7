/* sa_fuzz.c: random control ABI calls under the preloaded agent on the emulator (issue 15). Good and bad
 * arguments are mixed: groups (good names, empty, NULL, 5000 characters, control characters, an unmapped
 * name pointer), handles (live, of another group, of a finished step, made up), pointer arrays (NULL with
 * n > 0, n beyond the trace limit, an unmapped array), and saves of real storages (device, VMM across two
 * mappings, host) with right and wrong sizes next to garbage: an unmapped address, a stack address, freed
 * device memory, a reservation with nothing mapped, a range that wraps. The storage ops are sa_regress.c's
 * (release = free, restore = a new allocation, so the base changes every time), both scribble over the
 * memory they hand back or give up so only the agent's copy can bring the bytes back, and they fail now and
 * then (an error, 0, or a garbage base). Every storage holds known bytes.
 * Checks: the process neither dies nor hangs (a watchdog per 1000 calls); every storage an unpack returns,
 * every storage renewed and every storage on device at the end holds exactly its bytes; saves the ABI must
 * refuse (garbage pointers, wrong sizes) return EINVAL and legitimate ones a handle; and the agent's
 * "rejected" counters in the stats equal the refusals this program saw. The first failures, one line per
 * check kind, then `N passed, N failed` over every check made; exit 1 on a failed check, 2 when the agent
 * or the runtime is missing.
 * Usage: sa-fuzz SEED CALLS */
#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acl/acl.h"
#include "swapagent.h"
#include "test/sa_test.h"

#define NDEV 24          /* device storages */
#define NHOST 4          /* host storages: CPU tensors of a companion run with include_cpu */
#define NST (NDEV + NHOST + 1) /* and one VMM storage across two mappings */
#define VMM_ST (NST - 1)
#define NGOOD 6          /* good group names */
#define MAXLIVE 1024     /* live handles */
#define NDEAD 256        /* handles of finished steps kept for stale calls */
#define NFREED 32        /* freed device pointers kept for garbage saves */
#define GRAN (2u << 20)  /* VMM granularity */
#define TRACE_LIMIT SWAPAGENT_MAX_PTRS /* pointer arrays beyond it are EINVAL */
#define GARBAGE ((uintptr_t)0x12345678)
#define NCODES 8

enum { DEV, HOST, VMM };

/* A framework storage: its base moves on restore, its bytes never change until it is renewed. */
typedef struct {
  uintptr_t ptr; /* 0 while released */
  size_t n;
  unsigned seed;
  int kind;
  int refs;    /* live handles saved inside it */
  int aliased; /* a view of it was saved: the agent takes the older storage for freed (two storages overlap) */
} storage;

static storage st[NST];

/* A handle as the program knows it: bound handles were saved with their storage's exact base and size, so
 * the storage ops accept them; the others (views, garbage that was accepted) the ops refuse. */
typedef struct {
  int64_t h;
  int g; /* good group index */
  int s; /* storage the saved pointer lies in, -1 */
  int bound;
} handle;

static handle live[MAXLIVE];
static int nlive;
static int64_t dead[NDEAD];
static int ndead;
static uintptr_t freed[NFREED];
static int nfreed;

enum { IDLE, FWD, EXITED, BWD };
static struct {
  char name[8];
  int phase;
} grp[NGOOD];

static uintptr_t vmm_resv;               /* 4 granules: 0 and 1 mapped (the VMM storage), 2 and 3 not */
static aclrtDrvMemHandle vmm_phys[2];
static char long_name[5001];
static unsigned char scratch[1 << 20];
static int ops_registered = 1;

/* Refusals seen, by code (-1 .. -8), and unpacks that returned 0. */
static long long refused[NCODES], unpack_zero;

/* ---- random ---- */
static uint64_t rng;
static uint64_t rnd(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}
static unsigned below(unsigned n) { return (unsigned)(rnd() % n); }
static int chance(unsigned per_mille) { return below(1000) < per_mille; }

/* ---- checks: one counter per kind, the first failures printed ---- */
typedef struct {
  const char *name;
  long long pass, fail;
} kind;
static kind k_survive = {"survive", 0, 0}, k_unpack = {"unpack.bytes", 0, 0}, k_renew = {"renew.bytes", 0, 0},
            k_final = {"final.bytes", 0, 0}, k_garbage = {"save.garbage", 0, 0}, k_legit = {"save.legit", 0, 0},
            k_range = {"return.range", 0, 0}, k_rejected = {"stats.rejected", 0, 0}, k_moved = {"stats.moved", 0, 0};
static int printed;

static void note(kind *k, int ok, const char *fmt, ...) {
  if (ok) {
    k->pass++;
    return;
  }
  k->fail++;
  if (printed++ < 30) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", k->name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
  }
}

static void summary(kind *k, long long *passed, long long *failed, const char *what) {
  printf("%s %s: %lld passed, %lld failed%s%s\n", k->fail ? "FAIL" : "ok  ", k->name, k->pass, k->fail,
         what[0] ? "; " : "", what);
  *passed += k->pass;
  *failed += k->fail;
}

/* ---- storages ---- */
static unsigned char pattern(unsigned seed, size_t i) {
  return (unsigned char)((seed * 2654435761u + (unsigned)i * 40503u) >> 13);
}

static int to_device(uintptr_t dst, const void *src, size_t n) {
  return aclrtMemcpy((void *)dst, n, src, n, ACL_MEMCPY_HOST_TO_DEVICE);
}

/* fill writes storage i's pattern at its base. */
static void fill(int i) {
  storage *s = &st[i];
  unsigned char *buf = s->kind == HOST ? (unsigned char *)s->ptr : malloc(s->n);
  if (buf == NULL) exit(2);
  for (size_t k = 0; k < s->n; k++) buf[k] = pattern(s->seed, k);
  if (s->kind != HOST) {
    if (to_device(s->ptr, buf, s->n) != 0) {
      fprintf(stderr, "sa-fuzz: aclrtMemcpy to device failed\n");
      exit(2);
    }
    free(buf);
  }
}

static int vmm_map(void) {
  for (int k = 0; k < 2; k++)
    if (aclrtMapMem((void *)(vmm_resv + k * GRAN), GRAN, 0, vmm_phys[k], 0) != 0) return -1;
  return 0;
}

static void vmm_unmap(void) {
  for (int k = 0; k < 2; k++) aclrtUnmapMem((void *)(vmm_resv + k * GRAN));
}

/* acquire gives storage i memory of its size (scribbled over: the bytes are not its own). */
static int acquire(int i) {
  storage *s = &st[i];
  void *p = NULL;
  switch (s->kind) {
  case DEV:
    if (aclrtMalloc(&p, s->n, ACL_MEM_MALLOC_HUGE_FIRST) != 0) return -1;
    aclrtMemset(p, s->n, 0xA5, s->n);
    break;
  case HOST:
    p = malloc(s->n);
    if (p == NULL) return -1;
    memset(p, 0xA5, s->n);
    break;
  case VMM:
    if (vmm_map() != 0) return -1;
    p = (void *)vmm_resv;
    aclrtMemset(p, s->n, 0xA5, s->n);
    break;
  }
  s->ptr = (uintptr_t)p;
  return 0;
}

/* drop gives storage i's memory up (scribbled first, so stale bytes cannot pass for restored ones). */
static void drop(int i) {
  storage *s = &st[i];
  if (s->ptr == 0) return;
  switch (s->kind) {
  case DEV:
    aclrtMemset((void *)s->ptr, s->n, 0x5A, s->n);
    aclrtFree((void *)s->ptr);
    if (nfreed < NFREED)
      freed[nfreed++] = s->ptr;
    else
      freed[below(NFREED)] = s->ptr;
    break;
  case HOST:
    memset((void *)s->ptr, 0x5A, s->n);
    free((void *)s->ptr);
    break;
  case VMM:
    aclrtMemset((void *)s->ptr, s->n, 0x5A, s->n);
    vmm_unmap();
    break;
  }
  s->ptr = 0;
}

static void create(int i, int kind) {
  static const size_t sizes[] = {4096, 8192, 16384, 65536, 131072, 200000};
  storage *s = &st[i];
  s->kind = kind;
  s->n = kind == VMM ? 2 * GRAN : sizes[below(sizeof sizes / sizeof sizes[0])] + (kind == HOST ? below(64) : 0);
  s->seed = (unsigned)rnd();
  s->aliased = 0;
  if (acquire(i) != 0) {
    fprintf(stderr, "sa-fuzz: cannot allocate storage %d (%zu bytes)\n", i, s->n);
    exit(2);
  }
  fill(i);
}

/* intact compares storage i's bytes with its pattern; why says what differs. */
static int intact(int i, char *why, size_t cap) {
  storage *s = &st[i];
  if (s->ptr == 0) {
    snprintf(why, cap, "storage %d has no memory", i);
    return 0;
  }
  size_t done = 0;
  while (done < s->n) {
    size_t c = s->n - done < sizeof scratch ? s->n - done : sizeof scratch;
    const unsigned char *b = scratch;
    if (s->kind == HOST) {
      b = (const unsigned char *)s->ptr + done;
    } else {
      aclError rc = aclrtMemcpy(scratch, c, (void *)(s->ptr + done), c, ACL_MEMCPY_DEVICE_TO_HOST);
      if (rc != 0) {
        snprintf(why, cap, "storage %d at %#lx: aclrtMemcpy back failed: %d", i, (unsigned long)s->ptr, rc);
        return 0;
      }
    }
    for (size_t k = 0; k < c; k++)
      if (b[k] != pattern(s->seed, done + k)) {
        snprintf(why, cap, "storage %d (kind %d, %zu bytes at %#lx): byte %zu is 0x%02x, want 0x%02x", i, s->kind,
                 s->n, (unsigned long)s->ptr, done + k, b[k], pattern(s->seed, done + k));
        return 0;
      }
    done += c;
  }
  return 1;
}

/* storage_at returns the storage whose current range holds p, -1. */
static int storage_at(uintptr_t p) {
  for (int i = 0; i < NST; i++)
    if (st[i].ptr != 0 && p >= st[i].ptr && p - st[i].ptr < st[i].n) return i;
  return -1;
}

static int bound_storage(int64_t h) {
  for (int k = 0; k < nlive; k++)
    if (live[k].h == h) return live[k].bound ? live[k].s : -1;
  return -1;
}

/* ---- the storage ops ---- */
static long long rel_calls, rel_fail, res_calls, res_fail, res_garbage;

static int op_release(void *ctx, int64_t h, uintptr_t ptr, size_t nbytes) {
  (void)ctx;
  rel_calls++;
  int i = bound_storage(h);
  if (i < 0 || st[i].ptr != ptr || st[i].n != nbytes) return -1; /* not ours to free */
  if (chance(20)) {
    rel_fail++;
    return -5;
  }
  drop(i);
  return 0;
}

static uintptr_t op_restore(void *ctx, int64_t h, size_t nbytes) {
  (void)ctx;
  res_calls++;
  int i = bound_storage(h);
  if (i < 0 || nbytes != st[i].n) return 0;
  if (chance(15)) {
    res_fail++;
    return 0;
  }
  if (chance(10)) { /* a framework bug: a base that is not memory */
    res_garbage++;
    return GARBAGE;
  }
  if (st[i].ptr == 0 && acquire(i) != 0) return 0;
  return st[i].ptr;
}

/* ---- calls, with the refusals counted ---- */
static void count(long long rc) {
  if (rc < 0 && rc >= -NCODES) refused[-rc - 1]++;
  note(&k_range, rc >= -NCODES, "return code %lld is not a SWAPAGENT_E* code", rc);
}

static const char *bad_group(void) {
  switch (below(5)) {
  case 0:
    return "";
  case 1:
    return NULL;
  case 2:
    return long_name;
  case 3:
    return below(2) ? "g\x01\x7f" : "layer\n0";
  default:
    return (const char *)GARBAGE;
  }
}

/* pick_group returns a good group index (and its name in *name) or -1 with a bad name. */
static int pick_group(const char **name, int want_phase) {
  if (chance(120)) {
    *name = bad_group();
    return -1;
  }
  int g = below(NGOOD);
  if (want_phase >= 0 && chance(800))
    for (int k = 0, start = below(NGOOD); k < NGOOD; k++)
      if (grp[(start + k) % NGOOD].phase == want_phase) {
        g = (start + k) % NGOOD;
        break;
      }
  *name = grp[g].name;
  return g;
}

/* forget moves group g's handles to the dead list (backward_exit, or a region_enter in backward). */
static void forget(int g) {
  int k = 0;
  for (int j = 0; j < nlive; j++) {
    if (live[j].g != g) {
      live[k++] = live[j];
      continue;
    }
    if (live[j].s >= 0) st[live[j].s].refs--;
    dead[ndead < NDEAD ? ndead++ : (int)below(NDEAD)] = live[j].h;
  }
  nlive = k;
}

/* ptr_array fills a pointer array of storage bases; *arr may come back bad (NULL, unmapped) with *n > 0,
 * or with n beyond the trace limit. */
static void ptr_array(uintptr_t *buf, size_t cap, const uintptr_t **arr, size_t *n) {
  *n = below((unsigned)cap + 1);
  for (size_t k = 0; k < *n; k++) buf[k] = chance(900) ? st[below(NST)].ptr : rnd();
  *arr = buf;
  if (chance(40)) {
    switch (below(4)) {
    case 0:
      *arr = NULL;
      *n = 1 + below(4);
      break;
    case 1:
      *arr = (const uintptr_t *)GARBAGE;
      *n = 1 + below(4);
      break;
    case 2:
      *n = TRACE_LIMIT + 1;
      break;
    default:
      *n = (size_t)1 << 40;
      break;
    }
  }
}

/* desc_text fills buf with n tensor descriptions, one NUL-ended line each: mostly good ones or empty
 * (nothing known), now and then a bad one (no fields, a negative dimension, too long) or a line too few;
 * *text itself may be unmapped. *len gets its length. Returns whether every line is well-formed (a bad one
 * refuses the call). */
static int desc_text(char *buf, size_t cap, size_t n, const char **text, size_t *len) {
  static const char *good[] = {"args[0]\tfloat32\t4,8", "rotary_cos_sin[0]\tfloat32\t32,1,1,16",
                               "\tbfloat16\t", "batch['mask']\tbool\t2,1,32,32"};
  const char *lines[8];
  int ok = 1;
  size_t k = 0;
  for (; k < n && k < 8; k++) {
    lines[k] = chance(100) ? NULL : good[below(4)];
    if (chance(40)) {
      ok = 0;
      switch (below(3)) {
      case 0:
        lines[k] = "no tabs";
        break;
      case 1:
        lines[k] = "x\tfloat32\t3,-1";
        break;
      default:
        lines[k] = long_name;
        break;
      }
    }
  }
  if (k > 0 && chance(40)) k--, ok = 0; /* one line too few */
  *text = buf;
  *len = sa_text(buf, cap, lines, k);
  if (chance(20)) {
    *text = (const char *)GARBAGE;
    ok = 0;
  }
  return ok;
}

static char text_buf[1 << 16];

static void do_enter(void) {
  const char *name;
  int g = pick_group(&name, IDLE);
  uintptr_t buf[8];
  const uintptr_t *arr;
  size_t n;
  ptr_array(buf, 8, &arr, &n);
  int rc;
  if (chance(300) && n <= 8) {
    const char *text;
    size_t len;
    desc_text(text_buf, sizeof text_buf, n, &text, &len);
    size_t npos = below((unsigned)n + 1);
    rc = sa_enter(name, arr, n, npos, chance(100) ? NULL : text, len, chance(2) ? SWAPAGENT_OPT_QUEUE : 0);
  } else if (chance(500)) {
    size_t npos = n <= 8 ? below((unsigned)n + 1) : 0;
    if (chance(30)) npos = n + 1; /* more positional inputs than inputs */
    rc = sa_enter(name, arr, n, npos, NULL, 0, 0);
  } else {
    rc = abi.enter(name, arr, n);
  }
  count(rc);
  if (rc == 0 && g >= 0) {
    if (grp[g].phase == BWD) forget(g);
    grp[g].phase = FWD;
  }
}

static void do_exit(void) {
  const char *name;
  int g = pick_group(&name, FWD);
  uintptr_t buf[8];
  const uintptr_t *arr;
  size_t n;
  ptr_array(buf, 8, &arr, &n);
  int rc;
  if (chance(300)) {
    /* The region's exit with its outputs described, nothing left to save, now and then with a description
     * text it cannot read, which refuses the whole call (the region stays open). */
    const char *text = NULL;
    size_t len = 0;
    if (n <= 8) desc_text(text_buf, sizeof text_buf, n, &text, &len);
    int garbage = chance(100);
    if (garbage) text = (const char *)GARBAGE, len = 8;
    size_t nd = text != NULL ? n : 0;
    rc = sa_exit_with(name, arr, n, NULL, NULL, NULL, 0, NULL, arr, nd, text, len, 0);
    if (garbage && n > 0)
      note(&k_garbage, rc == SWAPAGENT_EINVAL, "region exit with unmapped text returned %d, want EINVAL", rc);
  } else {
    rc = abi.exit(name, arr, n);
  }
  count(rc);
  if (rc == 0 && g >= 0) grp[g].phase = EXITED;
}

static void do_describe(void) {
  const char *name;
  pick_group(&name, FWD);
  uintptr_t buf[8];
  const uintptr_t *arr;
  size_t n;
  ptr_array(buf, 8, &arr, &n);
  const char *text = NULL;
  size_t len = 0;
  if (n <= 8) desc_text(text_buf, sizeof text_buf, n, &text, &len);
  if (chance(50)) text = NULL;
  count((int)abi.call(SA_CALL(SWAPAGENT_CALL_DESCRIBE, .group = name, .desc_ptrs = arr, .n_desc = n, .text = text,
                              .text_len = len),
                      0));
}

static void do_protect(void) {
  const char *name;
  pick_group(&name, -1);
  uintptr_t buf[8];
  const uintptr_t *arr;
  size_t n;
  ptr_array(buf, 8, &arr, &n);
  count(abi.protect(name, arr, n));
}

/* The holders' evidence: any count, on any pointers; one of 0 lets the agent move an input. */
static void do_holders(void) {
  const char *name;
  pick_group(&name, -1);
  uintptr_t buf[8];
  int64_t counts[8];
  const uintptr_t *arr;
  size_t n;
  ptr_array(buf, 8, &arr, &n);
  for (size_t i = 0; i < 8; i++) counts[i] = (int64_t)below(3) - 1;
  count((int)abi.call(
      SA_CALL(SWAPAGENT_CALL_HOLDERS, .group = name, .ptrs = arr, .n = n, .counts = chance(50) ? NULL : counts), 0));
}

static void do_streams(void) {
  const char *name;
  pick_group(&name, -1);
  uintptr_t buf[4] = {0, 0, 0, 0};
  const uintptr_t *arr = buf;
  size_t n = below(3);
  if (chance(100)) buf[0] = GARBAGE; /* not a stream: the runtime refuses to record on it */
  if (chance(50)) {
    arr = NULL;
    n = 2;
  }
  count((int)abi.call(SA_CALL(SWAPAGENT_CALL_GROUP_STREAMS, .group = name, .ptrs = arr, .n = n), 0));
}

/* check_unpacked checks the bytes of a bound handle's storage after an unpack returned p. Once a view of
 * the storage was saved, the tracker holds the older of two overlapping storages for freed and never moves
 * it again: its handles unpack to the base it had then, and only a match is checked. */
static void check_unpacked(int k, uintptr_t p) {
  char why[256];
  int i = live[k].s;
  if (!live[k].bound || (st[i].aliased && p != st[i].ptr)) return;
  if (p != st[i].ptr) {
    note(&k_unpack, 0, "unpack of handle %lld gave %#lx, storage %d is at %#lx", (long long)live[k].h,
         (unsigned long)p, i, (unsigned long)st[i].ptr);
    return;
  }
  note(&k_unpack, intact(i, why, sizeof why), "after unpack of handle %lld: %s", (long long)live[k].h, why);
}

static void do_unpack(void) {
  int64_t h;
  int k = -1;
  unsigned r = below(10);
  if (r < 7 && nlive > 0) {
    k = below(nlive);
    /* mostly a handle of a group in backward, as a framework unpacks */
    for (int t = 0; t < 4 && grp[live[k].g].phase != BWD; t++) k = below(nlive);
    h = live[k].h;
  } else if (r < 9 && ndead > 0) {
    h = dead[below(ndead)];
  } else {
    h = chance(500) ? (int64_t)rnd() : -(int64_t)below(10);
  }
  uintptr_t p = abi.unpack(h);
  if (p == 0) {
    unpack_zero++;
    return;
  }
  if (k >= 0) check_unpacked(k, p);
}

static void do_bwd_enter(void) {
  const char *name;
  int g = pick_group(&name, EXITED);
  int rc = abi.bwd_enter(name);
  count(rc);
  if (rc == 0 && g >= 0 && grp[g].phase == EXITED) grp[g].phase = BWD;
}

static void do_bwd_exit(void) {
  const char *name;
  int g = pick_group(&name, BWD);
  int rc = abi.bwd_exit(name);
  count(rc);
  if (rc == 0 && g >= 0) {
    forget(g);
    grp[g].phase = IDLE;
  }
}

static void do_query(void) {
  int64_t h = (int64_t)rnd();
  if (nlive > 0 && chance(700))
    h = live[below(nlive)].h;
  else if (ndead > 0 && chance(500))
    h = dead[below(ndead)];
  int rc = below(2) ? abi.state(h) : abi.reason(h);
  count(rc < 0 ? rc : 0);
  note(&k_range, rc <= 7, "state/keep_reason returned %d", rc);
}

static void do_stats(void) {
  char small[16];
  int rc;
  switch (below(4)) {
  case 0:
    rc = abi.stats(NULL, 16); /* NULL with a capacity */
    break;
  case 3:
    rc = abi.stats((char *)GARBAGE, 1 << 20); /* nowhere to write */
    break;
  case 1:
    rc = abi.stats(small, sizeof small); /* too small: the length needed, nothing written */
    break;
  default:
    rc = abi.stats(NULL, 0); /* the size needed */
    break;
  }
  count(rc < 0 ? rc : 0);
}

static void do_set_ops(void) {
  int rc;
  if (chance(300)) {
    rc = below(2) ? abi.set_ops(op_release, NULL, NULL) : abi.set_ops(NULL, op_restore, NULL);
  } else if (ops_registered && chance(300)) {
    rc = abi.set_ops(NULL, NULL, NULL); /* removed: storages stay on device, released ones cannot come back */
    if (rc == 0) ops_registered = 0;
  } else {
    rc = abi.set_ops(op_release, op_restore, NULL);
    if (rc == 0) ops_registered = 1;
  }
  count(rc);
}

/* A save: mostly a storage with its exact base and size, else a view or a wrong size, else garbage. The
 * expectation holds in a good group the program knows is inside its region. */
enum { LEGIT, BAD, ANY };
static void do_save(void) {
  const char *name;
  int g = pick_group(&name, FWD);
  int i = below(NST);
  storage *s = &st[i];
  uintptr_t p = s->ptr;
  size_t n = s->n;
  int expect = LEGIT, bound = 1;
  char stack_buf[512];
  memset(stack_buf, 1, sizeof stack_buf);
  const char *what = "exact";
  unsigned r = below(100);
  if (r < 55) {
    if (p == 0) expect = BAD, what = "released storage (base 0)";
  } else if (r < 60) {
    p += 64, n -= 64, bound = 0, what = "interior view";
    if (s->ptr == 0) expect = BAD;
  } else if (r < 64) {
    n /= 2, bound = 0, what = "smaller size";
    if (s->ptr == 0) expect = BAD;
  } else if (r < 70) {
    n += 1 + below(8192), bound = 0, what = "size past the allocation";
    expect = s->kind == HOST ? ANY : BAD; /* a malloc block may sit in readable heap beyond its end */
  } else if (r < 72) {
    n = chance(500) ? 0 : (size_t)1 << 44, bound = 0, what = "size 0 or 16 TiB", expect = BAD;
  } else if (r < 78) {
    p = GARBAGE, bound = 0, what = "unmapped address", expect = BAD;
  } else if (r < 82) {
    p = (uintptr_t)stack_buf, n = sizeof stack_buf, bound = 0, what = "stack address", expect = ANY;
  } else if (r < 88) {
    p = nfreed > 0 ? freed[below(nfreed)] : GARBAGE, n = 4096, bound = 0, what = "freed device pointer";
    expect = storage_at(p) >= 0 ? ANY : BAD; /* reused by now: it is memory again */
  } else if (r < 93) {
    p = vmm_resv + 2 * GRAN + below(GRAN), n = 4096, bound = 0, what = "reserved, not mapped", expect = BAD;
  } else if (r < 95) {
    p = vmm_resv + GRAN + GRAN / 2, n = GRAN, bound = 0, what = "mapped into unmapped", expect = BAD;
  } else if (r < 97) {
    p = UINTPTR_MAX - 100, n = 4096, bound = 0, what = "range that wraps", expect = BAD;
  } else {
    p = (uintptr_t)"a string literal", n = 8, bound = 0, what = "read-only host memory", expect = ANY;
  }
  uint32_t flags = chance(50) ? SWAPAGENT_SAVE_PARAM : 0;
  int64_t h;
  int ends = 0;
  if (chance(250)) {
    /* The batch call with this save as its one entry; now and then with an array it cannot use (NULL,
     * unmapped, a read-only output), which refuses the whole call and saves nothing. */
    const uintptr_t *pp = &p;
    const size_t *np = &n;
    const uint32_t *fp = chance(300) ? NULL : &flags; /* NULL flags: all 0 */
    int64_t out = 0, *op = &out;
    const char *bad = NULL;
    if (chance(60)) {
      switch (below(4)) {
      case 0:
        pp = NULL, bad = "NULL ptrs";
        break;
      case 1:
        np = (const size_t *)GARBAGE, bad = "unmapped nbytes";
        break;
      case 2:
        fp = (const uint32_t *)GARBAGE, bad = "unmapped flags";
        break;
      default:
        op = (int64_t *)(uintptr_t) "read-only handles", bad = "read-only handles";
        break;
      }
    }
    /* Or the region's end with this save, its only output the storage itself. */
    ends = chance(200);
    int rc = ends ? sa_exit_with(name, &p, 1, pp, np, fp, 1, op, NULL, 0, NULL, 0, 0)
                  : (int)abi.call(SA_CALL(SWAPAGENT_CALL_SAVE, .group = name, .save_ptrs = pp, .save_nbytes = np,
                                          .save_flags = fp, .n_save = 1, .handles = op),
                                  0);
    h = out != 0 ? out : rc; /* out untouched: refused as a whole */
    if (bad != NULL)
      note(&k_garbage, rc == SWAPAGENT_EINVAL && out == 0, "%s with %s returned %d (entry %lld), want EINVAL",
           ends ? "region exit" : "save", bad, rc, (long long)out);
    if (ends && out != 0) count(rc); /* the exit's result (the save's is out) */
    ends = ends && rc == SWAPAGENT_OK; /* the region exited */
    if (bad != NULL) expect = ANY;
  } else {
    h = abi.save(name, p, n, flags);
  }
  if (h <= 0) count(h);
  if (g >= 0 && grp[g].phase == FWD) {
    if (expect == BAD)
      note(&k_garbage, h == SWAPAGENT_EINVAL, "save of %s %#lx (%zu bytes) returned %lld, want EINVAL", what,
           (unsigned long)p, n, (long long)h);
    else if (expect == LEGIT)
      note(&k_legit, h > 0, "save of %s storage %d (kind %d) %#lx (%zu bytes) returned %lld, want a handle", what,
           i, s->kind, (unsigned long)p, n, (long long)h);
  }
  if (ends && g >= 0 && grp[g].phase == FWD) grp[g].phase = EXITED;
  if (h > 0) {
    if (g < 0 || nlive == MAXLIVE) {
      /* a bad name the agent took, or too many to follow: keep the storage out of renewal for good */
      int at = storage_at(p);
      if (at >= 0) st[at].refs++;
      return;
    }
    int at = storage_at(p);
    live[nlive++] = (handle){h, g, at, bound && at == i};
    if (at >= 0) st[at].refs++;
    if (!(bound && at == i)) /* every storage the range overlaps: a view, or a size past a malloc block */
      for (int k = 0; k < NST; k++)
        if (st[k].ptr != 0 && p < st[k].ptr + st[k].n && st[k].ptr < p + n) st[k].aliased = 1;
  }
}

/* renew replaces a storage no live handle uses: its bytes are checked first, then freed (its base joins the
 * garbage) and a new storage takes its slot. A storage left released by a finished group comes back too. */
static void do_renew(void) {
  int i = below(NST);
  if (st[i].refs != 0) return;
  char why[256];
  if (st[i].ptr != 0) note(&k_renew, intact(i, why, sizeof why), "before renewal: %s", why);
  drop(i);
  create(i, st[i].kind);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "sa-fuzz: hang: 1000 calls took more than 60 s\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
  _exit(3);
}



int main(int argc, char **argv) {
  if (argc != 3 || atoll(argv[2]) < 0) {
    fprintf(stderr, "usage: sa-fuzz SEED CALLS\n");
    return 2;
  }
  unsigned long long seed = strtoull(argv[1], NULL, 0);
  long long calls = atoll(argv[2]);
  rng = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (sa_abi_load("sa-fuzz") != 0) return 2;
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) {
    fprintf(stderr, "sa-fuzz: aclInit/aclrtSetDevice failed\n");
    return 2;
  }
  signal(SIGALRM, on_alarm);
  memset(long_name, 'x', sizeof long_name - 1);
  for (int g = 0; g < NGOOD; g++) snprintf(grp[g].name, sizeof grp[g].name, "g%d", g);

  /* The VMM layout: a reservation of four granules, the first two mapped (one storage across both). */
  void *va = NULL;
  aclrtPhysicalMemProp prop;
  memset(&prop, 0, sizeof prop);
  prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
  prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
  prop.memAttr = ACL_HBM_MEM_HUGE;
  prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  if (aclrtReserveMemAddress(&va, 4 * (size_t)GRAN, 0, NULL, 0) != 0 ||
      aclrtMallocPhysical(&vmm_phys[0], GRAN, &prop, 0) != 0 ||
      aclrtMallocPhysical(&vmm_phys[1], GRAN, &prop, 0) != 0) {
    fprintf(stderr, "sa-fuzz: VMM setup failed\n");
    return 2;
  }
  vmm_resv = (uintptr_t)va;
  for (int i = 0; i < NST; i++) create(i, i < NDEV ? DEV : i < NDEV + NHOST ? HOST : VMM);
  /* The job's stream: work on the default stream, so the agent orders its copies against it. */
  aclrtMemsetAsync((void *)st[0].ptr, st[0].n, 0, 0, NULL);
  aclrtSynchronizeStream(NULL);

  int rc = abi.set_ops(op_release, op_restore, NULL);
  if (rc != 0) {
    fprintf(stderr, "sa-fuzz: swapagent_set_storage_ops: %d\n", rc);
    return 2;
  }
  alarm(60);
  for (long long c = 0; c < calls; c++) {
    if (c % 1000 == 999) alarm(60);
    unsigned r = below(1000);
    if (r < 330)
      do_save();
    else if (r < 480)
      do_unpack();
    else if (r < 570)
      do_enter();
    else if (r < 660)
      do_exit();
    else if (r < 750)
      do_bwd_enter();
    else if (r < 820)
      do_bwd_exit();
    else if (r < 880)
      do_query();
    else if (r < 895)
      do_protect();
    else if (r < 910)
      do_holders();
    else if (r < 925)
      do_streams();
    else if (r < 935)
      do_stats();
    else if (r < 940)
      do_set_ops();
    else if (r < 960)
      do_describe();
    else
      do_renew();
  }

  /* Finish every good group the way a framework ends a step: backward, every bound handle unpacked. */
  alarm(120);
  if (!ops_registered) count(abi.set_ops(op_release, op_restore, NULL));
  for (int g = 0; g < NGOOD; g++) {
    if (grp[g].phase == FWD) count(abi.exit(grp[g].name, NULL, 0));
    count(abi.bwd_enter(grp[g].name));
  }
  for (int g = NGOOD - 1; g >= 0; g--) {
    for (int k = 0; k < nlive; k++) {
      if (live[k].g != g || !live[k].bound) continue;
      uintptr_t p = 0;
      for (int try = 0; try < 8 && p == 0; try++) { /* the restore op fails now and then */
        p = abi.unpack(live[k].h);
        if (p == 0) unpack_zero++;
      }
      if (p != 0) check_unpacked(k, p);
    }
    rc = abi.bwd_exit(grp[g].name);
    count(rc);
    forget(g);
  }
  int lost = 0;
  char why[256];
  for (int i = 0; i < NST; i++) {
    if (st[i].ptr == 0) { /* released, and its group finished without unpacking it: empty by design */
      lost++;
      continue;
    }
    note(&k_final, intact(i, why, sizeof why), "at the end: %s", why);
  }
  note(&k_survive, 1, "");

  /* The agent's counters agree with what this program saw. */
  static char js[1 << 20];
  int n = abi.stats(js, sizeof js);
  long long passed = 0, failed = 0;
  if (n <= 0 || (size_t)n >= sizeof js) {
    note(&k_rejected, 0, "stats_json returned %d", n);
  } else {
    static const char *names[NCODES] = {"einval", "egroup", "ehandle",  "eorder",
                                        "estate", "enoops", "eruntime", "edisabled"};
    long long extra = 0;
    for (int c = 0; c < NCODES; c++) {
      long long got = json_num(js, "rejected", names[c]);
      /* unpack returns 0, not its code: its refusals may sit under any code */
      note(&k_rejected, got >= refused[c], "rejected.%s is %lld, this program saw %lld", names[c], got, refused[c]);
      extra += got - refused[c];
    }
    long long unp = json_num(js, "rejected", "unpack");
    note(&k_rejected, extra == unpack_zero && unp == unpack_zero,
         "rejected beyond the codes seen: %lld, rejected.unpack %lld; unpacks that returned 0: %lld", extra, unp,
         unpack_zero);
    long long off = json_num(js, NULL, "offloaded_storages"), res = json_num(js, NULL, "restored_storages");
    int off_policy = strstr(js, "\"policy\":\"off\"") != NULL; /* records, never moves */
    note(&k_moved, calls < 20000 ? 1 : off_policy ? off <= 0 : (off > 0 && res > 0),
         "offloaded %lld, restored %lld under policy %s", off, res, off_policy ? "off" : "safe or outputs-only");
  }
  long long total = 0;
  for (int c = 0; c < NCODES; c++) total += refused[c];
  char buf[256];
  snprintf(buf, sizeof buf, "%lld calls, seed %llu", calls, seed);
  summary(&k_survive, &passed, &failed, buf);
  summary(&k_legit, &passed, &failed, "");
  summary(&k_garbage, &passed, &failed, "");
  snprintf(buf, sizeof buf, "release op %lld calls (%lld failed), restore op %lld calls (%lld failed, %lld garbage)",
           rel_calls, rel_fail, res_calls, res_fail, res_garbage);
  summary(&k_unpack, &passed, &failed, buf);
  summary(&k_renew, &passed, &failed, "");
  snprintf(buf, sizeof buf, "%d storages left released by a finished group", lost);
  summary(&k_final, &passed, &failed, buf);
  summary(&k_range, &passed, &failed, "");
  snprintf(buf, sizeof buf, "%lld refusals, %lld unpacks returned 0", total, unpack_zero);
  summary(&k_rejected, &passed, &failed, buf);
  summary(&k_moved, &passed, &failed, "");
  alarm(0);
  for (int i = 0; i < NST; i++) drop(i);
  aclrtFreePhysical(vmm_phys[0]);
  aclrtFreePhysical(vmm_phys[1]);
  aclrtReleaseMemAddress((void *)vmm_resv);
  aclrtResetDevice(0);
  aclFinalize();
  printf("%lld passed, %lld failed\n", passed, failed);
  return failed ? 1 : 0;
}
