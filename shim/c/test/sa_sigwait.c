/* sa_sigwait.c: a host that waits for its signals the way supervisors do. It blocks SIGCHLD and SIGTERM
 * and takes them with sigtimedwait; each round forks a child that sends the parent SIGTERM (a
 * process-directed signal from another process) and exits, which sends SIGCHLD. Under the agent every one
 * of them must still reach this thread: one taken by an agent thread is lost here. Usage: sa-sigwait
 * ROUNDS. Prints "signals N of M seen" and exits 0 when every one was seen, 1 otherwise. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 1000;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
    perror("sigprocmask");
    return 2;
  }
  long seen = 0, missed = 0;
  for (int r = 0; r < rounds; r++) {
    pid_t child = fork();
    if (child < 0) {
      perror("fork");
      return 2;
    }
    if (child == 0) {
      kill(getppid(), SIGTERM);
      _exit(7);
    }
    int term = 0, chld = 0;
    struct timespec wait = {2, 0};
    while (!term || !chld) {
      int sig = sigtimedwait(&set, NULL, &wait);
      if (sig == SIGTERM) term = 1;
      else if (sig == SIGCHLD) chld = 1;
      else if (sig < 0 && errno == EINTR) continue;
      else break; /* EAGAIN: 2 s without the signal */
    }
    seen += term + chld;
    missed += 2 - term - chld;
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 7) {
      fprintf(stderr, "sa-sigwait: round %d: child %d ended with status %#x\n", r, (int)child, status);
      return 2;
    }
    if (!term || !chld)
      fprintf(stderr, "sa-sigwait: round %d: %s not seen within 2 s\n", r,
              !term && !chld ? "SIGTERM and SIGCHLD" : !term ? "SIGTERM" : "SIGCHLD");
  }
  printf("signals %ld of %ld seen\n", seen, seen + missed);
  return missed == 0 ? 0 : 1;
}
