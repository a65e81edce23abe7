/* sa_test.h: helpers the C test programs share (included by sa_regress.c, sa_fuzz.c and sa_queued.c). */
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
  __typeof__(&swapagent_save) save;
  __typeof__(&swapagent_region_exit) exit;
  __typeof__(&swapagent_protect) protect;
  __typeof__(&swapagent_backward_enter) bwd_enter;
  __typeof__(&swapagent_unpack) unpack;
  __typeof__(&swapagent_backward_exit) bwd_exit;
  __typeof__(&swapagent_state) state;
  __typeof__(&swapagent_keep_reason) reason;
  __typeof__(&swapagent_stats_json) stats;
  __typeof__(&swapagent_call) call;
  __typeof__(&swapagent_unpack_resident) unpack_resident;
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
  SA_LOOKUP(save, "swapagent_save");
  SA_LOOKUP(exit, "swapagent_region_exit");
  SA_LOOKUP(protect, "swapagent_protect");
  SA_LOOKUP(bwd_enter, "swapagent_backward_enter");
  SA_LOOKUP(unpack, "swapagent_unpack");
  SA_LOOKUP(bwd_exit, "swapagent_backward_exit");
  SA_LOOKUP(state, "swapagent_state");
  SA_LOOKUP(reason, "swapagent_keep_reason");
  SA_LOOKUP(stats, "swapagent_stats_json");
  SA_LOOKUP(call, "swapagent_call");
  SA_LOOKUP(unpack_resident, "swapagent_unpack_resident");
#undef SA_LOOKUP
  return 0;
}

/* A call record of kind k with the fields given (designated initializers), for abi.call. */
#define SA_CALL(k, ...) (&(struct swapagent_call){.size = sizeof(struct swapagent_call), .kind = (k), __VA_ARGS__})

/* The record forms the tests use most, as functions of their arguments; opts as swapagent_call's. */
__attribute__((unused)) static int sa_enter(const char *g, const uintptr_t *in, size_t n, size_t npos, const char *text,
                                            size_t text_len, uint32_t opts) {
  return (int)abi.call(SA_CALL(SWAPAGENT_CALL_REGION_ENTER, .group = g, .ptrs = in, .n = n, .n_positional = npos,
                               .text = text, .text_len = text_len),
                       opts);
}

__attribute__((unused)) static int sa_exit_with(const char *g, const uintptr_t *out, size_t n_out,
                                                const uintptr_t *save_ptrs, const size_t *save_nbytes,
                                                const uint32_t *save_flags, size_t n_save, int64_t *handles,
                                                const uintptr_t *desc_ptrs, size_t n_desc, const char *text,
                                                size_t text_len, uint32_t opts) {
  return (int)abi.call(SA_CALL(SWAPAGENT_CALL_REGION_EXIT, .group = g, .ptrs = out, .n = n_out,
                               .save_ptrs = save_ptrs, .save_nbytes = save_nbytes, .save_flags = save_flags,
                               .n_save = n_save, .handles = handles, .desc_ptrs = desc_ptrs, .n_desc = n_desc,
                               .text = text, .text_len = text_len),
                       opts);
}

__attribute__((unused)) static int sa_group_call(uint32_t kind, const char *g, uint32_t opts) {
  return (int)abi.call(SA_CALL(kind, .group = g), opts);
}

/* sa_text joins n description lines into buf (each ended by a NUL); its length. */
__attribute__((unused)) static size_t sa_text(char *buf, size_t cap, const char *const *lines, size_t n) {
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    const char *l = lines[i] != NULL ? lines[i] : "";
    size_t k = strlen(l) + 1;
    if (len + k > cap) break;
    memcpy(buf + len, l, k);
    len += k;
  }
  return len;
}

#endif
