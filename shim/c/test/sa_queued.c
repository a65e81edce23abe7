/* sa_queued.c: the queued control calls of swapagent.h (SWAPAGENT_OPT_QUEUE) against the real agent on the
 * emulator. Under policy off each layer of a small stack runs twice per step on storages of the same kinds
 * (positional and keyword inputs, a parameter, a small storage, internals, the output): once by plain calls
 * (group plain.N) and once queued (queued.N; an odd layer also with SWAPAGENT_OPT_OWN_MEMORY). Every queued
 * handle must then have the keep reason and state of its plain twin, the handles of one region exit follow
 * each other, an unpack gives the storage's base, and the groups' stats agree. Then misuse: what the C side
 * can see (unreadable memory, NULL with n > 0, n too large) is EINVAL at once and the process lives on; what
 * only the agent can see (a region exit without its enter, a description text without its final NUL) is
 * counted in the stats' "rejected" once the agent has run the call. Under safe the queued calls run alone
 * first, every save below SWAPAGENT_MIN_BYTES (queued: nothing can move; a plain region exit would end
 * queueing); then a region exit that saves a large internal storage runs in the agent at once, from then on
 * every call does (a misuse's code comes back at once), and the twins run as under off. Under outputs-only
 * nothing is queued: the calls run at once. Mode "threads" (policy off): queued calls from several threads
 * at once, for the sanitizers. One line per check (`ok   NAME: ...` / `FAIL NAME: ...`), then `N passed, N
 * failed`; exit 1 on a failure, 2 when the agent or the runtime is missing.
 * Usage: sa-queued off|safe|outputs-only|threads   (the policy the agent runs under; safe expects
 * SWAPAGENT_MIN_BYTES between 4097 and 262144) */
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

#define QUEUE SWAPAGENT_OPT_QUEUE
#define OWN (SWAPAGENT_OPT_QUEUE | SWAPAGENT_OPT_OWN_MEMORY)

static int queueing(void) { return (int)abi.call(SA_CALL(SWAPAGENT_CALL_QUEUEING), 0); }

static size_t save_size = BIG; /* of every save but the small one */
static int with_plain = 1;     /* twins runs the plain twins too */

static uintptr_t dev(size_t n) {
  void *p = NULL;
  if (aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST) != 0) {
    fprintf(stderr, "sa-queued: aclrtMalloc(%zu) failed\n", n);
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

/* The texts of a layer's descriptions: its two inputs, then (at region exit) its output and its saves. */
static const char enter_text[] = "args[0]\tfloat32\t256,256\0rope[0]\tfloat32\t256,256\0";
static const char end_text[] = "output\tfloat32\t256,256\0\tfloat32\t64,64\0";

/* One forward of layer i with opts (0: the plain calls; QUEUE or OWN), on storages x (input), rope (keyword
 * input), w (parameter), tiny (small), act (internal) and out (output). The handles go to hs. */
static void forward(uint32_t opts, const char *g, uintptr_t x, uintptr_t rope, uintptr_t w, uintptr_t tiny,
                    uintptr_t act, uintptr_t out, int64_t *hs) {
  uintptr_t in[2] = {x, rope};
  uintptr_t saves[NSAVE] = {x, rope, w, tiny, act, out};
  size_t z = save_size, sizes[NSAVE] = {z, z, z, TINY, z, z};
  uint32_t flags[NSAVE] = {0, 0, SWAPAGENT_SAVE_PARAM, 0, 0, 0};
  uintptr_t outs[1] = {out}, dps[2] = {out, tiny};
  char name[96];
  int rc = sa_enter(g, in, 2, 1, enter_text, sizeof enter_text - 1, opts);
  snprintf(name, sizeof name, "%s region_enter", g);
  check(rc == 0, name, "rc %d", rc);
  rc = sa_exit_with(g, outs, 1, saves, sizes, flags, NSAVE, hs, dps, 2, end_text, sizeof end_text - 1, opts);
  snprintf(name, sizeof name, "%s region_exit", g);
  check(rc == 0 && hs[0] > 0, name, "rc %d, first handle %lld", rc, (long long)hs[0]);
}

/* resident: every storage stays on device (nothing can move), so swapagent_unpack_resident answers each. */
static void backward(uint32_t opts, const char *g, const int64_t *hs, const uintptr_t *bases, int resident) {
  char name[96];
  int rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_ENTER, g, opts);
  snprintf(name, sizeof name, "%s backward_enter", g);
  check(rc == 0, name, "rc %d", rc);
  for (int k = 0; k < NSAVE; k++) {
    if (resident) {
      uintptr_t r = abi.unpack_resident(hs[k]);
      snprintf(name, sizeof name, "%s unpack_resident %d", g, k);
      check(r == bases[k], name, "gave %#lx, base %#lx", (unsigned long)r, (unsigned long)bases[k]);
    }
    uintptr_t p = abi.unpack(hs[k]);
    snprintf(name, sizeof name, "%s unpack %d", g, k);
    check(p == bases[k], name, "gave %#lx, base %#lx", (unsigned long)p, (unsigned long)bases[k]);
  }
  rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_EXIT, g, opts);
  snprintf(name, sizeof name, "%s backward_exit", g);
  check(rc == 0, name, "rc %d", rc);
}

