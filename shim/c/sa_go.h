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
/* The parts of a call's copy (calls.def's SA_PART rows, in their order). */
enum sa_part {
#define SA_PART(NAME, field, count, size, how) SA_PART_##NAME,
#include "calls.def"
  SA_NPARTS
};
/* A control call as calls.c copied it, for the agent to run now (sa_go_run) or, queued, from the ring (the
 * event SA_FN_QUEUED, args[0] its address; sa_call_free gives it back). Its parts lie in data, where
 * part_off says (bytes from data), part_n entries each; the group name and its NUL at group_off. Readers
 * take the places from here, never work them out again. */
typedef struct sa_call {
  uint32_t kind;      /* SWAPAGENT_CALL_* */
  uint32_t has_group; /* a group was given (GUARD_RELEASE may give none) */
  uint32_t has_text;  /* the caller gave text (descriptions; NOTE's value) */
  uint32_t pad;
  uint64_t group_off; /* where the group name begins */
  uint64_t group_len; /* bytes of the group name (without NUL; MaxGroup+1 when it ran on) */
  uint64_t part_off[SA_NPARTS]; /* enum sa_part: where each part begins (8-byte aligned) */
  uint64_t part_n[SA_NPARTS];   /* and its entries (0 for a part its kind does not read) */
  uint64_t n_pos;               /* REGION_ENTER: how many inputs are positional */
  uint64_t ptr, nbytes;
  int64_t others, handle;
  int64_t first; /* queued: the handle of the first save (the others follow it) */
  int64_t token; /* GUARD_RELEASE's token, written by the agent */
  uint64_t data[];
} sa_call;
void sa_call_free(uintptr_t d);
/* How calls.c takes the queued calls: sa_go_queueing's answer, as the engine allows them
 * (offload.Queueing; shim/exports.go maps one to the other). */
enum sa_queueing {
  SA_QUEUE_NONE = 1,       /* every call runs at once */
  SA_QUEUE_ALL = 2,        /* every queueable call is queued: nothing ever moves */
  SA_QUEUE_UNTIL_MOVE = 3, /* queued until the agent first moves a storage (sa_queue_close), a region exit only
                            * when each save is below the size the agent keeps on device */
};
/* Ends queueing under SA_QUEUE_UNTIL_MOVE, for good, before the agent first moves a storage; returns once
 * every call that saw it open has its event in the ring. */
void sa_queue_close(void);
/* The runtime's error message captured at the last failed sync ("" when none). */
const char *sa_err_msg(void);

#endif
