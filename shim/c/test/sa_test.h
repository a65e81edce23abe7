/* sa_test.h: helpers the C test programs share (included by sa_regress.c and sa_fuzz.c). */
#ifndef SWAPAGENT_SA_TEST_H_
#define SWAPAGENT_SA_TEST_H_

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* SA_LOOKUP fills ptr with the ABI function sym of the preloaded agent; prog's main returns 2 without it. */
#define SA_LOOKUP(prog, ptr, sym)                                                        \
  do {                                                                                   \
    *(void **)&(ptr) = dlsym(RTLD_DEFAULT, sym);                                         \
    if ((ptr) == NULL) {                                                                 \
      fprintf(stderr, "%s: %s not found: is libswapagent.so preloaded?\n", prog, sym);   \
      return 2;                                                                          \
    }                                                                                    \
  } while (0)

#endif