/* The options of layer i's calls: m 0 the plain twin; else queued, an odd layer from its own memory. */
static uint32_t opts_of(int m, int i) { return m == 0 ? 0 : i % 2 ? OWN : QUEUE; }

/* Each layer by plain calls and queued (an odd layer also from its own memory), STEPS steps: the queued
 * handles must be what their plain twins are (with_plain 0: the queued ones alone). */
static void twins(const char *phase, int resident) {
  char pre[16] = ""; /* groups plain.N and queued.N under off, PHASE-plain.N and PHASE-queued.N else */
  if (strcmp(phase, "off") != 0) snprintf(pre, sizeof pre, "%s-", phase);
  uintptr_t rope[2] = {dev(BIG), dev(BIG)}, w[2][LAYERS], tiny[2][LAYERS];
  for (int m = 0; m < 2; m++)
    for (int i = 0; i < LAYERS; i++) w[m][i] = dev(BIG), tiny[m][i] = dev(TINY);
  for (int step = 1; step <= STEPS; step++) {
    int64_t hs[2][LAYERS][NSAVE];
    uintptr_t bases[2][LAYERS][NSAVE], x[2] = {dev(BIG), dev(BIG)}, acts[2][LAYERS], outs[2][LAYERS];
    for (int i = 0; i < LAYERS; i++) {
      for (int m = !with_plain; m < 2; m++) { /* plain first, then its queued twin */
        char g[64];
        snprintf(g, sizeof g, "%s%s.%d", pre, m ? "queued" : "plain", i);
        uintptr_t in = i == 0 ? x[m] : outs[m][i - 1];
        acts[m][i] = dev(BIG), outs[m][i] = dev(BIG);
        uintptr_t b[NSAVE] = {in, rope[m], w[m][i], tiny[m][i], acts[m][i], outs[m][i]};
        memcpy(bases[m][i], b, sizeof b);
        forward(opts_of(m, i), g, in, rope[m], w[m][i], tiny[m][i], acts[m][i], outs[m][i], hs[m][i]);
      }
      for (int k = 0; k < NSAVE; k++) {
        char name[96];
        int rp = abi.reason(hs[0][i][k]), rd = abi.reason(hs[1][i][k]);
        int sp = abi.state(hs[0][i][k]), sd = abi.state(hs[1][i][k]);
        snprintf(name, sizeof name, "%s step%d layer %d save %d reason and state", phase, step, i, k);
        if (!with_plain) rp = rd, sp = sd;
        check(rp >= 0 && rp == rd && sp == sd && sd == SWAPAGENT_STATE_DEVICE, name,
              "queued reason %d state %d, plain reason %d state %d", rd, sd, rp, sp);
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
      snprintf(name, sizeof name, "%s step%d queued.1 save %d reason", phase, step, k);
      check(r == want[k], name, "%d (want %d)", r, want[k]);
    }
    for (int i = LAYERS - 1; i >= 0; i--)
      for (int m = !with_plain; m < 2; m++) {
        char g[64];
        snprintf(g, sizeof g, "%s%s.%d", pre, m ? "queued" : "plain", i);
        backward(opts_of(m, i), g, hs[m][i], bases[m][i], resident);
      }
    for (int m = !with_plain; m < 2; m++) {
      aclrtFree((void *)x[m]);
      for (int i = 0; i < LAYERS; i++) aclrtFree((void *)acts[m][i]), aclrtFree((void *)outs[m][i]);
    }
  }
  for (int i = 0; i < LAYERS; i++) {
    char pg[64], dg[64], name[128];
    snprintf(pg, sizeof pg, "%splain.%d", pre, i);
    snprintf(dg, sizeof dg, "%squeued.%d", pre, i);
    static const char *const keys[] = {"saves", "internal", "kept"};
    for (int k = 0; with_plain && k < 3; k++) {
      long long p = group_stat(pg, keys[k]), d = group_stat(dg, keys[k]);
      snprintf(name, sizeof name, "%s stats %s %s", phase, dg, keys[k]);
      check(p > 0 ? d == p : (p == 0 && d == 0), name, "%lld, plain %lld", d, p);
    }
  }

}

static void run_off(void) {
  check(queueing() == 1, "queueing", "SWAPAGENT_CALL_QUEUEING under off");
  twins("off", 1);
  /* Misuse only the agent sees: refused when it runs the call, counted as the plain call's refusals are,
   * and the handle unknown. */
  uintptr_t p = dev(BIG);
  size_t n = BIG;
  int64_t ph = 0, h = 0;
  long long e0 = stat_of("rejected", "eorder");
  int prc = sa_exit_with("never.entered", NULL, 0, &p, &n, NULL, 1, &ph, NULL, 0, NULL, 0, 0);
  long long e1 = stat_of("rejected", "eorder");
  int rc = sa_exit_with("never.entered", NULL, 0, &p, &n, NULL, 1, &h, NULL, 0, NULL, 0, QUEUE);
  check(rc == 0 && h > 0, "misuse queued region_exit without enter", "rc %d, handle %lld at once", rc, (long long)h);
  int r = abi.reason(h);
  check(r == SWAPAGENT_EHANDLE, "misuse handle unknown", "keep_reason %d (want EHANDLE)", r);
  check(abi.unpack(h) == 0, "misuse unpack", "unpack of the refused save's handle gives 0");
  long long e2 = stat_of("rejected", "eorder");
  check(prc == SWAPAGENT_EORDER && e2 - e1 == e1 - e0 && e2 > e1, "misuse counted",
        "rejected.eorder +%lld, the plain call's +%lld (rc %d)", e2 - e1, e1 - e0, prc);
  long long einval = stat_of("rejected", "einval");
  rc = sa_enter("plain.bad", &p, 1, 1, "args[0]\tfloat32\t1", 15, QUEUE);
  check(rc == 0, "misuse text without NUL", "rc %d at once", rc);
  long long e3 = stat_of("rejected", "einval");
  check(e3 == einval + 1, "misuse text counted", "rejected.einval %lld, was %lld", e3, einval);

  /* What the C side sees: EINVAL at once, no fault. */
  const uintptr_t *bad = (const uintptr_t *)16;
  int64_t hs[1];
  struct {
    const char *what;
    long long rc;
  } cases[] = {
      {"NULL group", sa_enter(NULL, &p, 1, 1, NULL, 0, QUEUE)},
      {"unmapped group", sa_group_call(SWAPAGENT_CALL_BACKWARD_EXIT, (const char *)16, QUEUE)},
      {"unmapped input_ptrs", sa_enter("plain.0", bad, 2, 2, NULL, 0, QUEUE)},
      {"NULL input_ptrs", sa_enter("plain.0", NULL, 2, 2, NULL, 0, QUEUE)},
      {"unmapped text", sa_enter("plain.0", &p, 1, 1, (const char *)16, 8, QUEUE)},
      {"unmapped save_nbytes",
       sa_exit_with("plain.0", NULL, 0, &p, (const size_t *)16, NULL, 1, hs, NULL, 0, NULL, 0, QUEUE)},
      {"unmapped handles", sa_exit_with("plain.0", NULL, 0, &p, &n, NULL, 1, (int64_t *)16, NULL, 0, NULL, 0, QUEUE)},
      {"NULL handles", sa_exit_with("plain.0", NULL, 0, &p, &n, NULL, 1, NULL, NULL, 0, NULL, 0, QUEUE)},
      {"n_save too large", sa_exit_with("plain.0", NULL, 0, &p, &n, NULL, (size_t)1 << 20, hs, NULL, 0, NULL, 0, QUEUE)},
      {"desc_ptrs without text", sa_exit_with("plain.0", NULL, 0, NULL, NULL, NULL, 0, NULL, &p, 1, NULL, 0, QUEUE)},
      {"unmapped record", abi.call((const struct swapagent_call *)16, QUEUE)},
      {"NULL record", abi.call(NULL, 0)},
      {"unknown kind", abi.call(SA_CALL(99, .group = "plain.0"), 0)},
      {"record of size 0", abi.call(&(struct swapagent_call){.kind = SWAPAGENT_CALL_GUARD, .group = "g"}, 0)},
      /* With SWAPAGENT_OPT_OWN_MEMORY the memory is read with plain loads, but what needs no read is refused. */
      {"own NULL group", sa_enter(NULL, &p, 1, 1, NULL, 0, OWN)},
      {"own NULL group (backward)", sa_group_call(SWAPAGENT_CALL_BACKWARD_EXIT, NULL, OWN)},
      {"own NULL input_ptrs", sa_enter("plain.0", NULL, 2, 2, NULL, 0, OWN)},
      {"own n_save too large", sa_exit_with("plain.0", NULL, 0, &p, &n, NULL, (size_t)1 << 20, hs, NULL, 0, NULL, 0, OWN)},
      {"own desc_ptrs without text", sa_exit_with("plain.0", NULL, 0, NULL, NULL, NULL, 0, NULL, &p, 1, NULL, 0, OWN)},
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
  rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_ENTER, two + pg - 4, QUEUE);
  check(rc == 0, "group across pages", "rc %d", rc);
  memset(two + pg - 8, 'a', 8);
  mprotect(two + pg, (size_t)pg, PROT_NONE);
  rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_ENTER, two + pg - 8, QUEUE);
  check(rc == SWAPAGENT_EINVAL, "refused group into an unmapped page", "rc %d (want EINVAL)", rc);
  long long e4 = stat_of("rejected", "einval");
  long long want = e3 + (long long)(sizeof cases / sizeof cases[0]) + 1;
  check(e4 == want, "refusals counted", "rejected.einval %lld (want %lld)", e4, want);
}

