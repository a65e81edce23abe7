/* signals.c: signal hygiene. The agent's threads must never take a signal meant for the host: a
 * process-directed signal goes to any thread that does not block it, so one taken by an agent thread is
 * lost to a host thread that waits for it (coreutils timeout's SIGCHLD in sigsuspend, an init's SIGTERM in
 * sigwait, a shell's trap).
 *
 * The Go runtime's threads take their mask from the thread that started the runtime, and each one, when it
 * starts (minit), unblocks the signals its table marks "always unblock" (runtime.sigtable, _SigUnblock):
 * the synchronous faults, which are right, and SIGCHLD, SIGPROF and signal 34, which are not ours to take.
 * So, before the runtime starts (this constructor's priority puts it before every default-priority one, the
 * Go runtime's entry among them):
 * - the loading thread blocks the asynchronous signals, and sa_init, which runs after the runtime's entry,
 *   restores its own mask: every Go thread inherits the blocked set;
 * - the "always unblock" mark is cleared for SIGCHLD, SIGPROF and (glibc) SIGRTMIN in the runtime's table,
 *   found by name in this library's own symbol table, and changed only when the entry reads as expected.
 * Left unblocked: the synchronous faults (raised by the faulting thread itself) and SIGURG, which Go sends to
 * its own threads with tgkill to preempt goroutines. docs/shim.md, "Signals". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sa.h"

static sigset_t loader_mask;
static int loader_mask_saved;
static const char *table_problem = "not looked up yet";

/* The runtime's sigTabT (runtime/signal_unix.go) on a 64-bit target. */
struct go_sigtab {
  int32_t flags;
  const char *name;
  intptr_t name_len;
};
#define GO_SIG_UNBLOCK (1 << 7) /* _SigUnblock */

/* find_local_symbol returns the run-time address of symbol name in the ELF object mapped at base from
 * path, read from its .symtab (Go's symbols are local: the dynamic table does not have them); NULL when
 * the file or the symbol cannot be read. */
static void *find_local_symbol(const char *path, uintptr_t base, const char *name) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  void *map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(ElfW(Ehdr)))
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return NULL;
  void *found = NULL;
  size_t size = (size_t)st.st_size;
  const unsigned char *file = map;
  const ElfW(Ehdr) *eh = map;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shoff == 0 || eh->e_shentsize != sizeof(ElfW(Shdr)) ||
      eh->e_shoff > size || (size - eh->e_shoff) / sizeof(ElfW(Shdr)) < eh->e_shnum)
    goto out;
  const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(file + eh->e_shoff);
  for (size_t i = 0; i < eh->e_shnum && found == NULL; i++) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    const ElfW(Shdr) *strs = &sh[sh[i].sh_link];
    if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset || strs->sh_offset > size ||
        strs->sh_size > size - strs->sh_offset)
      continue;
    const ElfW(Sym) *sym = (const ElfW(Sym) *)(file + sh[i].sh_offset);
    const char *str = (const char *)(file + strs->sh_offset);
    size_t n = sh[i].sh_size / sizeof(ElfW(Sym)), namelen = strlen(name);
    for (size_t k = 0; k < n; k++) {
      if (sym[k].st_name >= strs->sh_size || strs->sh_size - sym[k].st_name <= namelen) continue;
      if (memcmp(str + sym[k].st_name, name, namelen + 1) == 0 && sym[k].st_value != 0) {
        found = (void *)(base + sym[k].st_value);
        break;
      }
    }
  }
out:
  munmap(map, size);
  return found;
}

/* quiet_go_signal clears the runtime's "always unblock" mark of sig, if its entry names it as expected. */
static int quiet_go_signal(struct go_sigtab *table, int sig, const char *expect) {
  struct go_sigtab *e = &table[sig];
  size_t n = strlen(expect);
  if (e->name == NULL || e->name_len < (intptr_t)n || memcmp(e->name, expect, n) != 0) return 0;
  e->flags &= ~GO_SIG_UNBLOCK;
  return 1;
}

static void quiet_go_signals(void) {
  if (sizeof(void *) != 8) {
    table_problem = "not a 64-bit target";
    return;
  }
  Dl_info info;
  if (dladdr((void *)quiet_go_signals, &info) == 0 || info.dli_fname == NULL) {
    table_problem = "this library's path is unknown";
    return;
  }
  struct go_sigtab *table = find_local_symbol(info.dli_fname, (uintptr_t)info.dli_fbase, "runtime.sigtable");
  if (table == NULL) {
    table_problem = "runtime.sigtable is not in this library's symbol table (stripped?)";
    return;
  }
  int ok = quiet_go_signal(table, SIGCHLD, "SIGCHLD") && quiet_go_signal(table, SIGPROF, "SIGPROF");
#ifdef __GLIBC__
  /* Signal 34 is musl's SIGSYNCCALL, which Go keeps unblocked for it; under glibc it is SIGRTMIN, the
   * host's first real-time signal (timer_create's usual one). */
  ok = ok && SIGRTMIN == 34 && quiet_go_signal(table, 34, "signal 34");
#endif
  if (!ok) {
    table_problem = "runtime.sigtable does not read as expected";
    return;
  }
  table_problem = NULL;
}

__attribute__((constructor(101))) static void sa_block_async_signals(void) {
  sigset_t async;
  sigfillset(&async);
  static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT, SIGURG};
  for (size_t i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++) sigdelset(&async, sync_signals[i]);
  loader_mask_saved = pthread_sigmask(SIG_BLOCK, &async, &loader_mask) == 0;
  quiet_go_signals();
}

void sa_restore_loader_mask(void) {
  if (loader_mask_saved) pthread_sigmask(SIG_SETMASK, &loader_mask, NULL);
  loader_mask_saved = 0;
}

const char *sa_signal_problem(void) { return table_problem; }

/* ---- The alternate signal stack of a host thread calling into Go. ----
 * CPython's faulthandler (PYTHONFAULTHANDLER=1, python -X faulthandler; the test runners set it) gives the
 * main thread an alternate signal stack, and at interpreter exit disables and frees it. The Go runtime
 * adopted that stack when the thread first called the agent (since Go 1.21 a host thread keeps its M), and a
 * signal that lands while Go code runs on a thread whose alternate stack is disabled is a fatal error,
 * "non-Go code disabled sigaltstack", which aborts the process. Go's own preemption signal (SIGURG, sent
 * by the garbage collector and sysmon) is such a signal, so the agent's exit hook and any late control call
 * could abort a job that had finished. sa-altstack (shim/shimtest/signals_test.go) reproduces it every
 * time. So each call into Go first looks at the thread's alternate stack (one sigaltstack call): when the
 * host disabled it, a stack of the agent's stands in for the call and the host's disabled state is put
 * back after it. The stand-in is mapped once per thread that needs one and never freed (the Go runtime may
 * still know its address). */
#define SA_SPARE_STACK (256 * 1024)
static __thread void *spare_stack;

int sa_altstack_lend(void) {
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return 0;
  if (spare_stack == NULL) {
    void *p = mmap(NULL, SA_SPARE_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) return 0;
    spare_stack = p;
  }
  stack_t ss = {.ss_sp = spare_stack, .ss_size = SA_SPARE_STACK, .ss_flags = 0};
  return sigaltstack(&ss, NULL) == 0;
}

void sa_altstack_return(int lent) {
  if (!lent) return;
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
}
