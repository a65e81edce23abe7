/* sa_deferred.c: the deferred control calls of swapagent.h against the real agent on the emulator. Under
 * policy off each layer of a small stack runs twice per step on storages of the same kinds (positional and
 * keyword inputs, a parameter, a small storage, internals, the output): once by the plain calls (group
 * plain.N) and once by the deferred ones (deferred.N). Every deferred handle must then have the keep reason
 * and state of its plain twin, the handles of one region end follow each other, an unpack gives the
 * storage's base, and the groups' stats agree. Then misuse: what the C side can see (unreadable memory,
 * NULL with n > 0, n too large) is EINVAL at once and the process lives on; what only the agent can see (a
 * region end without its enter, a description text without its final NUL) is counted in the stats'
 * "rejected" once the agent has run the call. Under safe the deferred calls run alone first, every save
 * below SWAPAGENT_MIN_BYTES (queued: nothing can move; a plain region exit would end deferral); then a
 * region end that saves a large internal storage runs in the agent at once, from then on every deferred
 * call does (a misuse's code comes back at once), and the twins run as under off. Under outputs-only, and
 * under any policy where the kernel refuses process_vm_readv (a seccomp filter, qemu-user: mode
 * "unavailable"), the deferred calls are refused with ESTATE. Mode "threads" (policy off): deferred calls
 * from several threads at once, for the sanitizers. One line per check (`ok   NAME: ...` /
 * `FAIL NAME: ...`), then `N passed, N failed`; exit 1 on a failure, 2 when the agent or the runtime is
 * missing.
 * Usage: sa-deferred off|safe|outputs-only|unavailable|threads   (the policy the agent runs under; safe
 * expects SWAPAGENT_MIN_BYTES between 4097 and 262144) */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "acl/acl.h"
#include "swapagent.h"
#include "test/sa_test.h"

#define LAYERS 3
#define STEPS 2
#define NSAVE 6
#define BIG (256u * 1024u)
#define TINY 4096u

/* The deferred calls: the checked forms, and (direct) their _direct twins. */
struct deferred_calls {
  __typeof__(&swapagent_region_enter_deferred) enter;
  __typeof__(&swapagent_region_end_deferred) end;
  __typeof__(&swapagent_backward_enter_deferred) bwd_enter;
  __typeof__(&swapagent_backward_exit_deferred) bwd_exit;
};
static struct deferred_calls dfr, direct;
static __typeof__(&swapagent_deferred) deferred_on;
static __typeof__(&swapagent_unpack_resident) unpack_resident;

static size_t save_size = BIG; /* of every save but the small one */
static int with_plain = 1;     /* twins runs the plain twins too */

static uintptr_t dev(size_t n) {
  void *p = NULL;
  if (aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST) != 0) {
    fprintf(stderr, "sa-deferred: aclrtMalloc(%zu) failed\n", n);
    exit(2);
  }
  return (uintptr_t)p;
}

static char js[1 << 16];

static long long stat_of(const char *obj, const char *key) {
  int n = abi.stats(js, sizeof js);
  if (n < 0 || n >= (int)sizeof js) return -2;
  return json_num(js, obj, key);
}

/* A number of group g's object in the stats' "groups"; -1 when absent. */
static long long group_stat(const char *g, const char *key) {
  if (stat_of(NULL, "saves") < 0) return -2;
  char k[64];
  snprintf(k, sizeof k, "\"%s\":{", g);
  const char *at = strstr(js, k);
  return at != NULL ? json_num(at + strlen(k) - 1, NULL, key) : -1;
}

/* The texts of a layer's descriptions: its two inputs, then (at region end) its output and its saves. */
static const char enter_text[] = "args[0]\tfloat32\t256,256\0rope[0]\tfloat32\t256,256\0";
static const char *const enter_descs[] = {"args[0]\tfloat32\t256,256", "rope[0]\tfloat32\t256,256"};
static const char end_text[] = "output\tfloat32\t256,256\0\tfloat32\t64,64\0";
static const char *const end_descs[] = {"output\tfloat32\t256,256", "\tfloat32\t64,64"};

