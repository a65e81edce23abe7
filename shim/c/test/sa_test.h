/* sa_test.h: helpers the C test programs share (included by sa_regress.c, sa_fuzz.c and sa_deferred.c). */
#ifndef SWAPAGENT_SA_TEST_H_
#define SWAPAGENT_SA_TEST_H_

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swapagent.h"

/* check prints one check's line (`ok   NAME: ...` or `FAIL NAME: ...`, the rest as printf's fmt) and counts
 * it in sa_passed or sa_failed, for the program's closing `N passed, N failed`. */
static int sa_passed __attribute__((unused)), sa_failed __attribute__((unused));
__attribute__((unused, format(printf, 3, 4))) static void check(int ok, const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s %s: ", ok ? "ok  " : "FAIL", name);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (ok)
    sa_passed++;
  else
    sa_failed++;
}

/* json_num returns the number under key in the stats object (obj NULL) or in its member object obj; -1 when
 * absent. Keys are matched at their own depth only, so "offloaded_bytes" of a group never answers for the
 * top level. The stats JSON has no braces inside strings. */
static inline long long json_num(const char *js, const char *obj, const char *key) {
  char k[64], o[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  snprintf(o, sizeof o, "\"%s\":{", obj != NULL ? obj : "");
  int depth = 0, want = obj != NULL ? 2 : 1, inside = obj == NULL;
  for (const char *p = js; *p; p++) {
    if (depth == 1 && obj != NULL && strncmp(p, o, strlen(o)) == 0) inside = 1;
    if (*p == '{') depth++;
    if (*p == '}') {
      if (depth == want && obj != NULL && inside) return -1;
      depth--;
    }
    if (depth == want && inside && strncmp(p, k, strlen(k)) == 0) return strtoll(p + strlen(k), NULL, 10);
  }
  return -1;
}

/* abi is the control ABI of the preloaded agent, reached through dlsym as the framework companions reach it
 * (its types are swapagent.h's prototypes); sa_abi_load fills it. */
static struct {
  __typeof__(&swapagent_set_storage_ops) set_ops;
  __typeof__(&swapagent_region_enter) enter;
  __typeof__(&swapagent_region_enter_kw) enter_kw;
  __typeof__(&swapagent_region_enter_desc) enter_desc;
  __typeof__(&swapagent_describe) describe;
  __typeof__(&swapagent_save) save;
  __typeof__(&swapagent_save_n) save_n;
  __typeof__(&swapagent_region_exit) exit;
  __typeof__(&swapagent_region_end) end;
  __typeof__(&swapagent_protect) protect;
  __typeof__(&swapagent_group_streams) streams;
  __typeof__(&swapagent_holders) holders;
  __typeof__(&swapagent_backward_enter) bwd_enter;
  __typeof__(&swapagent_unpack) unpack;
  __typeof__(&swapagent_backward_exit) bwd_exit;
  __typeof__(&swapagent_state) state;
  __typeof__(&swapagent_keep_reason) reason;
  __typeof__(&swapagent_stats_json) stats;
} abi __attribute__((unused));

/* sa_abi_load looks up every function of abi: 0, or 2 (prog's exit code) with a line on stderr for the
 * first one missing. */
static inline int sa_abi_load(const char *prog) {
#define SA_LOOKUP(field, sym)                                                            \
  do {                                                                                   \
    *(void **)&abi.field = dlsym(RTLD_DEFAULT, sym);                                     \
    if (abi.field == NULL) {                                                             \
      fprintf(stderr, "%s: %s not found: is libswapagent.so preloaded?\n", prog, sym);   \
      return 2;                                                                          \
    }                                                                                    \
  } while (0)
  SA_LOOKUP(set_ops, "swapagent_set_storage_ops");
  SA_LOOKUP(enter, "swapagent_region_enter");
  SA_LOOKUP(enter_kw, "swapagent_region_enter_kw");
  SA_LOOKUP(enter_desc, "swapagent_region_enter_desc");
  SA_LOOKUP(describe, "swapagent_describe");
  SA_LOOKUP(save, "swapagent_save");
  SA_LOOKUP(save_n, "swapagent_save_n");
  SA_LOOKUP(exit, "swapagent_region_exit");
  SA_LOOKUP(end, "swapagent_region_end");
  SA_LOOKUP(protect, "swapagent_protect");
  SA_LOOKUP(streams, "swapagent_group_streams");
  SA_LOOKUP(holders, "swapagent_holders");
  SA_LOOKUP(bwd_enter, "swapagent_backward_enter");
  SA_LOOKUP(unpack, "swapagent_unpack");
  SA_LOOKUP(bwd_exit, "swapagent_backward_exit");
  SA_LOOKUP(state, "swapagent_state");
  SA_LOOKUP(reason, "swapagent_keep_reason");
  SA_LOOKUP(stats, "swapagent_stats_json");
#undef SA_LOOKUP
  return 0;
}

#endif