static void run_safe(void) {
  check(queueing() == 1, "queueing", "SWAPAGENT_CALL_QUEUEING under safe");
  /* Queued calls alone (a plain region exit ends queueing: it may move a storage), every save below
   * SWAPAGENT_MIN_BYTES: nothing can move, and the calls are queued. */
  save_size = TINY, with_plain = 0;
  twins("small", 1);
  long long egroup = stat_of("rejected", "egroup");
  int rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_EXIT, "no.such.group", QUEUE);
  check(rc == 0, "queued misuse", "queued backward_exit of an unknown group: rc %d at once", rc);
  long long e1 = stat_of("rejected", "egroup");
  check(e1 == egroup + 1, "queued misuse counted", "rejected.egroup %lld, was %lld", e1, egroup);
  /* A large internal storage: this region exit may move it, so it runs in the agent at once. */
  uintptr_t in = dev(BIG), act = dev(BIG), out = dev(BIG);
  size_t n = BIG;
  int64_t h = 0;
  rc = sa_enter("big", &in, 1, 1, NULL, 0, QUEUE);
  check(rc == 0, "big region_enter", "rc %d", rc);
  rc = sa_exit_with("big", &out, 1, &act, &n, NULL, 1, &h, NULL, 0, NULL, 0, QUEUE);
  int r = abi.reason(h);
  check(rc == 0 && h > 0 && r == SWAPAGENT_KEEP_INTERNAL, "big region exit runs now",
        "rc %d, handle %lld, reason %d (want 0 internal)", rc, (long long)h, r);
  check(queueing() == 0, "queueing closed", "SWAPAGENT_CALL_QUEUEING %d after a move", queueing());
  rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_EXIT, "no.such.group", QUEUE);
  check(rc == SWAPAGENT_EGROUP, "closed for good", "queued backward_exit of an unknown group: rc %d (want EGROUP "
        "at once)", rc);
  rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_ENTER, "big", QUEUE);
  check(rc == 0 && abi.unpack(h) == act, "big backward", "rc %d", rc);
  rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_EXIT, "big", QUEUE);
  check(rc == 0, "big backward_exit", "rc %d", rc);
  save_size = BIG, with_plain = 1;
  twins("after", 0);
}

