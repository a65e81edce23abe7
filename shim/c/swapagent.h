/* swapagent.h: the control ABI (v1) exported by libswapagent.so.
 * Frameworks (or their companions) tell the agent where a swap wrapper's boundary is and what it saved;
 * the agent decides what may leave the device. Every call is thread-safe; a misuse returns a negative
 * SWAPAGENT_E* code and logs once, it never aborts the host process. */
#ifndef SWAPAGENT_H_
#define SWAPAGENT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SWAPAGENT_ABI_VERSION 1

/* Calls are events in host order: the agent orders its copies after the work already enqueued on the
 * streams when a call is made, so a framework with a launch thread issues a region's launches before it
 * calls region_exit, backward_enter or unpack for it. */

/* Stable error codes (never re-numbered). */
#define SWAPAGENT_OK 0
#define SWAPAGENT_EINVAL (-1)       /* bad argument (NULL group, n > 0 with NULL ptrs, ...) */
#define SWAPAGENT_EGROUP (-2)       /* unknown group */
#define SWAPAGENT_EHANDLE (-3)      /* unknown handle */
#define SWAPAGENT_EORDER (-4)       /* call out of order (exit without enter, save outside a region, ...) */
#define SWAPAGENT_ESTATE (-5)       /* illegal state transition */
#define SWAPAGENT_ENOOPS (-6)       /* no storage ops registered */
#define SWAPAGENT_ERUNTIME (-7)     /* the runtime or a storage op failed */
#define SWAPAGENT_EDISABLED (-8)    /* agent inert (forked child, init failure) */

/* Flags of swapagent_save. */
#define SWAPAGENT_SAVE_PARAM 1u     /* a parameter or buffer of the wrapped module */

/* States of swapagent_state. */
#define SWAPAGENT_STATE_DEVICE 0
#define SWAPAGENT_STATE_D2H 1
#define SWAPAGENT_STATE_HOST 2
#define SWAPAGENT_STATE_H2D 3

/* Keep reasons of swapagent_keep_reason. */
#define SWAPAGENT_KEEP_INTERNAL 0
#define SWAPAGENT_KEEP_INPUT 1
#define SWAPAGENT_KEEP_OUTPUT 2
#define SWAPAGENT_KEEP_PROTECTED 3
#define SWAPAGENT_KEEP_PARAM 4
#define SWAPAGENT_KEEP_SHARED 5
#define SWAPAGENT_KEEP_SMALL 6
#define SWAPAGENT_KEEP_DUPLICATE 7

/* Policies: the values of the environment variable SWAPAGENT_POLICY, read once when the agent loads.
 * safe (the default) moves only storages internal to a swap wrapper; outputs-only keeps outputs,
 * protected storages, parameters, small storages and duplicates, and moves inputs and shared storages
 * too (hyper-parallel before its fix); off records and classifies but never moves a storage. */
#define SWAPAGENT_POLICY_SAFE "safe"
#define SWAPAGENT_POLICY_OUTPUTS_ONLY "outputs-only"
#define SWAPAGENT_POLICY_OFF "off"

/* release frees a storage's device memory (the framework's resize_(0)); restore gives it nbytes again
 * and returns the new base (0 on failure). */
typedef int (*swapagent_release_fn)(void *ctx, int64_t handle, uintptr_t ptr, size_t nbytes);
typedef uintptr_t (*swapagent_restore_fn)(void *ctx, int64_t handle, size_t nbytes);

/* Limits of the calls' arguments: a longer group name or pointer array is refused with SWAPAGENT_EINVAL. */
#define SWAPAGENT_MAX_GROUP 4096  /* bytes of a group name, its NUL excluded */
#define SWAPAGENT_MAX_PTRS 262144 /* entries of one call's pointer array (1 << 18) */
#define SWAPAGENT_MAX_DESC 1024   /* bytes of one tensor description read, its NUL excluded */

int swapagent_abi_version(void);
int swapagent_set_storage_ops(swapagent_release_fn release, swapagent_restore_fn restore, void *ctx);
int swapagent_region_enter(const char *group, const uintptr_t *input_ptrs, size_t n);
int64_t swapagent_save(const char *group, uintptr_t storage_ptr, size_t nbytes, uint32_t flags);
int swapagent_region_exit(const char *group, const uintptr_t *output_ptrs, size_t n);
int swapagent_protect(const char *group, const uintptr_t *ptrs, size_t n);
int swapagent_backward_enter(const char *group);
uintptr_t swapagent_unpack(int64_t handle);
int swapagent_backward_exit(const char *group);
int swapagent_state(int64_t handle);
int swapagent_keep_reason(int64_t handle);
int swapagent_stats_json(char *buf, size_t cap);

