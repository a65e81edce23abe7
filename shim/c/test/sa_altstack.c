/* sa_altstack.c: a host that does to its main thread's signal stack what CPython's faulthandler does at
 * interpreter exit (PYTHONFAULTHANDLER=1, which the test runners set): it installs an alternate signal
 * stack, calls the agent (so the Go runtime adopts that thread with that stack), then disables and frees
 * the stack, and goes on calling the agent, the way Python finalization and the agent's exit hook do. A
 * second thread sends the main thread SIGURG, Go's preemption signal (the GC and sysmon send it), so a
 * signal lands while Go code runs there. Usage: sa-altstack MODE [MS]: "calls" keeps calling a control call
 * for MS milliseconds (1000); "exit" returns from main at once, so the signals hit the agent's exit hook.
 * Exits 0 when the process survived; before the agent lent a stack (sa_altstack_lend) "calls" aborted
 * within milliseconds, every time. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sa_test.h"

static pthread_t main_thread;
static volatile int stop;

static void *pester(void *arg) {
  (void)arg;
  struct timespec pause = {0, 50 * 1000};
  while (!stop) {
    pthread_kill(main_thread, SIGURG);
    nanosleep(&pause, NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "calls";
  long ms = argc > 2 ? atol(argv[2]) : 1000;
  if (sa_abi_load("sa-altstack") != 0) return 2;
  char buf[4096];
  size_t cap = sizeof buf;
  stack_t ss = {.ss_sp = malloc(SIGSTKSZ * 4), .ss_size = SIGSTKSZ * 4, .ss_flags = 0};
  if (ss.ss_sp == NULL || sigaltstack(&ss, NULL) != 0) {
    perror("sigaltstack");
    return 2;
  }
  if (abi.stats(buf, cap) < 0) {
    fprintf(stderr, "sa-altstack: the agent refused its first call\n");
    return 2;
  }
  /* faulthandler's finalization: back to no alternate stack, and the memory freed (poisoned, so a handler
   * that still runs there cannot pass unnoticed). */
  stack_t off = {.ss_flags = SS_DISABLE};
  if (sigaltstack(&off, NULL) != 0) {
    perror("sigaltstack");
    return 2;
  }
  memset(ss.ss_sp, 0xa5, ss.ss_size);
  free(ss.ss_sp);

  main_thread = pthread_self();
  pthread_t t;
  if (pthread_create(&t, NULL, pester, NULL) != 0) return 2;
  if (strcmp(mode, "exit") == 0) {
    /* Leave the pester running: it keeps signalling the main thread while exit runs the agent's hook. */
    printf("sa-altstack: exiting under signals\n");
    fflush(stdout);
    return 0;
  }
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long calls = 0;
  do {
    if (abi.stats(buf, cap) < 0) break;
    calls++;
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < ms * 1000000L);
  stop = 1;
  pthread_join(t, NULL);
  printf("sa-altstack: %ld calls under signals, survived\n", calls);
  return 0;
}
