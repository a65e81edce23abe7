/* swap.h: decoder-sim's wiring to the swapagent control ABI (shim/c/swapagent.h). The ABI is looked up
 * with dlsym(RTLD_DEFAULT) at start: absent means a pure baseline with no swap calls at all. When present,
 * decoder-sim registers its storage ops (release = resize to 0, restore = resize back) and keeps the
 * handle -> storage map the agent's callbacks need. */
#ifndef DECODER_SWAP_H_
#define DECODER_SWAP_H_

#include <stddef.h>
#include <stdint.h>

#include "pool.h"

/* swap_init looks the ABI up and registers the storage ops with ctx (the model); returns 1 when the agent
 * is present. */
int swap_init(void *ctx);
int swap_present(void);

/* Group-scoped calls; group is "layer.<i>". Failures are reported once per function on stderr and
 * otherwise ignored: the agent must never stop the job. */
void swap_region_enter(const char *group, const uintptr_t *inputs, size_t n, size_t n_positional);
/* swap_save registers a saved storage and remembers handle -> storage (holding a reference until
 * swap_backward_exit of the group). Returns the handle, or -1. */
int64_t swap_save(const char *group, storage *st, uint32_t flags);
void swap_region_exit(const char *group, const uintptr_t *outputs, size_t n);
void swap_backward_enter(const char *group);
/* swap_unpack asks the agent to bring the handle's storage back on device before it is used. */
void swap_unpack(int64_t handle, storage *st);
void swap_backward_exit(const char *group);

/* swap_scope_enter and swap_scope_exit bound a scope the agent records and never moves (a layer not wrapped
 * for swap, a function whose temporaries die when it returns), so a reader of the trace knows where the
 * job freed what the scope made. No-ops without an agent or with one that lacks swapagent_call. */
void swap_scope_enter(const char *group);
void swap_scope_exit(const char *group);

/* swap_empty_cache says the pool emptied its cache (pool_empty_cache), so a reader of the trace knows it did
 * where it had nothing to unmap. */
void swap_empty_cache(void);

/* swap_summary prints one stderr line of counts when the agent was present. */
void swap_summary(void);

#endif