/* ---- Every call as one record (additive; the companions' interface, ABI 1). ----
 * swapagent_call runs the control call its record describes. It is the one way to the calls beyond the v1
 * functions above, which are its fixed-signature forms (swapagent_region_enter(g, p, n) is the record
 * {SWAPAGENT_CALL_REGION_ENTER, g, p, n, n_positional = n}, and so on). A kind reads the fields its comment
 * names and ignores the rest. The library copies the record and what it points to once, when the call is
 * made: through the kernel, so that memory the process cannot read refuses the call (SWAPAGENT_EINVAL)
 * instead of faulting it, or, with SWAPAGENT_OPT_OWN_MEMORY, with plain loads (the caller vouches for its
 * memory: a native caller passing its own buffers; a bad pointer then faults the process here). Outputs
 * (handles, token) are written once the agent answered; they must be writable before it is asked. Returns
 * the kind's result: a code, or what its comment says. Group names, pointer arrays and descriptions are
 * bounded by SWAPAGENT_MAX_*. */
struct swapagent_call {
  uint32_t size;              /* sizeof(struct swapagent_call) as the caller knows it: the record only grows */
  uint32_t kind;              /* SWAPAGENT_CALL_* */
  const char *group;          /* the group (GUARD_RELEASE: NULL for whichever live group saved it; NOTE: the key) */
  const uintptr_t *ptrs;      /* REGION_ENTER inputs, REGION_EXIT outputs, PROTECT and HOLDERS storages, streams */
  size_t n;                   /* entries of ptrs */
  size_t n_positional;        /* REGION_ENTER: the first n_positional inputs are positional arguments, the rest keyword */
  const int64_t *counts;      /* HOLDERS: per ptrs[i], the references to it outside the group's saved tensors;
                               * GUARD_RELEASE: counts[0], that count for the storage released (NULL: unknown) */
  const uintptr_t *save_ptrs; /* SAVE, REGION_EXIT: the storages saved, in order */
  const size_t *save_nbytes;
  const uint32_t *save_flags; /* SWAPAGENT_SAVE_* of each save; NULL: all 0 */
  size_t n_save;
  int64_t *handles;           /* out, n_save entries: each save's handle, or the code that refused it */
  const uintptr_t *desc_ptrs; /* DESCRIBE, REGION_EXIT: the storages the text describes */
  size_t n_desc;
  const char *text;           /* descriptions, one line per described pointer (REGION_ENTER: per input), each
                               * ended by a NUL, text_len bytes in all; NULL: none given. NOTE: the value */
  size_t text_len;
  uintptr_t ptr;              /* GUARD_RELEASE: the storage's base; GUARD_RESTORE: its new base */
  size_t nbytes;              /* GUARD_RELEASE, GUARD_RESTORE: its size */
  int64_t handle;             /* GUARD_RESTORE: the token of the release */
  int64_t *token;             /* GUARD_RELEASE, out (NULL: not wanted): the handle the release is recorded under */
};

/* How swapagent_call takes a call (its opts, or'ed). */
#define SWAPAGENT_OPT_QUEUE 1u      /* answered now, run later in its place where the agent allows (below) */
#define SWAPAGENT_OPT_OWN_MEMORY 2u /* the record and what it points to are the caller's own: plain loads */

/* The kinds, never renumbered. A tensor description is one line "PATH\tDTYPE\tSHAPE": PATH the tensor's place
 * in the call's arguments ("args[0]", "rotary_cos_sin[0]", "batch['mask']"; empty for a tensor that is no
 * argument, such as an activation saved for backward), DTYPE the framework's element type ("float32"),
 * SHAPE the dimensions comma-separated ("32,1,1,16"; empty for a scalar); an empty line: nothing known. At
 * most 256 bytes of PATH, 16 dimensions; a malformed line refuses the call. Fault reports name a tensor by
 * it, traces keep it; the agent decides nothing from it. */
/* ---- The call kinds, written by genabi from shim/c/calls.def (make generate): edit the table. ---- */
#define SWAPAGENT_CALL_REGION_ENTER 1   /* group, ptrs, n, n_positional, text: swapagent_region_enter */
/* REGION_EXIT is swapagent_region_exit after the SAVE of save_* and the DESCRIBE of desc_ptrs (each left out
 * when empty): a region's end in one call. A bad group, array or description refuses it whole (nothing done);
 * it returns the exit's code, each save's result in handles. */
#define SWAPAGENT_CALL_REGION_EXIT 2    /* group, ptrs, n, save_*, handles, desc_ptrs, n_desc, text */
/* SAVE is swapagent_save of each entry, in order: SWAPAGENT_OK when all were saved, else the first refused
 * one's code. */
