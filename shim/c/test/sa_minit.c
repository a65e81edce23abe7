/* sa_minit.c: a small init, as tini and dumb-init are: it runs a command as its child, blocks the signals
 * it handles and waits for them with sigwait; SIGTERM and SIGINT are forwarded to the child, SIGCHLD reaps
 * it. It exits with the child's status (128+N for a signal N). Usage: sa-minit COMMAND [ARG...]. Under the
 * agent a signal taken by an agent thread would leave it waiting forever. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: sa-minit COMMAND [ARG...]\n");
    return 2;
  }
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, &old);
  pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return 2;
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    execvp(argv[1], argv + 1);
    perror("execvp");
    _exit(127);
  }
  printf("child %d\n", (int)child);
  fflush(stdout);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) return 2;
    if (sig == SIGTERM || sig == SIGINT) {
      kill(child, sig);
      continue;
    }
    int status = 0;
    pid_t p;
    while ((p = waitpid(-1, &status, WNOHANG)) > 0)
      if (p == child) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
}
