/* sa_fork.c: fork without exec while threads allocate through the shim and one keeps entering the Go
 * agent (stats), the children allocating and calling the control ABI too. Usage: sa-fork TRIALS. A child
 * that has not exited 5 s after the fork is a hang (killed and counted). The allocating threads pause
 * only around fork() itself, because the emulated runtime has no fork handlers of its own (a child must
 * not inherit one of its locks held); the agent's threads and the ring are never paused. Prints
 * "trials N hangs H failures F" and "N passed, N failed". */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"
#include "swapagent.h"

/* Writer-preferring, or the two allocators could starve the forking thread forever. */
static pthread_rwlock_t fork_lock;
static atomic_int stop;
typedef int (*stats_t)(char *, size_t);
typedef int (*enter_t)(const char *, const uintptr_t *, size_t);
static stats_t stats;
static enter_t enter;

static void *allocator(void *arg) {
  (void)arg;
  aclrtSetDevice(0);
  while (!atomic_load(&stop)) {
    pthread_rwlock_rdlock(&fork_lock);
    void *p = NULL;
    if (aclrtMalloc(&p, 256, ACL_MEM_MALLOC_HUGE_FIRST) == 0) aclrtFree(p);
    pthread_rwlock_unlock(&fork_lock);
  }
  return NULL;
}

static void *go_caller(void *arg) {
  (void)arg;
  char buf[4096];
  while (!atomic_load(&stop)) {
    if (stats) stats(buf, sizeof buf);
  }
  return NULL;
}

static int child(void) {
  aclrtSetDevice(0);
  for (int i = 0; i < 100; i++) {
    void *p = NULL;
    if (aclrtMalloc(&p, 128, ACL_MEM_MALLOC_HUGE_FIRST) != 0 || aclrtFree(p) != 0) return 3;
  }
  if (stats && stats(NULL, 0) != SWAPAGENT_EDISABLED) return 4;
  if (enter && enter("layer.0", NULL, 0) != SWAPAGENT_EDISABLED) return 5;
  return 0;
}

int main(int argc, char **argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 50;
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&fork_lock, &attr);
  if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) return 1;
  stats = (stats_t)dlsym(RTLD_DEFAULT, "swapagent_stats_json");
  enter = (enter_t)dlsym(RTLD_DEFAULT, "swapagent_region_enter");
  pthread_t th[3];
  pthread_create(&th[0], NULL, allocator, NULL);
  pthread_create(&th[1], NULL, allocator, NULL);
  pthread_create(&th[2], NULL, go_caller, NULL);
  int hangs = 0, failures = 0;
  for (int t = 0; t < trials; t++) {
    struct timespec d = {0, 2000000};
    nanosleep(&d, NULL);
    pthread_rwlock_wrlock(&fork_lock);
    pid_t pid = fork();
    if (pid == 0) {
      pthread_rwlock_unlock(&fork_lock);
      exit(child());
    }
    pthread_rwlock_unlock(&fork_lock);
    if (pid < 0) {
      failures++;
      continue;
    }
    int status = 0, done = 0;
    for (int i = 0; i < 500 && !done; i++) { /* 5 s */
      if (waitpid(pid, &status, WNOHANG) == pid) {
        done = 1;
        break;
      }
      struct timespec w = {0, 10000000};
      nanosleep(&w, NULL);
    }
    if (!done) {
      hangs++;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "trial %d: child status %#x\n", t, status);
      failures++;
    }
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  printf("trials %d hangs %d failures %d\n", trials, hangs, failures);
  printf("%d passed, %d failed\n", trials - hangs - failures, hangs + failures);
  return hangs + failures ? 1 : 0;
}