#define SWAPAGENT_CALL_SAVE 3           /* group, save_ptrs, save_nbytes, save_flags, n_save, handles */
/* DESCRIBE describes storages of the group's open region (its outputs, what it saved; 0 pointers skipped)
 * before its exit; a saved storage described without a PATH keeps the name it had as an input. */
#define SWAPAGENT_CALL_DESCRIBE 4       /* group, desc_ptrs, n_desc, text */
#define SWAPAGENT_CALL_PROTECT 5        /* group, ptrs, n: swapagent_protect */
#define SWAPAGENT_CALL_BACKWARD_ENTER 6 /* group: swapagent_backward_enter */
#define SWAPAGENT_CALL_BACKWARD_EXIT 7  /* group: swapagent_backward_exit */
/* HOLDERS gives the framework's count of the references to each storage ptrs[i] outside the saved tensors of
 * group (negative: it cannot tell), read after the group's region exited and before its backward, once the
 * job's own variables moved on (the companions count when the next layer is entered). Under safe a storage
 * the agent keeps only for its role (a layer input) that nothing else holds (counts[i] == 0) becomes
 * internal: the agent swaps it like the group's own activations. The rest of the rule is GUARD_RELEASE's. */
#define SWAPAGENT_CALL_HOLDERS 8        /* group, ptrs, n, counts */
/* GROUP_STREAMS names the runtime streams (aclrtStream handles; 0 is the default stream) the group's kernels
 * run on, in addition to those the agent sees launched inside its region: the agent orders its copies after
 * the work queued on a group's streams at region exit and makes every stream it knows wait for a copy back
 * before the work queued after the restore. A framework that launches through paths the agent does not
 * intercept states its streams here. Replaces the group's previous list; n 0 clears it. */
#define SWAPAGENT_CALL_GROUP_STREAMS 9  /* group, ptrs (the streams), n */
/* The guard: swap code the agent does not drive (hyper-parallel's own SwapManager, run unmodified) asks the
 * agent before each storage release it attempts, and obeys. A guarded group is reported like any other
 * (region enter with its inputs, its saves, region exit with its outputs), but the framework moves its
 * storages itself: the agent classifies them and never copies, releases or restores one of them. GUARD
 * declares it, before the group's first region exit (again: no effect). */
#define SWAPAGENT_CALL_GUARD 10         /* group */
/* GUARD_RELEASE: the framework is about to release (resize to 0) the storage whose base is ptr, of nbytes
 * bytes, saved by group (NULL: whichever live group saved it). Returns SWAPAGENT_RELEASE_ALLOW or
 * SWAPAGENT_RELEASE_KEEP by the policy, or a code: safe keeps every storage the ownership rules say someone
 * outside the group owns (an input, output, protected storage, parameter, or one another live group saved),
 * outputs-only keeps nothing, off keeps everything. counts[0], when counts is given, is the framework's count
 * of the references to the storage outside the saved tensors of the group whose swap releases it (the job's
 * variables, a view, another layer's saved tensor, an autograd node; negative, or counts NULL: it cannot
 * tell): under safe a storage whose keep reason is only its role in the region (an input or an output) may
 * go when that count is 0, whatever it was
 * when the layer was entered; a protected storage, a parameter, a storage another live group saved and one
 * the agent moves itself stay, whatever the count. A storage no live group saved is allowed: not the agent's
 * to decide. *token (if not NULL) gets the handle an allowed release is recorded under (0 when none).
 * With n >= 2 (additive), counts[1] says how many of the counts[0] references are the layer's own machinery,
 * there only to serve its backward or recompute (the base of a view its backward hooks made, the value its
 * swap's pack hook handed autograd), and counts[2] (n >= 3) which kinds they are (SWAPAGENT_OWN_* bits):
 * those keep nothing; an own count above counts[0] is no evidence at all. */
#define SWAPAGENT_CALL_GUARD_RELEASE 11 /* group or NULL, ptr, nbytes, counts (or NULL), n, token */
/* GUARD_RESTORE: the framework gave a storage it released (GUARD_RELEASE allowed it; handle is the token that
 * gave) memory again: ptr is its base now. Addresses are reused, so the token, not the old base, names it. */
#define SWAPAGENT_CALL_GUARD_RESTORE 12 /* handle, ptr, nbytes */
/* NOTE records key=value in the process's trace metadata (a later value of a key wins): how a companion or
 * the bootstrap says what it did ("python_guard=attached"). key: 1 to 64 bytes of letters, digits and '_';
 * value: at most 1024 bytes, no control character. */