/* Under a policy that queues nothing the option changes nothing: each call runs now, its code at once. */
static void run_other(const char *policy) {
  char name[96];
  snprintf(name, sizeof name, "not queued under %s", policy);
  check(queueing() == 0, name, "SWAPAGENT_CALL_QUEUEING %d", queueing());
  uintptr_t p = dev(BIG);
  size_t n = BIG;
  int64_t h = 0;
  int rc = sa_enter("layer.0", &p, 1, 1, NULL, 0, QUEUE);
  check(rc == 0, "enter runs", "rc %d", rc);
  rc = sa_exit_with("layer.0", NULL, 0, &p, &n, NULL, 1, &h, NULL, 0, NULL, 0, QUEUE);
  check(rc == 0 && h > 0 && h < (1LL << 40), "exit runs", "rc %d, handle %lld: the engine's", rc, (long long)h);
  rc = sa_group_call(SWAPAGENT_CALL_BACKWARD_EXIT, "no.such.group", QUEUE);
  check(rc == SWAPAGENT_EGROUP, "misuse at once", "rc %d (want EGROUP)", rc);
  long long saves = stat_of(NULL, "saves");
  check(saves == 1, "saved", "saves %lld (want 1)", saves);
}

/* Mode "threads": THREADS threads make queued calls at once, each on its own group, for the sanitizers
 * (the copy, the handle counter, the resident table, the ring) and the agent's drain of them. */