/* The calls of kind: 1 the deferred ones, 2 their _direct twins. */
static const struct deferred_calls *calls_of(int kind) { return kind == 2 ? &direct : &dfr; }

/* One forward and backward of layer i, by the plain calls (deferred 0), the deferred ones (1) or their
 * _direct twins (2), on storages x (input), rope (keyword input), w (parameter), tiny (small), act (internal)
 * and out (output). The handles go to hs. */
static void forward(int deferred, const char *g, uintptr_t x, uintptr_t rope, uintptr_t w, uintptr_t tiny,
                    uintptr_t act, uintptr_t out, int64_t *hs) {
  uintptr_t in[2] = {x, rope};
  uintptr_t saves[NSAVE] = {x, rope, w, tiny, act, out};
  size_t z = save_size, sizes[NSAVE] = {z, z, z, TINY, z, z};
  uint32_t flags[NSAVE] = {0, 0, SWAPAGENT_SAVE_PARAM, 0, 0, 0};
  uintptr_t outs[1] = {out}, dps[2] = {out, tiny};
  char name[96];
  int rc;
  if (deferred) {
    const struct deferred_calls *d = calls_of(deferred);
    rc = d->enter(g, in, 2, 1, enter_text, sizeof enter_text - 1);
    snprintf(name, sizeof name, "%s region_enter_deferred", g);
    check(rc == 0, name, "rc %d", rc);
    int64_t first = d->end(g, outs, 1, saves, sizes, flags, NSAVE, dps, 2, end_text, sizeof end_text - 1);
    snprintf(name, sizeof name, "%s region_end_deferred", g);
    check(first > 0, name, "first handle %lld", (long long)first);
    for (int k = 0; k < NSAVE; k++) hs[k] = first + k;
  } else {
    rc = abi.enter_desc(g, in, enter_descs, 2, 1);
    snprintf(name, sizeof name, "%s region_enter_desc", g);
    check(rc == 0, name, "rc %d", rc);
    rc = abi.end(g, outs, 1, saves, sizes, flags, NSAVE, hs, dps, end_descs, 2);
    snprintf(name, sizeof name, "%s region_end", g);
    check(rc == 0, name, "rc %d", rc);
  }
}

/* resident: every storage stays on device (nothing can move), so swapagent_unpack_resident answers each. */
static void backward(int deferred, const char *g, const int64_t *hs, const uintptr_t *bases, int resident) {
  char name[96];
  int rc = deferred ? calls_of(deferred)->bwd_enter(g) : abi.bwd_enter(g);
  snprintf(name, sizeof name, "%s backward_enter", g);
  check(rc == 0, name, "rc %d", rc);
  for (int k = 0; k < NSAVE; k++) {
    if (resident) {
      uintptr_t r = unpack_resident(hs[k]);
      snprintf(name, sizeof name, "%s unpack_resident %d", g, k);
      check(r == bases[k], name, "gave %#lx, base %#lx", (unsigned long)r, (unsigned long)bases[k]);
    }
    uintptr_t p = abi.unpack(hs[k]);
    snprintf(name, sizeof name, "%s unpack %d", g, k);
    check(p == bases[k], name, "gave %#lx, base %#lx", (unsigned long)p, (unsigned long)bases[k]);
  }
  rc = deferred ? calls_of(deferred)->bwd_exit(g) : abi.bwd_exit(g);
  snprintf(name, sizeof name, "%s backward_exit", g);
  check(rc == 0, name, "rc %d", rc);
}

/* Each layer by the plain calls and by the deferred ones (an odd layer by their _direct twins), STEPS steps:
 * the deferred handles must be what their plain twins are (with_plain 0: the deferred ones alone). */
