/* swap.c: the swapagent ABI wiring of decoder-sim: dlsym lookup, the storage ops the agent calls
 * (release = the framework's resize_(0), restore = resize_(nbytes)), and the handle -> storage map. The
 * map is guarded by a mutex since the agent may call the storage ops from its own thread; no lock is held
 * while calling into the agent.
 *
 * Every ABI call is made on the main thread and first drains the launch queue (ops_drain; a no-op with
 * --launch inline): the ABI calls are host-order events, so when the agent sees one, every launch the
 * program made before it has been issued (the agent has intercepted it on the launch thread) and none made
 * after it has. */
#include "swap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "swapagent.h"

static struct {
  __typeof__(&swapagent_abi_version) abi_version;
  __typeof__(&swapagent_set_storage_ops) set_storage_ops;
  __typeof__(&swapagent_region_enter) region_enter;
  __typeof__(&swapagent_call) call; /* for the keyword inputs' region enter; NULL: a v1-only agent */
  __typeof__(&swapagent_save) save;
  __typeof__(&swapagent_region_exit) region_exit;
  __typeof__(&swapagent_backward_enter) backward_enter;
  __typeof__(&swapagent_unpack) unpack;
  __typeof__(&swapagent_backward_exit) backward_exit;
} abi;

static int present;

typedef struct handle_entry {
  int64_t handle;
  storage *st;
  char group[32];
} handle_entry;

static pthread_mutex_t map_mu = PTHREAD_MUTEX_INITIALIZER;
static handle_entry *entries;
static size_t n_entries, cap_entries;
static struct {
  uint64_t saves, unpacks, releases, restores, moved, errors;
} counts;

static void *lookup(const char *name) { return dlsym(RTLD_DEFAULT, name); }

#define LOOKUP(field, name) \
  do {                      \
    void *p = lookup(name); \
    memcpy(&abi.field, &p, sizeof p); \
  } while (0)

/* warn_once reports the first failure of each ABI function. */
static void warn_once(const char *fn, const char *group, long rc) {
  static const char *seen[16];
  pthread_mutex_lock(&map_mu);
  counts.errors++;
  int i = 0;
  for (; i < 16 && seen[i] != NULL; i++)
    if (seen[i] == fn) {
      pthread_mutex_unlock(&map_mu);
      return;
    }
  if (i < 16) seen[i] = fn;
  pthread_mutex_unlock(&map_mu);
  fprintf(stderr, "decoder-sim: %s(%s) returned %ld (ignored; further failures of it are not reported)\n", fn,
          group, rc);
}

/* find_locked returns the storage registered under handle, or NULL. Caller holds map_mu. */
static storage *find_locked(int64_t handle) {
  for (size_t i = 0; i < n_entries; i++)
    if (entries[i].handle == handle) return entries[i].st;
  return NULL;
}

static int release_op(void *ctx, int64_t handle, uintptr_t ptr, size_t nbytes) {
  (void)ctx;
  (void)nbytes;
  pthread_mutex_lock(&map_mu);
  storage *st = find_locked(handle);
  int rc = -1;
  if (st != NULL && (storage_base(st) == ptr || storage_base(st) == 0)) {
    rc = storage_resize(st, 0);
    counts.releases++;
  }
  pthread_mutex_unlock(&map_mu);
  return rc;
}

static uintptr_t restore_op(void *ctx, int64_t handle, size_t nbytes) {
  (void)ctx;
  pthread_mutex_lock(&map_mu);
  storage *st = find_locked(handle);
  uintptr_t base = 0;
  if (st != NULL && nbytes > 0 && storage_resize(st, nbytes) == 0) {
    base = storage_base(st);
    counts.restores++;
  }
  pthread_mutex_unlock(&map_mu);
  return base;
}

int swap_init(void *ctx) {
  LOOKUP(region_enter, "swapagent_region_enter");
  if (abi.region_enter == NULL) return 0;
  LOOKUP(abi_version, "swapagent_abi_version");
  LOOKUP(set_storage_ops, "swapagent_set_storage_ops");
  LOOKUP(call, "swapagent_call");
  LOOKUP(save, "swapagent_save");
  LOOKUP(region_exit, "swapagent_region_exit");
  LOOKUP(backward_enter, "swapagent_backward_enter");
  LOOKUP(unpack, "swapagent_unpack");
  LOOKUP(backward_exit, "swapagent_backward_exit");
  if (abi.set_storage_ops == NULL || abi.save == NULL || abi.region_exit == NULL || abi.backward_enter == NULL ||
      abi.unpack == NULL || abi.backward_exit == NULL) {
    fprintf(stderr, "decoder-sim: swapagent ABI incomplete (swapagent_region_enter without the rest): no swap\n");
    memset(&abi, 0, sizeof abi);
    return 0;
  }
  if (abi.abi_version != NULL && abi.abi_version() != SWAPAGENT_ABI_VERSION)
    fprintf(stderr, "decoder-sim: swapagent ABI version %d, built for %d\n", abi.abi_version(),
            SWAPAGENT_ABI_VERSION);
  int rc = abi.set_storage_ops(release_op, restore_op, ctx);
  if (rc != SWAPAGENT_OK) warn_once("swapagent_set_storage_ops", "-", rc);
  present = 1;
  return 1;
}

int swap_present(void) { return present; }

