// ignored.go records which signals this process inherited ignored (SIG_IGN), before the Go runtime
// starts: the runtime keeps an inherited SIG_IGN only for SIGHUP and SIGINT (signal.Ignored sees those)
// and installs its own handler for SIGQUIT and SIGTERM whatever it found, so their inherited
// disposition is lost by the time main runs. A C constructor runs before the runtime and keeps it (the
// command needs cgo anyway: replay/aclrt).
package main

/*
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

static uint64_t swapagent_ignored_at_start;

__attribute__((constructor)) static void swapagent_record_ignored(void) {
	for (int s = 1; s < 64; s++) {
		struct sigaction sa;
		if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
			swapagent_ignored_at_start |= (uint64_t)1 << s;
	}
}

static uint64_t swapagent_ignored(void) { return swapagent_ignored_at_start; }
*/
import "C"

import "syscall"

// ignoredAtStart reports whether sig was ignored when this process started.
func ignoredAtStart(sig syscall.Signal) bool {
	return sig > 0 && sig < 64 && uint64(C.swapagent_ignored())&(1<<uint(sig)) != 0
}