static void twins(const char *phase, int resident) {
  char pre[16] = ""; /* groups plain.N and deferred.N under off, PHASE-plain.N and PHASE-deferred.N else */
  if (strcmp(phase, "off") != 0) snprintf(pre, sizeof pre, "%s-", phase);
  uintptr_t rope[2] = {dev(BIG), dev(BIG)}, w[2][LAYERS], tiny[2][LAYERS];
  for (int m = 0; m < 2; m++)
    for (int i = 0; i < LAYERS; i++) w[m][i] = dev(BIG), tiny[m][i] = dev(TINY);
  for (int step = 1; step <= STEPS; step++) {
    int64_t hs[2][LAYERS][NSAVE];
    uintptr_t bases[2][LAYERS][NSAVE], x[2] = {dev(BIG), dev(BIG)}, acts[2][LAYERS], outs[2][LAYERS];
    for (int i = 0; i < LAYERS; i++) {
      for (int m = !with_plain; m < 2; m++) { /* plain first, then its deferred twin */
        char g[64];
        snprintf(g, sizeof g, "%s%s.%d", pre, m ? "deferred" : "plain", i);
        uintptr_t in = i == 0 ? x[m] : outs[m][i - 1];
        acts[m][i] = dev(BIG), outs[m][i] = dev(BIG);
        uintptr_t b[NSAVE] = {in, rope[m], w[m][i], tiny[m][i], acts[m][i], outs[m][i]};
        memcpy(bases[m][i], b, sizeof b);
        forward(m ? 1 + i % 2 : 0, g, in, rope[m], w[m][i], tiny[m][i], acts[m][i], outs[m][i], hs[m][i]);
      }
      for (int k = 0; k < NSAVE; k++) {
        char name[96];
        int rp = abi.reason(hs[0][i][k]), rd = abi.reason(hs[1][i][k]);
        int sp = abi.state(hs[0][i][k]), sd = abi.state(hs[1][i][k]);
        snprintf(name, sizeof name, "%s step%d layer %d save %d reason and state", phase, step, i, k);
        if (!with_plain) rp = rd, sp = sd;
        check(rp >= 0 && rp == rd && sp == sd && sd == SWAPAGENT_STATE_DEVICE, name,
              "deferred reason %d state %d, plain reason %d state %d", rd, sd, rp, sp);
        if (k > 0) {
          snprintf(name, sizeof name, "%s step%d layer %d handle %d follows", phase, step, i, k);
          check(hs[1][i][k] == hs[1][i][k - 1] + 1, name, "%lld after %lld", (long long)hs[1][i][k],
                (long long)hs[1][i][k - 1]);
        }
      }
    }
    /* The classification the comparison rests on: each kind of storage has its own reason. */
    int act = save_size < TINY * 2 ? SWAPAGENT_KEEP_SMALL : SWAPAGENT_KEEP_INTERNAL;
    const int want[NSAVE] = {SWAPAGENT_KEEP_INPUT, SWAPAGENT_KEEP_INPUT, SWAPAGENT_KEEP_PARAM,
                             SWAPAGENT_KEEP_SMALL, act,                  SWAPAGENT_KEEP_OUTPUT};
    for (int k = 0; k < NSAVE; k++) {
      char name[96];
      int r = abi.reason(hs[1][1][k]);
      snprintf(name, sizeof name, "%s step%d deferred.1 save %d reason", phase, step, k);
      check(r == want[k], name, "%d (want %d)", r, want[k]);
    }
    for (int i = LAYERS - 1; i >= 0; i--)
      for (int m = !with_plain; m < 2; m++) {
        char g[64];
        snprintf(g, sizeof g, "%s%s.%d", pre, m ? "deferred" : "plain", i);
        backward(m ? 1 + i % 2 : 0, g, hs[m][i], bases[m][i], resident);
      }
    for (int m = !with_plain; m < 2; m++) {
      aclrtFree((void *)x[m]);
      for (int i = 0; i < LAYERS; i++) aclrtFree((void *)acts[m][i]), aclrtFree((void *)outs[m][i]);
    }
  }
  for (int i = 0; i < LAYERS; i++) {
    char pg[64], dg[64], name[128];
    snprintf(pg, sizeof pg, "%splain.%d", pre, i);
    snprintf(dg, sizeof dg, "%sdeferred.%d", pre, i);
    static const char *const keys[] = {"saves", "internal", "kept"};
    for (int k = 0; with_plain && k < 3; k++) {
      long long p = group_stat(pg, keys[k]), d = group_stat(dg, keys[k]);
      snprintf(name, sizeof name, "%s stats %s %s", phase, dg, keys[k]);
      check(p > 0 ? d == p : (p == 0 && d == 0), name, "%lld, plain %lld", d, p);
    }
  }

}