#define SWAPAGENT_CALL_NOTE 13          /* group (the key), text, text_len (the value) */
#define SWAPAGENT_CALL_QUEUEING 14      /* nothing: 1 when calls with SWAPAGENT_OPT_QUEUE are queued now, else 0 */
/* RELEASABLE asks what GUARD_RELEASE would answer now for the storage whose base is ptr, with the same group
 * and counts, and changes nothing: nothing is released, kept, recorded or counted. A framework asks it
 * before it spends work on a release the agent may refuse (the copy out to host that precedes a swap's
 * resize to 0) or to learn whether its evidence of holders lets a storage go, and asks GUARD_RELEASE when it
 * releases. Returns SWAPAGENT_RELEASE_ALLOW or SWAPAGENT_RELEASE_KEEP, or a code. */
#define SWAPAGENT_CALL_RELEASABLE 15    /* group or NULL, ptr, counts (or NULL), n */
/* SCOPE_ENTER and SCOPE_EXIT bound a scope of the job that the agent records and never moves: a layer it
 * does not swap (its forward or its backward), or a function inside one whose temporaries die when it
 * returns. Nothing is saved, kept or ordered for it; the trace shows where it began and ended, so a reader
 * of the trace knows where the job let go of what the scope made (package pool's model of the job's memory
 * pool frees a block where the scope that last used it closes). Scopes may nest; group names the scope (any
 * name a group may have; a swapped layer's name is allowed). SWAPAGENT_OK under every policy, with or
 * without swap running: only a bad group is refused. */
#define SWAPAGENT_CALL_SCOPE_ENTER 16   /* group */
#define SWAPAGENT_CALL_SCOPE_EXIT 17    /* group */
/* EMPTY_CACHE says the job's memory pool gave its free cached memory back to the runtime here (MindSpore's
 * eager free, torch.cuda.empty_cache), whether or not it had any to give: a reader modelling the pool
 * (package pool) empties its cache at this point, which a trace shows otherwise only where something was
 * unmapped or freed. Recorded, nothing else (SWAPAGENT_OK as a scope's); group names the pool (any name a
 * group may have). */
#define SWAPAGENT_CALL_EMPTY_CACHE 18   /* group */
/* The kinds SWAPAGENT_OPT_QUEUE may queue ("Queued calls" below):
 * REGION_ENTER, REGION_EXIT, BACKWARD_ENTER, BACKWARD_EXIT, SCOPE_ENTER, SCOPE_EXIT, EMPTY_CACHE. */
/* ---- End of the lines from shim/c/calls.def. ---- */

/* The kinds of a layer's own holders (GUARD_RELEASE's counts[2], or'ed): references that exist only to serve
 * the layer's own backward or recompute. */
#define SWAPAGENT_OWN_VIEW_BASE 1u /* the tensor the saved one is a view of (a backward hook's view), held by that view only */
#define SWAPAGENT_OWN_PACKED 2u    /* the value the swap's pack hook handed autograd for the layer's backward */

/* Results of SWAPAGENT_CALL_GUARD_RELEASE. */
#define SWAPAGENT_RELEASE_KEEP 0   /* keep the storage on device: skip the release */
#define SWAPAGENT_RELEASE_ALLOW 1  /* release it: the agent records it as an offload of its bytes */

/* Queued calls. Where nothing a caller waits for depends on the agent's answers but their codes, the library
 * answers the kinds that may be queued (listed with the kinds above) with SWAPAGENT_OPT_QUEUE itself: it
 * copies the arguments, gives the saves their handles and returns SWAPAGENT_OK without entering the agent,
 * which runs the call later in its place among the process's runtime and control calls, as it would have
 * run then (the same trace events at the call's time and thread, classification, counts and fault
 * reports). That holds under policy off, where nothing moves, and under safe while nothing has moved yet
 * and a region exit saves only storages the agent keeps on device for their size. Otherwise, and for the
 * other kinds, the call runs now as without the option. A refusal found when a queued call runs (an
 * unknown group, a call out of order, a malformed description) is logged once and counted in the stats'
 * "rejected"; a save it refuses leaves its handle unknown (swapagent_unpack of it returns 0). */
int64_t swapagent_call(const struct swapagent_call *call, uint32_t opts);

/* swapagent_unpack's answer where it needs no call into the agent and never waits (additive): the base of a
 * handle whose storage stays on device (every handle under off, the kept ones under safe), recorded as its
 * unpack; 0 where only swapagent_unpack can answer (it may wait for a copy, so a caller holding a lock the
 * framework's storage ops take, such as Python's GIL, releases it for that call). */
uintptr_t swapagent_unpack_resident(int64_t handle);

#ifdef __cplusplus
}
#endif
#endif
