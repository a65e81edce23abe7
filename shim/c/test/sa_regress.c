/* sa_regress.c: the hyper-parallel issue 294 regression checks against the real agent through the C ABI.
 * It runs under LD_PRELOAD=libswapagent.so on the emulator, registers resize-like storage ops
 * (release = aclrtFree + pointer 0, restore = aclrtMalloc), and plays forward/backward over groups
 * layer.0..layer.N-1 for a few steps, as a framework's forward hooks and saved-tensor hooks would:
 * positional and keyword inputs (aliased: the same base saved under several slots), an output that is the
 * next layer's positional input, a parameter, a storage below SWAPAGENT_MIN_BYTES, internal activations
 * (one saved twice), a storage saved by layer.0 and layer.1 without being an input (shared), and a RoPE-like
 * storage passed as a keyword input to every layer and saved by all of them. Every storage holds known
 * bytes, checked after backward. One line per check (`ok   NAME: ...` / `FAIL NAME: ...`), then
 * `N passed, N failed`; exit 1 on any failure, 2 when the agent or the runtime is missing.
 * Usage: sa-regress [layers] [steps]   (defaults 4, 2). Expects SWAPAGENT_MIN_BYTES <= 65536. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "swapagent.h"
#include "test/sa_test.h"

#define BIG (256u * 1024u) /* above the default 64 KiB threshold */
#define TINY 4096u         /* below it */
#define MAX_LAYERS 16
#define MAX_STORAGES 256
#define MAX_HANDLES 8192

/* The ABI, looked up at run time: the program never links the agent. */
/* A framework storage: its base moves on restore, its bytes never change. */
typedef struct {
  char name[32];
  uintptr_t ptr;
  size_t n;
  unsigned seed;
  int releases; /* by the agent's release op, this step */
  int live;     /* allocated by this program and not yet freed */
} storage;

static storage st[MAX_STORAGES];
static int nst;
static struct {
  int64_t h;
  int s;
} hmap[MAX_HANDLES];
static int nh;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* the agent may call the ops from any thread */

static unsigned char pattern(const storage *s, size_t i) {
  return (unsigned char)((s->seed * 2654435761u + (unsigned)i * 40503u) >> 13);
}

static int new_storage(const char *name, size_t n, unsigned seed) {
  if (nst == MAX_STORAGES) {
    fprintf(stderr, "sa-regress: too many storages\n");
    exit(2);
  }
  storage *s = &st[nst];
  snprintf(s->name, sizeof s->name, "%s", name);
  s->n = n;
  s->seed = seed;
  void *p = NULL;
  if (aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST) != 0) {
    fprintf(stderr, "sa-regress: aclrtMalloc(%zu) failed\n", n);
    exit(2);
  }
  unsigned char *host = malloc(n);
  if (host == NULL) exit(2);
  for (size_t i = 0; i < n; i++) host[i] = pattern(s, i);
  if (aclrtMemcpy(p, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE) != 0) {
    fprintf(stderr, "sa-regress: aclrtMemcpy to device failed\n");
    exit(2);
  }
  free(host);
  s->ptr = (uintptr_t)p;
  s->live = 1;
  return nst++;
}

static void free_storage(int i) {
  pthread_mutex_lock(&mu);
  if (st[i].live && st[i].ptr != 0) aclrtFree((void *)st[i].ptr);
  st[i].ptr = 0;
  st[i].live = 0;
  pthread_mutex_unlock(&mu);
}

static uintptr_t ptr_of(int i) {
  pthread_mutex_lock(&mu);
  uintptr_t p = st[i].ptr;
  pthread_mutex_unlock(&mu);
  return p;
}