static void run_off(void) {
  check(deferred_on() == 1, "deferred", "swapagent_deferred() under off");
  twins("off", 1);
  /* Misuse only the agent sees: refused when it runs the call, counted as the plain call's refusals are,
   * and the handle unknown. */
  uintptr_t p = dev(BIG);
  size_t n = BIG;
  int64_t ph = 0;
  long long e0 = stat_of("rejected", "eorder");
  int prc = abi.end("never.entered", NULL, 0, &p, &n, NULL, 1, &ph, NULL, NULL, 0);
  long long e1 = stat_of("rejected", "eorder");
  int64_t h = dfr.end("never.entered", NULL, 0, &p, &n, NULL, 1, NULL, 0, NULL, 0);
  check(h > 0, "misuse region_end_deferred without enter", "returned %lld at once", (long long)h);
  int r = abi.reason(h);
  check(r == SWAPAGENT_EHANDLE, "misuse handle unknown", "keep_reason %d (want EHANDLE)", r);
  check(abi.unpack(h) == 0, "misuse unpack", "unpack of the refused save's handle gives 0");
  long long e2 = stat_of("rejected", "eorder");
  check(prc == SWAPAGENT_EORDER && e2 - e1 == e1 - e0 && e2 > e1, "misuse counted",
        "rejected.eorder +%lld, the plain call's +%lld (rc %d)", e2 - e1, e1 - e0, prc);
  long long einval = stat_of("rejected", "einval");
  int rc = dfr.enter("plain.bad", &p, 1, 1, "args[0]\tfloat32\t1", 15);
  check(rc == 0, "misuse text without NUL", "rc %d at once", rc);
  long long e3 = stat_of("rejected", "einval");
  check(e3 == einval + 1, "misuse text counted", "rejected.einval %lld, was %lld", e3, einval);

  /* What the C side sees: EINVAL at once, no fault. */
  const uintptr_t *bad = (const uintptr_t *)16;
  struct {
    const char *what;
    long long rc;
  } cases[] = {
      {"NULL group", dfr.enter(NULL, &p, 1, 1, NULL, 0)},
      {"unmapped group", dfr.bwd_exit((const char *)16)},
      {"unmapped input_ptrs", dfr.enter("plain.0", bad, 2, 2, NULL, 0)},
      {"NULL input_ptrs", dfr.enter("plain.0", NULL, 2, 2, NULL, 0)},
      {"unmapped text", dfr.enter("plain.0", &p, 1, 1, (const char *)16, 8)},
      {"unmapped save_nbytes", dfr.end("plain.0", NULL, 0, &p, (const size_t *)16, NULL, 1, NULL, 0, NULL, 0)},
      {"n_save too large", dfr.end("plain.0", NULL, 0, &p, &n, NULL, (size_t)1 << 20, NULL, 0, NULL, 0)},
      {"desc_ptrs without text", dfr.end("plain.0", NULL, 0, NULL, NULL, NULL, 0, &p, 1, NULL, 0)},
      /* The _direct forms read with plain loads, but refuse what needs no read. */
      {"direct NULL group", direct.enter(NULL, &p, 1, 1, NULL, 0)},
      {"direct NULL group (backward)", direct.bwd_exit(NULL)},
      {"direct NULL input_ptrs", direct.enter("plain.0", NULL, 2, 2, NULL, 0)},
      {"direct n_save too large", direct.end("plain.0", NULL, 0, &p, &n, NULL, (size_t)1 << 20, NULL, 0, NULL, 0)},
      {"direct desc_ptrs without text", direct.end("plain.0", NULL, 0, NULL, NULL, NULL, 0, &p, 1, NULL, 0)},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char name[96];
    snprintf(name, sizeof name, "refused %s", cases[k].what);
    check(cases[k].rc == SWAPAGENT_EINVAL, name, "rc %lld (want EINVAL)", cases[k].rc);
  }
  /* A group name across a page boundary is read whole; one that runs into an unmapped page is refused. */
  long pg = sysconf(_SC_PAGESIZE);
  char *two = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (two == MAP_FAILED) exit(2);
  strcpy(two + pg - 4, "across.pages");
  rc = dfr.bwd_enter(two + pg - 4);
  check(rc == 0, "group across pages", "rc %d", rc);
  memset(two + pg - 8, 'a', 8);
  mprotect(two + pg, (size_t)pg, PROT_NONE);
  rc = dfr.bwd_enter(two + pg - 8);
  check(rc == SWAPAGENT_EINVAL, "refused group into an unmapped page", "rc %d (want EINVAL)", rc);
  long long e4 = stat_of("rejected", "einval");
  long long want = e3 + (long long)(sizeof cases / sizeof cases[0]) + 1;
  check(e4 == want, "refusals counted", "rejected.einval %lld (want %lld)", e4, want);
}

