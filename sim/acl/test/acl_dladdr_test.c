/* acl_dladdr_test.c: MindSpore-style path discovery against the emulator. It dlopens libascendcl.so with
 * RTLD_LAZY|RTLD_LOCAL, takes aclrtMalloc with a handle-scoped dlsym, asks dladdr which file defines it and
 * derives the toolkit root the way the framework does (the directory above lib64, named `latest`). It also
 * checks that the library exports nothing but the ACL API.
 * Usage: acl-dladdr-test [path/to/libascendcl.so] (default: $ACLSIM_LIB or build/ascend/latest/lib64/...). */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int passed, failed;

static void check(int ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (ok) passed++;
  else failed++;
}

/* exports_only_acl lists the library's defined dynamic symbols with nm; false if any is not acl*. */
static int exports_only_acl(const char *lib) {
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' 2>/dev/null", lib);
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  char line[512];
  int n = 0, bad = 0;
  while (fgets(line, sizeof line, p)) {
    char addr[64], type[8], name[400];
    if (sscanf(line, "%63s %7s %399s", addr, type, name) != 3) continue;
    n++;
    if (strncmp(name, "acl", 3) != 0) {
      printf("    unexpected export: %s\n", name);
      bad++;
    }
  }
  int rc = pclose(p);
  return rc == 0 && n > 0 && bad == 0;
}

int main(int argc, char **argv) {
  const char *lib = argc > 1 ? argv[1] : getenv("ACLSIM_LIB");
  if (!lib || !*lib) lib = "build/ascend/latest/lib64/libascendcl.so";
  char abs[PATH_MAX];
  if (!realpath(lib, abs)) {
    printf("FAIL cannot resolve %s\n0 passed, 1 failed\n", lib);
    return 1;
  }
  void *h = dlopen(abs, RTLD_LAZY | RTLD_LOCAL);
  check(h != NULL, "dlopen RTLD_LAZY|RTLD_LOCAL");
  if (!h) {
    printf("    %s\n%d passed, %d failed\n", dlerror(), passed, failed);
    return 1;
  }
  void *sym = dlsym(h, "aclrtMalloc");
  check(sym != NULL, "dlsym(handle, aclrtMalloc)");
  Dl_info info = {0};
  int ok = sym && dladdr(sym, &info) && info.dli_fname;
  check(ok, "dladdr names a file");
  if (ok) {
    char real[PATH_MAX];
    check(realpath(info.dli_fname, real) && strcmp(real, abs) == 0, "dladdr names the emulator itself");
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
  init_fn init = (init_fn)dlsym(h, "aclInit");
  check(init && init(NULL) == 0, "aclInit through dlsym");
  check(dlsym(h, "sim_check") == NULL && dlsym(h, "sim_dev_malloc") == NULL, "internals are not visible to dlsym");
  check(exports_only_acl(abs), "exports only acl* symbols (nm -D)");
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