#define THREADS 4
#define ROUNDS 2000
static _Atomic int thread_failures;

static void *calls(void *arg) {
  char g[32];
  snprintf(g, sizeof g, "thread.%d", (int)(intptr_t)arg);
  uint32_t opts = opts_of(1, (int)(intptr_t)arg); /* odd threads: from their own memory */
  uintptr_t in = dev(TINY), saves[3] = {in, dev(TINY), dev(TINY)};
  size_t sizes[3] = {TINY, TINY, TINY};
  for (int r = 0; r < ROUNDS; r++) {
    int64_t hs[3] = {0, 0, 0};
    int ok = sa_enter(g, &in, 1, 1, NULL, 0, opts) == 0;
    ok = ok && sa_exit_with(g, saves + 2, 1, saves, sizes, NULL, 3, hs, NULL, 0, NULL, 0, opts) == 0 && hs[0] > 0;
    ok = ok && sa_group_call(SWAPAGENT_CALL_BACKWARD_ENTER, g, opts) == 0;
    for (int k = 0; ok && k < 3; k++) ok = abi.unpack(hs[k]) == saves[k];
    ok = ok && sa_group_call(SWAPAGENT_CALL_BACKWARD_EXIT, g, opts) == 0;
    if (!ok) atomic_fetch_add(&thread_failures, 1);
  }
  return NULL;
}

static void run_threads(void) {
  check(queueing() == 1, "queueing", "SWAPAGENT_CALL_QUEUEING");
  pthread_t t[THREADS];
  for (intptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, calls, (void *)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  check(atomic_load(&thread_failures) == 0, "threads", "%d threads x %d regions: %d failed", THREADS, ROUNDS,
        atomic_load(&thread_failures));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: sa-queued off|safe|outputs-only|threads\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (sa_abi_load("sa-queued") != 0) return 2;
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) {
    fprintf(stderr, "sa-queued: aclInit/aclrtSetDevice failed\n");
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