static void run_safe(void) {
  check(deferred_on() == 1, "deferred", "swapagent_deferred() under safe");
  /* Deferred calls alone (a plain region exit ends deferral: it may move a storage), every save below
   * SWAPAGENT_MIN_BYTES: nothing can move, and the calls are queued. */
  save_size = TINY, with_plain = 0;
  twins("small", 1);
  long long egroup = stat_of("rejected", "egroup");
  int rc = dfr.bwd_exit("no.such.group");
  check(rc == 0, "queued misuse", "backward_exit_deferred of an unknown group: rc %d at once", rc);
  long long e1 = stat_of("rejected", "egroup");
  check(e1 == egroup + 1, "queued misuse counted", "rejected.egroup %lld, was %lld", e1, egroup);
  /* A large internal storage: this region end may move it, so it runs in the agent at once. */
  uintptr_t in = dev(BIG), act = dev(BIG), out = dev(BIG);
  size_t n = BIG;
  rc = dfr.enter("big", &in, 1, 1, NULL, 0);
  check(rc == 0, "big region_enter_deferred", "rc %d", rc);
  int64_t h = dfr.end("big", &out, 1, &act, &n, NULL, 1, NULL, 0, NULL, 0);
  int r = abi.reason(h);
  check(h > 0 && r == SWAPAGENT_KEEP_INTERNAL, "big region end runs now", "handle %lld, reason %d (want 0 internal)",
        (long long)h, r);
  rc = dfr.bwd_exit("no.such.group");
  check(rc == SWAPAGENT_EGROUP, "closed for good", "backward_exit_deferred of an unknown group: rc %d (want EGROUP "
        "at once)", rc);
  rc = dfr.bwd_enter("big");
  check(rc == 0 && abi.unpack(h) == act, "big backward", "rc %d", rc);
  rc = dfr.bwd_exit("big");
  check(rc == 0, "big backward_exit", "rc %d", rc);
  save_size = BIG, with_plain = 1;
  twins("after", 0);
}

static void run_other(const char *policy) {
  char name[96];
  snprintf(name, sizeof name, "not deferred under %s", policy);
  check(deferred_on() == 0, name, "swapagent_deferred() %d", deferred_on());
  uintptr_t p = dev(BIG);
  int rc = dfr.enter("layer.0", &p, 1, 1, NULL, 0);
  check(rc == SWAPAGENT_ESTATE, "enter refused", "rc %d (want ESTATE)", rc);
  size_t n = BIG;
  int64_t h = dfr.end("layer.0", NULL, 0, &p, &n, NULL, 1, NULL, 0, NULL, 0);
  check(h == SWAPAGENT_ESTATE, "end refused", "rc %lld (want ESTATE)", (long long)h);
  check(dfr.bwd_enter("layer.0") == SWAPAGENT_ESTATE && dfr.bwd_exit("layer.0") == SWAPAGENT_ESTATE,
        "backward refused", "ESTATE");
  long long saves = stat_of(NULL, "saves");
  check(saves == 0, "nothing done", "saves %lld (want 0)", saves);
}

