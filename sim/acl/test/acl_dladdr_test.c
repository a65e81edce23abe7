/* acl_dladdr_test.c: MindSpore-style loading of the emulator. It dlopens libascendcl.so with
 * RTLD_LAZY|RTLD_LOCAL, takes aclrtMalloc with a handle-scoped dlsym, asks dladdr which file defines it and
 * derives the toolkit root the way the framework does (the directory above lib64, named `latest`). Then it
 * dlopens libnnopbase.so and libopapi.so from the same lib64 the same way and runs a Mul through the three
 * handles (one runtime state behind them), checks that libopapi.so alone brings in the other two, and that
 * each library exports only its own API (and the documented aclsim_internal_* entry points).
 * Usage: acl-dladdr-test [path/to/libascendcl.so] (default: $ACLSIM_LIB or build/ascend/latest/lib64/...). */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_ops.h"

static int passed, failed;

static void check(int ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (ok) passed++;
  else failed++;
}

enum lib { ASCENDCL, NNOPBASE, OPAPI, NLIBS };
static const char *const lib_names[NLIBS] = {"libascendcl.so", "libnnopbase.so", "libopapi.so"};

/* owner: the library whose API name is, as CANN 8 splits it. */
static int owner(const char *name) {
  static const char *const nnopbase_api[] = {
      "aclCreateTensor",       "aclDestroyTensor",      "aclCreateScalar",
      "aclDestroyScalar",      "aclCreateTensorList",   "aclDestroyTensorList",
      "aclSetTensorAddr",      "aclSetDynamicTensorAddr", "aclSetAclOpExecutorRepeatable",
      "aclDestroyAclOpExecutor"};
  if (strncmp(name, "aclnn", 5) == 0) return OPAPI;
  for (size_t i = 0; i < sizeof nnopbase_api / sizeof *nnopbase_api; i++)
    if (strcmp(name, nnopbase_api[i]) == 0) return NNOPBASE;
  if (strncmp(name, "aclrt", 5) == 0 || strcmp(name, "aclInit") == 0 || strcmp(name, "aclFinalize") == 0 ||
      strcmp(name, "aclGetRecentErrMsg") == 0)
    return ASCENDCL;
  return -1;
}

/* exports_only_its_api lists the library's defined dynamic symbols with nm; false if one is neither its
 * API nor an aclsim_internal_* entry point. */
static int exports_only_its_api(const char *path, int lib) {
  char cmd[PATH_MAX + 64];
  if (snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' 2>/dev/null", path) >= (int)sizeof cmd) return 0;
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  char line[512];
  int n = 0, bad = 0;
  while (fgets(line, sizeof line, p)) {
    char addr[64], type[8], name[400];
    if (sscanf(line, "%63s %7s %399s", addr, type, name) != 3) continue;
    n++;
    if (owner(name) != lib && strncmp(name, "aclsim_internal_", 16) != 0) {
      printf("    unexpected export of %s: %s\n", lib_names[lib], name);
      bad++;
    }
  }
  int rc = pclose(p);
  return rc == 0 && n > 0 && bad == 0;
}

/* opapi_alone: in a child, dlopen only libopapi.so; its dependencies must come in with it. */
static int opapi_alone(const char paths[NLIBS][PATH_MAX]) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!dlopen(paths[OPAPI], RTLD_LAZY | RTLD_LOCAL)) _exit(2);
    _exit(dlopen(paths[NNOPBASE], RTLD_LAZY | RTLD_NOLOAD) && dlopen(paths[ASCENDCL], RTLD_LAZY | RTLD_NOLOAD) ? 0 : 3);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#define SYM(h, name) ((__typeof__(&name))dlsym(h, #name))

/* mul_through_handles runs out = a * b with every call taken from the library that defines it. */
static int mul_through_handles(void *const h[NLIBS]) {
  __typeof__(&aclrtMalloc) p_malloc = SYM(h[ASCENDCL], aclrtMalloc);
  __typeof__(&aclrtMemcpy) p_memcpy = SYM(h[ASCENDCL], aclrtMemcpy);
  __typeof__(&aclrtSynchronizeStream) p_sync = SYM(h[ASCENDCL], aclrtSynchronizeStream);
  __typeof__(&aclCreateTensor) p_tensor = SYM(h[NNOPBASE], aclCreateTensor);
  __typeof__(&aclnnMulGetWorkspaceSize) p_ws = SYM(h[OPAPI], aclnnMulGetWorkspaceSize);
  __typeof__(&aclnnMul) p_mul = SYM(h[OPAPI], aclnnMul);
  if (!p_malloc || !p_memcpy || !p_sync || !p_tensor || !p_ws || !p_mul) return 0;
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, o[4] = {0};
  void *d[3];
  aclTensor *t[3];
  int64_t dims[1] = {4};
  for (int i = 0; i < 3; i++) {
    if (p_malloc(&d[i], sizeof a, ACL_MEM_MALLOC_HUGE_FIRST)) return 0;
    t[i] = p_tensor(dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 1, d[i]);
  }
  uint64_t ws;
  aclOpExecutor *ex;
  if (p_memcpy(d[0], sizeof a, a, sizeof a, ACL_MEMCPY_HOST_TO_DEVICE) ||
      p_memcpy(d[1], sizeof b, b, sizeof b, ACL_MEMCPY_HOST_TO_DEVICE) || p_ws(t[0], t[1], t[2], &ws, &ex) ||
      p_mul(NULL, ws, ex, NULL) || p_sync(NULL) || p_memcpy(o, sizeof o, d[2], sizeof o, ACL_MEMCPY_DEVICE_TO_HOST))
    return 0;
  return o[0] == 5 && o[1] == 12 && o[2] == 21 && o[3] == 32;
}