/* intact copies storage i back to host and compares every byte with its pattern. */
static int intact(int i, char *why, size_t cap) {
  uintptr_t p = ptr_of(i);
  if (p == 0) {
    snprintf(why, cap, "%s has no device memory (released)", st[i].name);
    return 0;
  }
  unsigned char *host = malloc(st[i].n);
  if (host == NULL) exit(2);
  aclError rc = aclrtMemcpy(host, st[i].n, (void *)p, st[i].n, ACL_MEMCPY_DEVICE_TO_HOST);
  if (rc != 0) {
    snprintf(why, cap, "%s: aclrtMemcpy back failed: %d", st[i].name, rc);
    free(host);
    return 0;
  }
  for (size_t k = 0; k < st[i].n; k++) {
    if (host[k] != pattern(&st[i], k)) {
      snprintf(why, cap, "%s: byte %zu is 0x%02x, want 0x%02x", st[i].name, k, host[k], pattern(&st[i], k));
      free(host);
      return 0;
    }
  }
  free(host);
  snprintf(why, cap, "%s: %zu bytes intact", st[i].name, st[i].n);
  return 1;
}

static int storage_of(int64_t h) {
  for (int k = 0; k < nh; k++)
    if (hmap[k].h == h) return hmap[k].s;
  return -1;
}

