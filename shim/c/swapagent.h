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

/* Extensions to v1 (additive). */
/* Like region_enter, and tells which inputs were keyword arguments: the first n_positional pointers
 * came from positional arguments, the rest from keyword arguments. Fault reports name the kind. */
int swapagent_region_enter_kw(const char *group, const uintptr_t *input_ptrs, size_t n, size_t n_positional);
/* Names the runtime streams (aclrtStream handles; 0 is the default stream) the group's kernels run on,
 * in addition to those the agent sees launched inside its region. The agent orders its copies after the
 * work queued on a group's streams at region exit and makes every stream it knows wait for a copy back
 * before the work queued after the restore; a framework that launches through paths the agent does not
 * intercept states its streams here. Replaces the group's previous list; n 0 clears it. */
int swapagent_group_streams(const char *group, const uintptr_t *streams, size_t n);
/* Tensor descriptions, for fault reports and traces (the agent decides nothing from them). A description is
 * one line "PATH\tDTYPE\tSHAPE": PATH the tensor's place in the call's arguments ("args[0]",
 * "rotary_cos_sin[0]", "batch['mask']"; empty for a tensor that is no argument, such as an activation saved
 * for backward), DTYPE the framework's element type ("float32"), SHAPE the dimensions comma-separated
 * ("32,1,1,16"; empty for a scalar). At most 256 bytes of PATH, 16 dimensions. A NULL entry: nothing known
 * of that tensor; a malformed one refuses the call (SWAPAGENT_EINVAL). */
/* Like region_enter_kw, with descs[i] describing input i (descs NULL: like region_enter_kw). An input
 * whose storage is gone (address 0) is named in the fault report by its description. */
int swapagent_region_enter_desc(const char *group, const uintptr_t *input_ptrs, const char *const *descs,
                                size_t n, size_t n_positional);
/* Describes tensors of the group's open region by storage pointer (its outputs, what it saved; zero
 * pointers are skipped): call it before region_exit. A saved storage described without a PATH keeps the
 * name it had as an input. */
int swapagent_describe(const char *group, const uintptr_t *ptrs, const char *const *descs, size_t n);
/* Saves n storages of the group's open region in one call, in order: handles[i] gets what
 * swapagent_save(group, ptrs[i], nbytes[i], flags[i]) would return (flags NULL: all 0), a handle or a
 * negative code. Returns SWAPAGENT_OK when every entry was saved, else the first refused entry's code. A
 * bad group or array (NULL with n > 0, not readable, handles not writable, n above 262144) refuses the
 * whole call (SWAPAGENT_EINVAL) and saves nothing. One drain, lock and pointer proof for all of them
 * instead of one per storage: a companion can collect a region's saves and report them before
 * region_exit (and before an unpack of one of them). */
int swapagent_save_n(const char *group, const uintptr_t *ptrs, const size_t *nbytes, const uint32_t *flags,
                     size_t n, int64_t *handles);
/* Ends the group's open region in one call: what swapagent_save_n(group, save_ptrs, save_nbytes,
 * save_flags, n_save, handles), then swapagent_describe(group, desc_ptrs, descs, n_desc), then
 * swapagent_region_exit(group, output_ptrs, n_out) would do, in that order (n_save or n_desc 0: that part
 * is left out). handles[i] gets each save's handle or code as from save_n; the call returns what
 * region_exit returns (a description fails only where the exit does). A bad group, array or description
 * refuses the whole call (SWAPAGENT_EINVAL), by the rules of those three calls, and does nothing: the
 * handles are left as they were and the region stays open. One crossing into the agent and one read of
 * the arguments instead of three: a companion reports what its region saved and its outputs at the
 * region's exit. */
int swapagent_region_end(const char *group, const uintptr_t *output_ptrs, size_t n_out, const uintptr_t *save_ptrs,
                         const size_t *save_nbytes, const uint32_t *save_flags, size_t n_save, int64_t *handles,
                         const uintptr_t *desc_ptrs, const char *const *descs, size_t n_desc);

/* The guard: swap code the agent does not drive (hyper-parallel's own SwapManager, run unmodified) asks
 * the agent before each storage release it attempts, and obeys. A guarded group is reported like any other
 * (region_enter with its inputs, its saves, region_exit with its outputs), but the framework moves its
 * storages itself: the agent classifies them and never copies, releases or restores one of them.
 * Call swapagent_guard before the group's first region_exit (again: no effect). */
int swapagent_guard(const char *group);
/* Results of swapagent_guard_release. */
#define SWAPAGENT_RELEASE_KEEP 0   /* keep the storage on device: skip the release */
#define SWAPAGENT_RELEASE_ALLOW 1  /* release it: the agent records it as an offload of its bytes */
/* The framework is about to release (resize to 0) the storage whose base is ptr, of nbytes bytes, saved by
 * group (NULL: whichever live group saved it). Returns SWAPAGENT_RELEASE_ALLOW or SWAPAGENT_RELEASE_KEEP by
 * the policy (safe keeps every storage the ownership rules say someone outside the group owns: an input,
 * output, protected storage, parameter, or one another live group saved; outputs-only keeps nothing, off
 * keeps everything), or a negative code. A storage no live group saved is allowed: not the agent's to
 * decide. *token (if not NULL) gets the handle an allowed release is recorded under (0 when none). */