/* Mode "threads": THREADS threads make deferred calls at once, each on its own group, for the sanitizers
 * (the copy, the handle counter, the resident table, the ring) and the agent's drain of them. */
#define THREADS 4
#define ROUNDS 2000
static _Atomic int thread_failures;

static void *calls(void *arg) {
  char g[32];
  snprintf(g, sizeof g, "thread.%d", (int)(intptr_t)arg);
  const struct deferred_calls *d = calls_of(1 + (int)(intptr_t)arg % 2); /* odd threads: the _direct forms */
  uintptr_t in = dev(TINY), saves[3] = {in, dev(TINY), dev(TINY)};
  size_t sizes[3] = {TINY, TINY, TINY};
  for (int r = 0; r < ROUNDS; r++) {
    int64_t first = -1;
    int ok = d->enter(g, &in, 1, 1, NULL, 0) == 0;
    ok = ok && (first = d->end(g, saves + 2, 1, saves, sizes, NULL, 3, NULL, 0, NULL, 0)) > 0;
    ok = ok && d->bwd_enter(g) == 0;
    for (int k = 0; ok && k < 3; k++) ok = abi.unpack(first + k) == saves[k];
    ok = ok && d->bwd_exit(g) == 0;
    if (!ok) atomic_fetch_add(&thread_failures, 1);
  }
  return NULL;
}

static void run_threads(void) {
  check(deferred_on() == 1, "deferred", "swapagent_deferred()");
  pthread_t t[THREADS];
  for (intptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, calls, (void *)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  check(atomic_load(&thread_failures) == 0, "threads", "%d threads x %d regions: %d failed", THREADS, ROUNDS,
        atomic_load(&thread_failures));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: sa-deferred off|safe|outputs-only|unavailable|threads\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (sa_abi_load("sa-deferred") != 0) return 2;
  *(void **)&deferred_on = dlsym(RTLD_DEFAULT, "swapagent_deferred");
  *(void **)&unpack_resident = dlsym(RTLD_DEFAULT, "swapagent_unpack_resident");
  *(void **)&dfr.enter = dlsym(RTLD_DEFAULT, "swapagent_region_enter_deferred");
  *(void **)&dfr.end = dlsym(RTLD_DEFAULT, "swapagent_region_end_deferred");
  *(void **)&dfr.bwd_enter = dlsym(RTLD_DEFAULT, "swapagent_backward_enter_deferred");
  *(void **)&dfr.bwd_exit = dlsym(RTLD_DEFAULT, "swapagent_backward_exit_deferred");
  *(void **)&direct.enter = dlsym(RTLD_DEFAULT, "swapagent_region_enter_deferred_direct");
  *(void **)&direct.end = dlsym(RTLD_DEFAULT, "swapagent_region_end_deferred_direct");
  *(void **)&direct.bwd_enter = dlsym(RTLD_DEFAULT, "swapagent_backward_enter_deferred_direct");
  *(void **)&direct.bwd_exit = dlsym(RTLD_DEFAULT, "swapagent_backward_exit_deferred_direct");
  if (!deferred_on || !unpack_resident || !dfr.enter || !dfr.end || !dfr.bwd_enter || !dfr.bwd_exit || !direct.enter ||
      !direct.end || !direct.bwd_enter || !direct.bwd_exit) {
    fprintf(stderr, "sa-deferred: the deferred calls are missing: is libswapagent.so preloaded?\n");
    return 2;
  }
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) {
    fprintf(stderr, "sa-deferred: aclInit/aclrtSetDevice failed\n");
    return 2;
  }
  if (strcmp(argv[1], "threads") == 0)
    run_threads();
  else if (strcmp(argv[1], "off") == 0)
    run_off();
  else if (strcmp(argv[1], "safe") == 0)
    run_safe();
  else
    run_other(argv[1]);
  printf("%d passed, %d failed\n", sa_passed, sa_failed);
  return sa_failed ? 1 : 0;
}