/* The storage ops: the framework's resize_(0) and resize_(n). */
static int op_release(void *ctx, int64_t h, uintptr_t ptr, size_t nbytes) {
  (void)ctx;
  pthread_mutex_lock(&mu);
  int i = storage_of(h), rc = -1;
  if (i >= 0 && st[i].ptr == ptr && ptr != 0 && nbytes == st[i].n && aclrtFree((void *)ptr) == 0) {
    st[i].ptr = 0;
    st[i].releases++;
    rc = 0;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

static uintptr_t op_restore(void *ctx, int64_t h, size_t nbytes) {
  (void)ctx;
  pthread_mutex_lock(&mu);
  int i = storage_of(h);
  uintptr_t r = 0;
  if (i >= 0 && nbytes == st[i].n) {
    if (st[i].ptr == 0) {
      void *p = NULL;
      if (aclrtMalloc(&p, nbytes, ACL_MEM_MALLOC_HUGE_FIRST) == 0) st[i].ptr = (uintptr_t)p;
    }
    r = st[i].ptr;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

/* One save slot of a layer: which storage, under which role. */
typedef struct {
  const char *role; /* the check name: input.positional, input.keyword.alias, internal, ... */
  int s;
  uint32_t flags;
  int want_reason; /* right after region exit under the ownership model */
  int internal;    /* must reach host after the next group's exit */
  int64_t h;
} slot;

#define MAX_SLOTS 16

static int64_t save(const char *group, slot *sl) {
  int64_t h = abi.save(group, ptr_of(sl->s), st[sl->s].n, sl->flags);
  if (h >= 0) {
    pthread_mutex_lock(&mu);
    if (nh < MAX_HANDLES) hmap[nh++] = (typeof(hmap[0])){h, sl->s};
    pthread_mutex_unlock(&mu);
  }
  sl->h = h;
  return h;
}

static const char *reason_name(int r) {
  static const char *names[] = {"internal", "input", "output", "protected", "param", "shared", "small", "duplicate"};
  return r >= 0 && r < 8 ? names[r] : "error";
}



int main(int argc, char **argv) {
  int layers = argc > 1 ? atoi(argv[1]) : 4;
  int steps = argc > 2 ? atoi(argv[2]) : 2;
  if (layers < 2 || layers > MAX_LAYERS || steps < 1 || steps > 8) {
    fprintf(stderr, "usage: sa-regress [layers 2..%d] [steps 1..8]\n", MAX_LAYERS);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* every check line is out even if the process dies */
  if (sa_abi_load("sa-regress") != 0) return 2;
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) {
    fprintf(stderr, "sa-regress: aclInit/aclrtSetDevice failed\n");
    return 2;
  }
  int rc = abi.set_ops(op_release, op_restore, NULL);
  check(rc == 0, "abi.set_storage_ops", "rc %d", rc);

  /* Persistent storages: the RoPE-like table every layer takes as a keyword input, and the weights. */
  int rope = new_storage("rope", BIG, 1);
  int w[MAX_LAYERS];
  for (int i = 0; i < layers; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "w%d", i);
    w[i] = new_storage(nm, BIG, 100 + i);
  }
  for (int step = 1; step <= steps; step++) {
    /* Per-step activations: fresh storages, as a framework's forward makes them. */
    char nm[32];
    int x0 = new_storage("x0", BIG, 1000 * step);
    int cross = new_storage("cross", BIG, 1000 * step + 1); /* saved by layer.0 and layer.1, not an input */
    int act[MAX_LAYERS], act2[MAX_LAYERS], tiny[MAX_LAYERS], out[MAX_LAYERS];
    slot slots[MAX_LAYERS][MAX_SLOTS];
    int nslots[MAX_LAYERS];
    char group[MAX_LAYERS][16];
    for (int i = 0; i < layers; i++) {
      unsigned seed = 1000 * step + 10 * (i + 1);
      snprintf(nm, sizeof nm, "act%d", i);
      act[i] = new_storage(nm, BIG, seed);
      snprintf(nm, sizeof nm, "act2_%d", i);
      act2[i] = new_storage(nm, BIG, seed + 1);
      snprintf(nm, sizeof nm, "tiny%d", i);
      tiny[i] = new_storage(nm, TINY, seed + 2);
      snprintf(nm, sizeof nm, "out%d", i);
      out[i] = new_storage(nm, BIG, seed + 3);
      snprintf(group[i], sizeof group[i], "layer.%d", i);
    }
    pthread_mutex_lock(&mu);
    for (int k = 0; k < nst; k++) st[k].releases = 0;
    pthread_mutex_unlock(&mu);

    /* Forward. */
    for (int i = 0; i < layers; i++) {
      const char *g = group[i];
      int x = i == 0 ? x0 : out[i - 1];
      /* Positional x; keyword rope, given twice (a nested kwarg such as (cos, cos)). */
      uintptr_t in[3] = {ptr_of(x), ptr_of(rope), ptr_of(rope)};
      rc = sa_enter(g, in, 3, 1, NULL, 0, 0);
      char name[96];
      snprintf(name, sizeof name, "step%d %s region_enter keyword", step, g);
      check(rc == 0, name, "rc %d", rc);
      slot *sl = slots[i];
      int n = 0;
      sl[n++] = (slot){"input.positional", x, 0, SWAPAGENT_KEEP_INPUT, 0, -1};
      sl[n++] = (slot){"input.positional.alias", x, 0, SWAPAGENT_KEEP_DUPLICATE, 0, -1};
      sl[n++] = (slot){"input.keyword", rope, 0, SWAPAGENT_KEEP_INPUT, 0, -1};
      sl[n++] = (slot){"input.keyword.alias", rope, 0, SWAPAGENT_KEEP_DUPLICATE, 0, -1};
      sl[n++] = (slot){"param", w[i], SWAPAGENT_SAVE_PARAM, SWAPAGENT_KEEP_PARAM, 0, -1};
      sl[n++] = (slot){"small", tiny[i], 0, SWAPAGENT_KEEP_SMALL, 0, -1};
      sl[n++] = (slot){"internal", act[i], 0, SWAPAGENT_KEEP_INTERNAL, 1, -1};
      sl[n++] = (slot){"internal.duplicate", act[i], 0, SWAPAGENT_KEEP_DUPLICATE, 1, -1};
      sl[n++] = (slot){"internal", act2[i], 0, SWAPAGENT_KEEP_INTERNAL, 1, -1};
      if (i <= 1) /* layer.0 sees it internal at its exit; layer.1's save makes both shared */
        sl[n++] = (slot){"shared", cross, 0, i == 0 ? SWAPAGENT_KEEP_INTERNAL : SWAPAGENT_KEEP_SHARED, 0, -1};
      sl[n++] = (slot){"output", out[i], 0, SWAPAGENT_KEEP_OUTPUT, 0, -1};
      nslots[i] = n;
      int saves_ok = 1;
      for (int k = 0; k < n; k++)
        if (save(g, &sl[k]) < 0) {
          snprintf(name, sizeof name, "step%d %s abi.save %s", step, g, sl[k].role);
          check(0, name, "%s: rc %lld", st[sl[k].s].name, (long long)sl[k].h);
          saves_ok = 0;
        }
      if (saves_ok) {
        snprintf(name, sizeof name, "step%d %s abi.save", step, g);
        check(1, name, "%d saves", n);
      }
      uintptr_t outs[1] = {ptr_of(out[i])};
      rc = abi.exit(g, outs, 1);
      snprintf(name, sizeof name, "step%d %s abi.region_exit", step, g);
      check(rc == 0, name, "rc %d", rc);

      /* Right after exit: every kept storage stays on device with its reason; internal ones are leaving. */
      for (int k = 0; k < n; k++) {
        int r = abi.reason(sl[k].h), s = abi.state(sl[k].h);
        snprintf(name, sizeof name, "step%d %s %s", step, g, sl[k].role);
        if (sl[k].internal)
          check(r == sl[k].want_reason && (s == SWAPAGENT_STATE_D2H || s == SWAPAGENT_STATE_HOST), name,
                "%s: reason %d %s (want %d), state %d (want 1 d2h or 2 host)", st[sl[k].s].name, r, reason_name(r),
                sl[k].want_reason, s);
        else if (strcmp(sl[k].role, "shared") == 0 && i == 0)
          check(r == SWAPAGENT_KEEP_INTERNAL, name, "%s: reason %d %s (want 0 until layer.1 saves it too)",
                st[sl[k].s].name, r, reason_name(r));
        else
          check(r == sl[k].want_reason && s == SWAPAGENT_STATE_DEVICE, name, "%s: reason %d %s (want %d), state %d (want 0)",
                st[sl[k].s].name, r, reason_name(r), sl[k].want_reason, s);
      }
      /* The previous group's offload completed at this exit: its internals are on host and released,
       * its inputs and output still on device, and the storage layer.1 also saved is shared in both. */
      if (i > 0) {
        slot *ps = slots[i - 1];
        for (int k = 0; k < nslots[i - 1]; k++) {
          int r = abi.reason(ps[k].h), s = abi.state(ps[k].h);
          uintptr_t p = ptr_of(ps[k].s);
          snprintf(name, sizeof name, "step%d %s %s after %s exit", step, group[i - 1], ps[k].role, g);
          if (ps[k].internal)
            check(s == SWAPAGENT_STATE_HOST && p == 0, name, "%s: state %d (want 2 host), base %#lx (want 0: released)",
                  st[ps[k].s].name, s, (unsigned long)p);
          else if (strcmp(ps[k].role, "shared") == 0)
            check(r == SWAPAGENT_KEEP_SHARED && s == SWAPAGENT_STATE_DEVICE && p != 0, name,
                  "%s: reason %d %s (want 5 shared), state %d (want 0), base %#lx", st[ps[k].s].name, r, reason_name(r),
                  s, (unsigned long)p);
          else
            check(s == SWAPAGENT_STATE_DEVICE && p != 0, name, "%s: reason %d %s, state %d (want 0), base %#lx (want non-zero)",
                  st[ps[k].s].name, r, reason_name(r), s, (unsigned long)p);
        }
      }
    }

    /* Backward, last layer first: every saved storage comes back with its bytes. */
    for (int i = layers - 1; i >= 0; i--) {
      const char *g = group[i];
      char name[96], why[160];
      rc = abi.bwd_enter(g);
      snprintf(name, sizeof name, "step%d %s abi.backward_enter", step, g);
      check(rc == 0, name, "rc %d", rc);
      for (int k = 0; k < nslots[i]; k++) {
        slot *sl = &slots[i][k];
        uintptr_t p = sl->h >= 0 ? abi.unpack(sl->h) : 0;
        int s = abi.state(sl->h);
        int ok = p != 0 && p == ptr_of(sl->s) && s == SWAPAGENT_STATE_DEVICE && intact(sl->s, why, sizeof why);
        if (p == 0 || p != ptr_of(sl->s))
          snprintf(why, sizeof why, "%s: unpack gave %#lx, storage base %#lx", st[sl->s].name, (unsigned long)p,
                   (unsigned long)ptr_of(sl->s));
        else if (s != SWAPAGENT_STATE_DEVICE)
          snprintf(why, sizeof why, "%s: state %d after unpack (want 0)", st[sl->s].name, s);
        snprintf(name, sizeof name, "step%d %s backward %s", step, g, sl->role);
        check(ok, name, "%s", why);
      }
      rc = abi.bwd_exit(g);
      snprintf(name, sizeof name, "step%d %s abi.backward_exit", step, g);
      check(rc == 0, name, "rc %d", rc);
    }
    /* The storages every layer shares survive the whole step. */
    {
      char name[96], why[160];
      snprintf(name, sizeof name, "step%d shared.rope after backward", step);
      check(intact(rope, why, sizeof why), name, "%s", why);
      snprintf(name, sizeof name, "step%d shared.cross after backward", step);
      check(intact(cross, why, sizeof why), name, "%s", why);
      /* A storage saved twice in one group moves once. */
      for (int i = 0; i < layers; i++) {
        pthread_mutex_lock(&mu);
        int ra = st[act[i]].releases, rb = st[act2[i]].releases;
        pthread_mutex_unlock(&mu);
        snprintf(name, sizeof name, "step%d layer.%d internal.duplicate moves once", step, i);
        check(ra == 1 && rb == 1, name, "%s released %d times (saved twice), %s %d times (want 1 each)",
              st[act[i]].name, ra, st[act2[i]].name, rb);
      }
    }
    free_storage(x0);
    free_storage(cross);
    for (int i = 0; i < layers; i++) {
      free_storage(act[i]);
      free_storage(act2[i]);
      free_storage(tiny[i]);
      free_storage(out[i]);
    }
  }

  /* The stats agree: exactly the internal storages moved, nothing external was released. */
  char js[1 << 16];
  int n = abi.stats(js, sizeof js);
  check(n > 0 && (size_t)n < sizeof js, "stats.json", "%d bytes", n);
  if (n > 0 && (size_t)n < sizeof js) {
    long long off = json_num(js, NULL, "offloaded_storages"), offb = json_num(js, NULL, "offloaded_bytes");
    long long ext = json_num(js, NULL, "released_external"), kin = json_num(js, "kept", "input");
    long long kout = json_num(js, "kept", "output"), kdup = json_num(js, "kept", "duplicate");
    long long want = 2LL * layers * steps;
    check(off == want && offb == want * BIG, "stats.offloaded_storages",
          "%lld storages, %lld bytes (want %lld and %lld: two internal storages per layer and step, the one saved twice "
          "counted once)",
          off, offb, want, want * BIG);
    check(ext == 0, "stats.released_external", "%lld (want 0)", ext);
    check(kin > 0, "stats.kept.input", "%lld (want > 0)", kin);
    check(kout > 0 && kdup > 0, "stats.kept.output", "output %lld, duplicate %lld (want > 0)", kout, kdup);
  }
  for (int k = 0; k < nst; k++)
    if (st[k].live) free_storage(k);
  aclrtResetDevice(0);
  aclFinalize();
  printf("%d passed, %d failed\n", sa_passed, sa_failed);
  return sa_failed ? 1 : 0;
}
