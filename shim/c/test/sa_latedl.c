/* sa_latedl.c: a program that reaches the runtime the way MindSpore does: dlopen(<toolkit>/lib64/
 * libascendcl.so, RTLD_LAZY|RTLD_LOCAL) after start, dlsym for each function, then dladdr on the pointer it
 * got to find the toolkit root. Usage: sa-latedl LIBPATH N. Prints "dladdr <path>",
 * "rtld_next found|missing" (dlsym(RTLD_NEXT, "swapagent_abi_version")) and "ok <N> allocations", exits non-zero on any failure. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"

typedef aclError (*init_t)(const char *);
typedef aclError (*setdev_t)(int32_t);
typedef aclError (*malloc_t)(void **, size_t, aclrtMemMallocPolicy);
typedef aclError (*free_t)(void *);

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBPATH N\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[2]);
  void *h = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  init_t init = (init_t)dlsym(h, "aclInit");
  setdev_t setdev = (setdev_t)dlsym(h, "aclrtSetDevice");
  malloc_t mal = (malloc_t)dlsym(h, "aclrtMalloc");
  free_t fr = (free_t)dlsym(h, "aclrtFree");
  if (!init || !setdev || !mal || !fr) {
    fprintf(stderr, "dlsym failed\n");
    return 1;
  }
  if (init(NULL) != 0 || setdev(0) != 0) return 1;
  for (int i = 0; i < n; i++) {
    void *p = NULL;
    if (mal(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST) != 0 || fr(p) != 0) {
      fprintf(stderr, "allocation %d failed\n", i);
      return 1;
    }
  }
  Dl_info info;
  if (dladdr((void *)mal, &info) == 0 || info.dli_fname == NULL) {
    fprintf(stderr, "dladdr failed\n");
    return 1;
  }
  printf("dladdr %s\n", info.dli_fname);
  /* RTLD_NEXT must stay relative to this program, not to the hook's library. */
  printf("rtld_next %s\n", dlsym(RTLD_NEXT, "swapagent_abi_version") != NULL ? "found" : "missing");
  printf("ok %d allocations\n", n);
  return 0;
}