void swap_region_enter(const char *group, const uintptr_t *inputs, size_t n, size_t n_positional) {
  ops_drain();
  struct swapagent_call c = {.size = sizeof c, .kind = SWAPAGENT_CALL_REGION_ENTER, .group = group, .ptrs = inputs,
                             .n = n, .n_positional = n_positional};
  int rc = abi.call != NULL ? (int)abi.call(&c, SWAPAGENT_OPT_OWN_MEMORY) : abi.region_enter(group, inputs, n);
  if (rc != SWAPAGENT_OK) warn_once(abi.call != NULL ? "swapagent_call" : "swapagent_region_enter", group, rc);
}

int64_t swap_save(const char *group, storage *st, uint32_t flags) {
  ops_drain();
  int64_t h = abi.save(group, storage_base(st), st->nbytes, flags);
  if (h < 0) {
    warn_once("swapagent_save", group, (long)h);
    return -1;
  }
  storage_ref(st);
  pthread_mutex_lock(&map_mu);
  counts.saves++;
  if (n_entries == cap_entries) {
    size_t cap = cap_entries ? cap_entries * 2 : 256;
    handle_entry *e = realloc(entries, cap * sizeof *e);
    if (e == NULL) {
      pthread_mutex_unlock(&map_mu);
      fprintf(stderr, "decoder-sim: out of host memory\n");
      exit(1);
    }
    entries = e;
    cap_entries = cap;
  }
  handle_entry *e = &entries[n_entries++];
  e->handle = h;
  e->st = st;
  snprintf(e->group, sizeof e->group, "%s", group);
  pthread_mutex_unlock(&map_mu);
  return h;
}

void swap_region_exit(const char *group, const uintptr_t *outputs, size_t n) {
  ops_drain();
  int rc = abi.region_exit(group, outputs, n);
  if (rc != SWAPAGENT_OK) warn_once("swapagent_region_exit", group, rc);
}

void swap_backward_enter(const char *group) {
  ops_drain();
  int rc = abi.backward_enter(group);
  if (rc != SWAPAGENT_OK) warn_once("swapagent_backward_enter", group, rc);
}

void swap_unpack(int64_t handle, storage *st) {
  ops_drain();
  uintptr_t r = abi.unpack(handle);
  uintptr_t mine = storage_base(st);
  pthread_mutex_lock(&map_mu);
  counts.unpacks++;
  pthread_mutex_unlock(&map_mu);
  if (r == 0) {
    /* The agent failed: keep using our own pointer (0 if the storage is still released). */
    warn_once("swapagent_unpack", "-", 0);
    return;
  }
  if (r != mine) {
    /* The agent's restore op updates our storage, so the two must agree; report a disagreement. */
    pthread_mutex_lock(&map_mu);
    counts.moved++;
    pthread_mutex_unlock(&map_mu);
    static int reported;
    if (!reported) {
      reported = 1;
      fprintf(stderr, "decoder-sim: swapagent_unpack(%lld) returned %#lx but storage %d is at %#lx\n",
              (long long)handle, (unsigned long)r, st->id, (unsigned long)mine);
    }
  }
}

void swap_backward_exit(const char *group) {
  ops_drain();
  int rc = abi.backward_exit(group);
  if (rc != SWAPAGENT_OK) warn_once("swapagent_backward_exit", group, rc);
  /* The agent forgets the group's handles now: drop our side of the map and its references. */
  storage *drop[256];
  size_t ndrop = 0;
  pthread_mutex_lock(&map_mu);
  size_t w = 0;
  for (size_t i = 0; i < n_entries; i++) {
    if (strcmp(entries[i].group, group) == 0 && ndrop < sizeof drop / sizeof drop[0]) {
      drop[ndrop++] = entries[i].st;
      continue;
    }
    entries[w++] = entries[i];
  }
  n_entries = w;
  pthread_mutex_unlock(&map_mu);
  for (size_t i = 0; i < ndrop; i++) storage_unref(drop[i]);
}

/* scope makes a call that marks a point of the job; an agent older than the kind refuses it, reported once. */
static void scope(uint32_t kind, const char *fn, const char *group) {
  if (!present || abi.call == NULL) return;
  ops_drain();
  struct swapagent_call c = {.size = sizeof c, .kind = kind, .group = group};
  int rc = (int)abi.call(&c, SWAPAGENT_OPT_OWN_MEMORY);
  if (rc != SWAPAGENT_OK) warn_once(fn, group, rc);
}

void swap_scope_enter(const char *group) { scope(SWAPAGENT_CALL_SCOPE_ENTER, "swapagent_call(scope_enter)", group); }

void swap_scope_exit(const char *group) { scope(SWAPAGENT_CALL_SCOPE_EXIT, "swapagent_call(scope_exit)", group); }

void swap_empty_cache(void) { scope(SWAPAGENT_CALL_EMPTY_CACHE, "swapagent_call(empty_cache)", "pool"); }

void swap_summary(void) {
  if (!present) return;
  fprintf(stderr,
          "decoder-sim: agent present: %llu saves, %llu unpacks, %llu releases, %llu restores, %llu moved, "
          "%llu errors\n",
          (unsigned long long)counts.saves, (unsigned long long)counts.unpacks, (unsigned long long)counts.releases,
          (unsigned long long)counts.restores, (unsigned long long)counts.moved, (unsigned long long)counts.errors);
}