int main(int argc, char **argv) {
  const char *lib = argc > 1 ? argv[1] : getenv("ACLSIM_LIB");
  if (!lib || !*lib) lib = "build/ascend/latest/lib64/libascendcl.so";
  char paths[NLIBS][PATH_MAX];
  if (!realpath(lib, paths[ASCENDCL])) {
    printf("FAIL cannot resolve %s\n0 passed, 1 failed\n", lib);
    return 1;
  }
  char *slash = strrchr(paths[ASCENDCL], '/');
  for (int l = NNOPBASE; l < NLIBS; l++)
    snprintf(paths[l], sizeof paths[l], "%.*s/%s", (int)(slash - paths[ASCENDCL]), paths[ASCENDCL], lib_names[l]);
  /* first, while this process has loaded none of them */
  check(opapi_alone((const char(*)[PATH_MAX])paths), "libopapi.so alone brings in libnnopbase.so and libascendcl.so");

  void *h[NLIBS] = {dlopen(paths[ASCENDCL], RTLD_LAZY | RTLD_LOCAL), NULL, NULL};
  check(h[ASCENDCL] != NULL, "dlopen RTLD_LAZY|RTLD_LOCAL");
  if (!h[ASCENDCL]) {
    printf("    %s\n%d passed, %d failed\n", dlerror(), passed, failed);
    return 1;
  }
  void *sym = dlsym(h[ASCENDCL], "aclrtMalloc");
  check(sym != NULL, "dlsym(handle, aclrtMalloc)");
  Dl_info info = {0};
  int ok = sym && dladdr(sym, &info) && info.dli_fname;
  check(ok, "dladdr names a file");
  if (ok) {
    char real[PATH_MAX];
    check(realpath(info.dli_fname, real) && strcmp(real, paths[ASCENDCL]) == 0, "dladdr names the emulator itself");
    /* <root>/lib64/libascendcl.so, root's last component `latest` */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    slash = strrchr(dir, '/');
    check(slash && strcmp(slash + 1, "lib64") == 0, "library sits in lib64");
    if (slash) *slash = 0;
    slash = strrchr(dir, '/');
    check(slash && strcmp(slash + 1, "latest") == 0, "lib64's parent is `latest`");
    printf("    toolkit root: %s\n", dir);
    char hdr[PATH_MAX + 32];
    struct stat st;
    snprintf(hdr, sizeof hdr, "%s/include/acl/acl.h", dir);
    check(stat(hdr, &st) == 0, "root has include/acl/acl.h");
    snprintf(hdr, sizeof hdr, "%s/include/aclnnop/aclnn_ops.h", dir);
    check(stat(hdr, &st) == 0, "root has include/aclnnop/aclnn_ops.h");
  }
  typedef int (*init_fn)(const char *);
  init_fn init = (init_fn)dlsym(h[ASCENDCL], "aclInit");
  check(init && init(NULL) == 0, "aclInit through dlsym");
  check(dlsym(h[ASCENDCL], "sim_check") == NULL && dlsym(h[ASCENDCL], "sim_dev_malloc") == NULL,
        "internals are not visible to dlsym");
  check(dlsym(h[ASCENDCL], "aclnnMul") == NULL && dlsym(h[ASCENDCL], "aclCreateTensor") == NULL,
        "libascendcl.so has no tensor or aclnn function");

  /* the other two from the same lib64, as MindSpore loads libopapi.so */
  for (int l = NNOPBASE; l < NLIBS; l++) {
    h[l] = dlopen(paths[l], RTLD_LAZY | RTLD_LOCAL);
    char what[64];
    snprintf(what, sizeof what, "dlopen %s beside it", lib_names[l]);
    check(h[l] != NULL, what);
  }
  if (h[NNOPBASE] && h[OPAPI]) check(mul_through_handles(h), "aclnnMul through the three handles computes");
  for (int l = 0; l < NLIBS; l++) {
    char what[96];
    snprintf(what, sizeof what, "%s exports only its API and aclsim_internal_* (nm -D)", lib_names[l]);
    check(exports_only_its_api(paths[l], l), what);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
