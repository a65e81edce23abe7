/* sa_go.h: the part of the shim's C interface the cgo glue (the Go files of shim/) includes: the event
 * layout agent.Raw mirrors, and the plain C helpers Go calls. No Go pointer is kept by any of them. */
#ifndef SWAPAGENT_SA_GO_H_
#define SWAPAGENT_SA_GO_H_

#include <stddef.h>
#include <stdint.h>

/* One runtime event: 72 bytes, the layout agent.Raw mirrors. */
typedef struct sa_event {
  int64_t ts; /* CLOCK_MONOTONIC ns */
  uint32_t tid;
  uint16_t fn;
  uint16_t flags;
  int64_t ret;
  uint64_t args[6];
} sa_event;

/* One tensor created on this thread since its previous launch. */
typedef struct sa_tensor {
  uint64_t handle, addr, extent;
} sa_tensor;

int sa_ring_drain(sa_event *out, int max);
uint64_t sa_take_lost(void);
const char *sa_fn_name(int id);
int sa_nfn(void);
int64_t sa_start_mono(void);
int64_t sa_start_wall(void);
void sa_set_active(void);
void sa_set_inert(void);
int sa_is_forked(void);
/* Why the Go runtime's threads may still take SIGCHLD or SIGPROF (signals.c); NULL when they cannot. */
const char *sa_signal_problem(void);
void sa_drainer_thread(void);
int sa_crash_pending(void);
void sa_crash_ack(void);
int sa_call_release(uintptr_t fn, uintptr_t ctx, int64_t handle, uintptr_t ptr, size_t nbytes);
uintptr_t sa_call_restore(uintptr_t fn, uintptr_t ctx, int64_t handle, size_t nbytes);
/* The runtime mover's calls: the real functions, never intercepted; SA_NORT when absent. */
int sa_real_memcpy_async(uintptr_t dst, size_t dest_max, uintptr_t src, size_t count, int kind, uintptr_t stream);
int sa_real_sync_stream(uintptr_t stream);
int sa_real_create_stream(uintptr_t *stream);
int sa_real_malloc_host(uintptr_t *ptr, size_t size);
int sa_real_free_host(uintptr_t ptr);
int sa_real_create_event(uintptr_t *event);
int sa_real_record_event(uintptr_t event, uintptr_t stream);
int sa_real_sync_event(uintptr_t event);
int sa_real_stream_wait_event(uintptr_t stream, uintptr_t event);
int sa_real_destroy_event(uintptr_t event);
/* The time between two completed events in ns (0 on error; returns the runtime's code). */
int sa_real_event_elapsed_ns(uintptr_t start, uintptr_t end, uint64_t *ns);
/* 1 when the event's latest record completed, 0 when not yet, -1 when the runtime cannot say. */
int sa_real_event_done(uintptr_t event);
/* The per-thread tensor list (for the launch check of issue 5). */
int sa_thread_tensors(sa_tensor *out, int max);
/* The launch check's watched ranges: n values, [lo, hi) pairs (replaces the previous set). */
void sa_set_dead(const uint64_t *ranges, int n);
/* Resident handles (resident.c): base != 0 puts the handle in the table of those swapagent_unpack answers
 * in C, base 0 takes it out. */
void sa_resident_set(int64_t handle, uintptr_t base);
/* A deferred control call (defer.c), as the C side copied it at the call, for the drain to run in its place
 * (the ring event SA_FN_DEFER, args[0] its address; sa_deferred_free gives it back). */
enum { SA_DEFER_ENTER = 1, SA_DEFER_END, SA_DEFER_BACKWARD_ENTER, SA_DEFER_BACKWARD_EXIT };
typedef struct sa_deferred {
  uint32_t call;      /* SA_DEFER_* */
  uint32_t has_text;  /* the caller gave descriptions (descs_text not NULL) */
  uint64_t group_len; /* bytes of the group name (without NUL; MaxGroup+1 when it ran on) */
  uint64_t n_ptrs;    /* inputs (enter) or outputs (end) */
  uint64_t n_pos;     /* enter: how many inputs are positional */
  uint64_t n_save;    /* end: saves */
  uint64_t n_desc;    /* end: described pointers */
  uint64_t text_len;  /* bytes of descs_text, as given */
  int64_t first;      /* end: the handle of the first save (the others follow it) */
  /* ptrs[n_ptrs], save_ptrs[n_save], save_nbytes[n_save], desc_ptrs[n_desc] as uint64_t, then
   * save_flags[n_save] as uint32_t, then the text, then the group name. */
  uint64_t data[];
} sa_deferred;
void sa_deferred_free(uintptr_t d);
/* Ends the deferred calls under policy safe, for good, before the agent first moves a storage; returns once
 * every call that saw them open has its event in the ring. */
void sa_defer_close(void);

/* The runtime's error message captured at the last failed sync ("" when none). */
const char *sa_err_msg(void);

#endif
