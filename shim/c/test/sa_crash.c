/* sa_crash.c: makes N aclrtMalloc/aclrtFree pairs, prints "allocated", then dies of SIGABRT (abort) or,
 * with "segv", of a SIGSEGV. Usage: sa-crash N [abort|segv]. The agent's fatal-signal path must get
 * every pair into the trace first. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100;
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) return 1;
  for (int i = 0; i < n; i++) {
    void *p = NULL;
    if (aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST) != 0 || aclrtFree(p) != 0) return 1;
  }
  printf("allocated\n");
  fflush(stdout);
  if (argc > 2 && strcmp(argv[2], "segv") == 0) {
    volatile int *bad = NULL;
    return *bad;
  }
  abort();
}
