/* sa_stress.c: T threads each make N aclrtMalloc/aclrtFree pairs of a small size (linked directly
 * against the runtime). Usage: sa-stress T N. Prints "ok <T*N> pairs". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"

static long iters;

static void *worker(void *arg) {
  (void)arg;
  if (aclrtSetDevice(0) != 0) return (void *)1;
  for (long i = 0; i < iters; i++) {
    void *p = NULL;
    if (aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST) != 0 || aclrtFree(p) != 0) return (void *)1;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s THREADS N\n", argv[0]);
    return 2;
  }
  int t = atoi(argv[1]);
  iters = atol(argv[2]);
  if (t < 1 || t > 256 || iters < 0) return 2;
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) return 1;
  pthread_t th[256];
  for (int i = 0; i < t; i++) pthread_create(&th[i], NULL, worker, NULL);
  int bad = 0;
  for (int i = 0; i < t; i++) {
    void *r;
    pthread_join(th[i], &r);
    bad += r != NULL;
  }
  if (bad) {
    fprintf(stderr, "%d threads failed\n", bad);
    return 1;
  }
  aclFinalize();
  printf("ok %ld pairs\n", (long)t * iters);
  return 0;
}
