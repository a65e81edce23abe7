/* rt.c: fills decoder-sim's AscendCL function table. `direct` takes the addresses the dynamic linker
 * bound; `dlsym` follows MindSpore's loader: find the toolkit root with dladdr(&aclrtMalloc), then
 * dlopen(<root>/lib64/<lib>, RTLD_LAZY|RTLD_LOCAL) for each of CANN 8's three libraries (libascendcl.so for
 * aclrt*, libnnopbase.so for tensors, scalars and executors, libopapi.so for the aclnn ops) and dlsym every
 * function from the handle of the library that exports it. */
#include "rt.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rt_table rt_fns;
uint64_t rt_calls[RT_FN_COUNT];
void (*rt_fail_hook)(void);

static const char *const rt_names[RT_FN_COUNT] = {
#define X(n, lib) #n,
    DECODER_ACL_FUNCS(X)
#undef X
};

enum { RT_LIB_ACL, RT_LIB_NNOPBASE, RT_LIB_OPAPI, RT_LIB_COUNT };
static const char *const rt_lib_names[RT_LIB_COUNT] = {"libascendcl.so", "libnnopbase.so", "libopapi.so"};

static void rt_load_dlsym(void) {
  Dl_info info;
  memset(&info, 0, sizeof info);
  if (dladdr((void *)&aclrtMalloc, &info) == 0 || info.dli_fname == NULL) {
    fprintf(stderr, "decoder-sim: dladdr(aclrtMalloc) found no library\n");
    exit(1);
  }
  /* The toolkit root is the directory above lib64 (".../latest"), as MindSpore derives it. */
  char root[PATH_MAX];
  const char *lib64 = NULL;
  for (const char *p = strstr(info.dli_fname, "/lib64/"); p != NULL; p = strstr(p + 1, "/lib64/")) lib64 = p;
  if (lib64 == NULL || (size_t)(lib64 - info.dli_fname) >= sizeof root) {
    fprintf(stderr, "decoder-sim: cannot find the toolkit root: dladdr(aclrtMalloc) names %s (no lib64 directory)\n",
            info.dli_fname);
    exit(1);
  }
  size_t n = (size_t)(lib64 - info.dli_fname);
  memcpy(root, info.dli_fname, n);
  root[n] = '\0';
  void *handles[RT_LIB_COUNT];
  char paths[RT_LIB_COUNT][PATH_MAX + 32];
  for (int l = 0; l < RT_LIB_COUNT; l++) {
    snprintf(paths[l], sizeof paths[l], "%s/lib64/%s", root, rt_lib_names[l]);
    handles[l] = dlopen(paths[l], RTLD_LAZY | RTLD_LOCAL);
    if (handles[l] == NULL) {
      fprintf(stderr, "decoder-sim: dlopen %s: %s\n", paths[l], dlerror());
      exit(1);
    }
  }
#define X(name, lib)                                                                     \
  do {                                                                                   \
    void *sym = dlsym(handles[RT_LIB_##lib], #name);                                     \
    if (sym == NULL) {                                                                   \
      fprintf(stderr, "decoder-sim: dlsym %s in %s: not found\n", #name, paths[RT_LIB_##lib]); \
      exit(1);                                                                           \
    }                                                                                    \
    memcpy(&rt_fns.name, &sym, sizeof sym); /* object-to-function pointer, as dlsym needs */ \
  } while (0);
  DECODER_ACL_FUNCS(X)
#undef X
}

void rt_load(enum rt_link link) {
  if (link == RT_LINK_DLSYM) {
    rt_load_dlsym();
    return;
  }
#define X(name, lib) rt_fns.name = &name;
  DECODER_ACL_FUNCS(X)
#undef X
}

void rt_print_calls(void) {
  for (int i = 0; i < RT_FN_COUNT; i++) {
    uint64_t n = __atomic_load_n(&rt_calls[i], __ATOMIC_RELAXED);
    if (n > 0) printf("calls %s %llu\n", rt_names[i], (unsigned long long)n);
  }
  fflush(stdout);
}

_Noreturn void rt_fail(const char *call, const char *op, long code) {
  if (rt_fail_hook != NULL) rt_fail_hook();
  fflush(stdout);
  if (op != NULL)
    fprintf(stderr, "decoder-sim: %s failed for op %s: %ld\n", call, op, code);
  else
    fprintf(stderr, "decoder-sim: %s failed: %ld\n", call, code);
  const char *msg = RT(aclGetRecentErrMsg)();
  if (msg != NULL && msg[0] != '\0') {
    fputs(msg, stderr);
    if (msg[strlen(msg) - 1] != '\n') fputc('\n', stderr);
  }
  rt_print_calls();
  fflush(stderr);
  exit(1);
}
