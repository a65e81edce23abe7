/* dl.c: the dynamic-linker side of interception. It bootstraps the real dlsym with dlvsym (never the
 * private _dl_sym), resolves real runtime functions lazily (RTLD_NEXT, then a walk of the loaded objects
 * for a runtime dlopen'ed RTLD_LOCAL after start), hooks dlsym so a framework's handle-scoped lookup of an
 * intercepted name gets our interposer (or a launch trampoline for any other aclnn op), and hooks
 * dladdr/dladdr1 so an interposer's address describes the real function (MindSpore finds the toolkit
 * root with dladdr(&aclrtMalloc)). No hook calls anything that may call dlsym. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "sa.h"

typedef void *(*sa_dlsym_t)(void *, const char *);
typedef int (*sa_dladdr_t)(const void *, Dl_info *);
typedef int (*sa_dladdr1_t)(const void *, Dl_info *, void **, int);

static sa_dlsym_t real_dlsym;
static sa_dladdr_t real_dladdr;
static sa_dladdr1_t real_dladdr1;
static void *self_base; /* load address of libswapagent.so */

#if defined(__aarch64__)
#define SA_GLIBC_OLD "GLIBC_2.17"
#else
#define SA_GLIBC_OLD "GLIBC_2.2.5"
#endif

/* Racing initialisations store the same values, so no lock is needed. */
void sa_dl_bootstrap(void) {
  if (__atomic_load_n(&real_dladdr1, __ATOMIC_ACQUIRE) != NULL) return;
  sa_dlsym_t d = (sa_dlsym_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (d == NULL) d = (sa_dlsym_t)dlvsym(RTLD_NEXT, "dlsym", SA_GLIBC_OLD);
  if (d == NULL) return;
  __atomic_store_n(&real_dlsym, d, __ATOMIC_RELEASE);
  sa_dladdr_t a = (sa_dladdr_t)d(RTLD_NEXT, "dladdr");
  Dl_info self;
  if (a != NULL && a((void *)sa_dl_bootstrap, &self) != 0) self_base = self.dli_fbase;
  __atomic_store_n(&real_dladdr, a, __ATOMIC_RELEASE);
  __atomic_store_n(&real_dladdr1, (sa_dladdr1_t)d(RTLD_NEXT, "dladdr1"), __ATOMIC_RELEASE);
}

void *sa_real_dlsym(void *handle, const char *name) {
  if (real_dlsym == NULL) sa_dl_bootstrap();
  return real_dlsym ? real_dlsym(handle, name) : NULL;
}

static int sa_is_self(const void *p) {
  Dl_info di;
  if (p == NULL || real_dladdr == NULL) return 0;
  return real_dladdr(p, &di) != 0 && di.dli_fbase == self_base;
}

/* ---- Walk of loaded objects: names are collected under the loader's lock, looked up after it. ---- */
#define SA_MAX_OBJS 1024
struct sa_walk {
  const char *names[SA_MAX_OBJS];
  int n;
  unsigned long long adds;
};

static int sa_walk_cb(struct dl_phdr_info *info, size_t size, void *data) {
  struct sa_walk *w = data;
  (void)size;
  w->adds = info->dlpi_adds;
  if (info->dlpi_name == NULL || info->dlpi_name[0] == 0) return 0; /* the executable: its global scope holds us */
  if ((void *)info->dlpi_addr == self_base) return 0;
  if (w->n < SA_MAX_OBJS) w->names[w->n++] = info->dlpi_name;
  return 0;
}

static _Atomic unsigned long long neg_adds[SA_NFN]; /* loader generation of the last failed resolution */

static void *sa_find(const char *name, int id) {
  void *p = sa_real_dlsym(RTLD_NEXT, name); /* the next definition after us in the global scope */
  if (p != NULL && !sa_is_self(p)) return p;
  static SA_TLS int walking;
  if (walking) return NULL;
  walking = 1;
  struct sa_walk w;
  w.n = 0;
  w.adds = 0;
  dl_iterate_phdr(sa_walk_cb, &w);
  p = NULL;
  if (id <= 0 || atomic_load_explicit(&neg_adds[id], memory_order_relaxed) != w.adds) {
    for (int i = 0; i < w.n && p == NULL; i++) {
      void *h = dlopen(w.names[i], RTLD_LAZY | RTLD_NOLOAD);
      if (h == NULL) continue;
      void *q = sa_real_dlsym(h, name);
      if (q != NULL && !sa_is_self(q)) p = q;
      dlclose(h);
    }
    if (p == NULL && id > 0) atomic_store_explicit(&neg_adds[id], w.adds, memory_order_relaxed);
  }
  walking = 0;
  return p;
}

void *sa_resolve(int id) {
  if (id <= 0 || id >= SA_NFN) return NULL;
  void *p = sa_find(sa_names[id], id);
  if (p == NULL) return NULL;
  void *expected = NULL;
  if (!atomic_compare_exchange_strong_explicit(&sa_real[id], &expected, p, memory_order_acq_rel,
                                               memory_order_acquire))
    p = expected; /* another thread won; keep one answer */
  return p;
}

int sa_lookup_name(const char *name) {
  for (int i = 1; i < SA_NFN; i++) {
    if (sa_interposer[i] != NULL && strcmp(sa_names[i], name) == 0) return i;
  }
  return 0;
}

static int sa_is_launch_name(const char *name) {
  static const char suffix[] = "GetWorkspaceSize";
  if (strncmp(name, "aclnn", 5) != 0 || name[5] == 0) return 0;
  size_t n = strlen(name), s = sizeof suffix - 1;
  return !(n >= s && strcmp(name + n - s, suffix) == 0);
}

/* The slow path of the dlsym hook: an intercepted name (id > 0) or an aclnn launch (id < 0). */
static __attribute__((noinline)) void *sa_dlsym_hook(void *handle, const char *name, int id) {
  sa_depth++;
  void *real;
  if (handle == RTLD_NEXT || handle == RTLD_DEFAULT) {
    real = id > 0 ? sa_real_fn(id) : sa_find(name, 0);
  } else {
    real = sa_real_dlsym(handle, name);
    if (real != NULL && sa_is_self(real)) real = id > 0 ? sa_real_fn(id) : NULL;
    if (real != NULL && id > 0) {
      void *expected = NULL;
      atomic_compare_exchange_strong(&sa_real[id], &expected, real);
    }
  }
  void *out = NULL;
  if (real != NULL) out = id > 0 ? sa_interposer[id] : sa_tramp_for(name, real);
  sa_depth--;
  return out;
}

/* Everything that is not an intercepted name goes straight to the real dlsym as a tail call, so the
 * caller the real dlsym sees (RTLD_NEXT, local scopes) is the original one. */
SA_EXPORT void *dlsym(void *handle, const char *name) {
  if (real_dlsym == NULL) sa_dl_bootstrap();
  if (name[0] == 'a' && name[1] == 'c' && name[2] == 'l' && sa_depth == 0 &&
      atomic_load_explicit(&sa_forked, memory_order_relaxed) == 0) {
    int id = sa_lookup_name(name);
    if (id == 0 && sa_is_launch_name(name)) id = -1;
    if (id != 0) return sa_dlsym_hook(handle, name, id);
  }
  if (real_dlsym == NULL) return NULL;
  return real_dlsym(handle, name);
}

/* An interposer or trampoline address maps to the real function it stands for. */
static const void *sa_unwrap(const void *addr) {
  if (addr == NULL) return addr;
  for (int i = 1; i < SA_NFN; i++) {
    if (sa_interposer[i] == addr) {
      void *r = sa_real_fn(i);
      return r ? r : addr;
    }
  }
  void *r;
  if (sa_tramp_real(addr, &r) && r != NULL) return r;
  return addr;
}

SA_EXPORT int dladdr(const void *addr, Dl_info *info) {
  if (real_dladdr == NULL) sa_dl_bootstrap();
  if (real_dladdr == NULL) return 0;
  if (sa_depth != 0) return real_dladdr(addr, info);
  sa_depth++;
  const void *a = sa_unwrap(addr);
  sa_depth--;
  return real_dladdr(a, info);
}

SA_EXPORT int dladdr1(const void *addr, Dl_info *info, void **extra, int flags) {
  if (real_dladdr1 == NULL) sa_dl_bootstrap();
  if (real_dladdr1 == NULL) return 0;
  if (sa_depth != 0) return real_dladdr1(addr, info, extra, flags);
  sa_depth++;
  const void *a = sa_unwrap(addr);
  sa_depth--;
  return real_dladdr1(a, info, extra, flags);
}