int swapagent_guard_release(const char *group, uintptr_t ptr, size_t nbytes, int64_t *token);
/* Like swapagent_guard_release, with the framework's evidence of who else holds the storage: others is the
 * number of references to it outside the saved tensors of the group whose swap releases it (the job's
 * variables, a view, another layer's saved tensor, an autograd node; 0: nothing but those saved tensors
 * holds it), negative when the framework cannot tell. Under safe, a storage whose keep reason is only
 * its role in the region (an input or an output of the group) may go when others is 0: its holders are
 * gone, whatever it was when the layer was entered. A protected storage, a parameter, a storage another
 * live group saved and one the agent moves itself stay, whatever the count; a negative count decides by
 * the role, as swapagent_guard_release. */
int swapagent_guard_release_held(const char *group, uintptr_t ptr, size_t nbytes, int64_t others, int64_t *token);
/* The framework's count of the references to each storage at ptrs[i] outside the saved tensors of group,
 * others[i] (negative: it cannot tell), read after the group's region exited and before its backward,
 * once the job's own variables moved on (the companions count when the next layer is entered). Under safe
 * a storage the agent keeps only for its role (a layer input) that nothing else holds (others[i] == 0)
 * becomes internal: the agent swaps it like the group's own activations. The rest of the rule is
 * swapagent_guard_release_held's. Companions' interface (ABI 1). */
int swapagent_holders(const char *group, const uintptr_t *ptrs, const int64_t *others, size_t n);
/* The framework gave a storage it released (swapagent_guard_release allowed it, token is what that call
 * gave) memory again: new_ptr is its base now. Addresses are reused, so the token, not the old base, names
 * the storage. */
int swapagent_guard_restore(int64_t token, uintptr_t new_ptr, size_t nbytes);
/* Records key=value in the process's trace metadata (a later value of a key wins): how a companion or
 * the bootstrap says what it did ("python_guard=attached"). key: 1 to 64 bytes of letters, digits and
 * '_'; value: at most 1024 bytes, no control character. */
int swapagent_note(const char *key, const char *value);

/* Deferred calls (additive). Where nothing a caller waits for depends on the agent's answers but their
 * codes, the library answers a region's calls itself: it checks at once that their arguments can be read,
 * copies them, gives the saves their handles and returns without entering the agent; the agent runs each
 * call later, in its place among the process's runtime calls and control calls, as the plain call would
 * have run then (the same trace events at the call's time and thread, classification, counts and fault
 * reports). That holds under policy off, where nothing moves, and under safe while nothing has moved yet
 * and a region end saves only storages below SWAPAGENT_MIN_BYTES (which stay on device). Under safe a call
 * that may move a storage runs in the agent at once instead, as the plain call, and from the first such
 * call on every deferred call does. A refusal found when a queued call runs (an unknown group, a call out
 * of order, a malformed description) is logged once and counted in the stats' "rejected"; at the call only
 * unreadable memory, NULL with n > 0 and n above 262144 are refused (SWAPAGENT_EINVAL), so a caller opts in
 * by using these forms. Descriptions come as one buffer: one line per described tensor (the lines of
 * swapagent_describe, "" for nothing known), each ended by a NUL, text_len bytes in all; descs_text NULL:
 * none given. */
/* 1 when the deferred calls are answered (policy off or safe), 0 when not: they then return
 * SWAPAGENT_ESTATE and do nothing, and the caller uses the plain calls. */
int swapagent_deferred(void);
/* region_enter_desc, deferred: descs_text holds one line per input (or is NULL). */
int swapagent_region_enter_deferred(const char *group, const uintptr_t *input_ptrs, size_t n, size_t n_positional,
                                    const char *descs_text, size_t text_len);
/* region_end, deferred: returns the handle of the first of the n_save saves (the others follow it, in order:
 * first + i), 0 when n_save is 0, or the negative code that refused the call whole. A save the agent
 * refuses leaves its handle unknown (swapagent_unpack of it returns 0). descs_text holds one line per
 * desc_ptrs entry. */
int64_t swapagent_region_end_deferred(const char *group, const uintptr_t *output_ptrs, size_t n_out,
                                      const uintptr_t *save_ptrs, const size_t *save_nbytes,
                                      const uint32_t *save_flags, size_t n_save, const uintptr_t *desc_ptrs,
                                      size_t n_desc, const char *descs_text, size_t text_len);
/* backward_enter and backward_exit, deferred. */
int swapagent_backward_enter_deferred(const char *group);
int swapagent_backward_exit_deferred(const char *group);
/* The same four for a native caller whose group and arrays are its own memory, known readable: they are
 * copied with plain loads, not through the kernel (that read is most of a deferred call's cost). A bad
 * pointer faults the process here: a caller that cannot vouch for its pointers (ctypes) uses the forms
 * above. NULL with n > 0 and n above 262144 are refused as there. */
int swapagent_region_enter_deferred_direct(const char *group, const uintptr_t *input_ptrs, size_t n,
                                           size_t n_positional, const char *descs_text, size_t text_len);
int64_t swapagent_region_end_deferred_direct(const char *group, const uintptr_t *output_ptrs, size_t n_out,
                                             const uintptr_t *save_ptrs, const size_t *save_nbytes,
                                             const uint32_t *save_flags, size_t n_save, const uintptr_t *desc_ptrs,
                                             size_t n_desc, const char *descs_text, size_t text_len);
int swapagent_backward_enter_deferred_direct(const char *group);
int swapagent_backward_exit_deferred_direct(const char *group);

/* swapagent_unpack's answer where it needs no call into the agent and never waits (additive): the base of a
 * handle whose storage stays on device (every handle under off, the kept ones under safe), recorded as its
 * unpack; 0 where only swapagent_unpack can answer (it may wait for a copy, so a caller holding a lock the
 * framework's storage ops take, such as Python's GIL, releases it for that call). */
uintptr_t swapagent_unpack_resident(int64_t handle);

#ifdef __cplusplus
}
#endif
#endif
