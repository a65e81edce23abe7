/* _hot.h: what the three files of the companions' compiled hot path share (one module, swapagent._hot):
 *   _hot.c         a saved tensor's path: Hot (the layer's state), Packed, pack and unpack; the module;
 *   _hot_grad.c    Pass, the gradient chains (Chain, Call) and a native layer's backward bookkeeping;
 *   _hot_region.c  torch's region hooks (Hot.region, Hot.pre, Hot.post): the walk of the arguments, their
 *                  pointers and descriptions, the region's enter and end calls.
 * The state they read is in C structs that core fills (Hot's and Pass's members): no attribute of core's
 * objects is looked up by name here. Names looked up are the framework's (a tensor's dtype, data_ptr, ...)
 * and the binding's Agent methods, which a wrapper may replace on the object. */
#ifndef SWAPAGENT_HOT_H
#define SWAPAGENT_HOT_H

#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>

#include "swapagent.h"

typedef uintptr_t (*unpack_fn)(int64_t handle);
typedef __typeof__(&swapagent_call) call_fn;

/* ---- the bench's timed build (make bench-companions builds one with -DSWAPAGENT_HOT_TIMED) ----
 * The time spent in each entry point, and in the parts of the region hooks, inside real steps: where a saved
 * tensor's time goes on this path (python/bench/floor.py prints it beside the empty hooks'). timers() reads
 * and resets it. The plain build has none of it: the wrappers and probes compile to nothing. */
enum { T_PACK, T_UNPACK, T_PRE, T_POST, T_GRAD, T_END, T_FREE, T_PRE_PARAMS, T_PRE_INPUTS, T_POST_DESCS,
       T_POST_REPORT, T_POST_GRADS, T_N };
#ifdef SWAPAGENT_HOT_TIMED
#include <time.h>
struct t_acc {
  double s;
  long n;
};
extern struct t_acc t_acc[T_N];
static inline double t_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#define T_BEGIN(id) double t_##id = t_now()
#define T_END(id) (t_acc[id].s += t_now() - t_##id, t_acc[id].n++)
#define TIMED(fn) fn##_timed
#define TIMED_O(id, fn)                                   \
  static PyObject *fn##_timed(PyObject *a, PyObject *b) { \
    T_BEGIN(id);                                          \
    PyObject *r = fn(a, b);                               \
    T_END(id);                                            \
    return r;                                             \
  }
#define TIMED_CALL(id, fn)                                             \
  static PyObject *fn##_timed(PyObject *a, PyObject *b, PyObject *c) { \
    T_BEGIN(id);                                                       \
    PyObject *r = fn(a, b, c);                                         \
    T_END(id);                                                         \
    return r;                                                          \
  }
#else
#define T_BEGIN(id) ((void)0)
#define T_END(id) ((void)0)
#define TIMED(fn) fn
#define TIMED_O(id, fn)
#define TIMED_CALL(id, fn)
#endif

/* ---- Hot: one layer's state and hooks ----
 * Object pointers only in hot_objs, so init, traverse and clear walk them as one array (hot_objs()). */
struct hot_objs {
  /* the layer's state that both paths change (core's State has members of the same names) */
  PyObject *latest; /* the Pass of the latest forward, or None */
  PyObject *params; /* frozenset of the parameters' storage pointers during a forward */
  /* what Hot() is given: the layer's lists, dict and sets, its framework's and agent's, its own methods */
  PyObject *layer;                                   /* what a Pass's layer is (core.Layer) */
  PyObject *saved_of, *alias;                        /* Framework.saved, Framework.alias */
  PyObject *region;                                  /* dict: storage ptr -> slot */
  PyObject *bptr, *bsize, *bflag, *bstore, *saved_t; /* lists: the open region's saves, by slot */
  PyObject *unpacked;                                /* set: handles unpacked since the last backward exit */
  PyObject *entries;                                 /* dict: the registry's handle -> storage */
  PyObject *handles, *saved;                         /* lists: Layer._handles, Layer._saved */
  PyObject *agent;                                   /* the binding's Agent (or a test's, the bench's) */
  PyObject *group;                                   /* bytes: the group's name, the C string the calls take */
  PyObject *acquire, *release;                       /* the layer's lock's (an RLock) */
  PyObject *flush, *enter, *maybe_exit, *input_grad, *output_grad, *forward_pre, *forward_post; /* Layer's */
  PyObject *agent_dict;                              /* the agent's instance dict, or NULL: it has none */
  /* torch's region path (Hot.region), NULL until then */
  PyObject *param_ptrs;                              /* () -> the module's parameter pointers (Torch.param_ptrs) */
  PyObject *tensor_type;                             /* torch.Tensor */
  PyObject *push, *pop;                              /* torch's saved-tensor default hooks push and pop */
  PyObject *descs, *describe, *walk, *is_tensor;     /* core's description cache and maker, walk_named, is_tensor */
  PyObject *chains, *chain;                          /* core's gradient-hook table and its maker */
  PyObject *queue;                                   /* torch's queue_callback: fn runs when the backward ends */
  PyObject *pack_m, *unpack_m;                       /* this Hot's bound pack and unpack, what push hands torch */
};
#define HOT_NOBJS (sizeof(struct hot_objs) / sizeof(PyObject *))

typedef struct Hot {
  PyObject_HEAD struct hot_objs o;
  unpack_fn unpack;   /* swapagent_unpack, or NULL: the agent's Python method */
  unpack_fn resident; /* swapagent_unpack_resident, or NULL: every unpack by swapagent_unpack */
  char removed;       /* Layer.removed: the layer's hooks were taken off, those left on tensors go quiet */
  char guarded;       /* the guard reports this layer: its region hooks are the Python methods */
  int native;         /* region() ran: torch tensors are read here, the region hooks may run in C */
  int include_cpu;    /* CPU tensors are reported (Torch.include_cpu) */
  int active;         /* saved-tensor hooks pushed by pre and not popped yet */
  /* The saved tensors (Packed) of any forward neither unpacked nor freed yet: Layer._waiting, whose len() it
   * is. A count, not a set of ids: no object made, hashed and looked up per saved tensor. Read and changed
   * with the GIL held. */
  Py_ssize_t waiting;
} Hot;

/* ---- Pass: core.Pass (one forward of a layer, from its region enter to its backward exit) ---- */
typedef struct {
  PyObject_HEAD PyObject *layer; /* the layer (a core Layer) */
  Hot *hot;                      /* the layer's Hot */
  PyObject *refs, *handles;      /* lists, by slot: saved tensors alive, the agent's handle or code */
  Py_ssize_t inputs_left;        /* positional inputs whose gradient has not arrived yet */
  char entered, exited, ended;
  PyObject *weakrefs;
} Pass;

/* *dst = v, stealing v, then the old value dropped (Py_SETREF, which the limited API lacks before 3.12). */
static inline void set_ref(PyObject **dst, PyObject *v) {
  PyObject *old = *dst;
  *dst = v;
  Py_XDECREF(old);
}

extern PyTypeObject *HotType, *PassType, *PackedType, *CallType, *ChainType;
extern int watched;                 /* core has a guard's hooks (core.watch): the region hooks are Python's */
extern PyObject *hook_failed, *end_failed; /* core's loggers of a gradient hook, an end callback that raised */
extern PyObject *freed_layers, *end_freed; /* storage.freed_layers, core.end_freed (Layer.freed) */
extern PyObject *s_agent_unpack, *s_check, *s_c_calls, *s_region_enter, *s_region_exit, *s_backward_enter,
    *s_backward_exit, *s_dtype, *s_shape, *s_is_cpu, *s_is_meta, *s_untyped_storage, *s_data_ptr, *s_nbytes,
    *s_requires_grad, *s_dataclass_fields;

/* _hot.c */
int add_type(PyObject *m, const char *name, PyTypeObject **dst, PyType_Spec *spec);
void heap_free(PyObject *self);
void gc_dealloc(PyObject *self, inquiry clear);
PyObject *call2(PyObject *fn, PyObject *a, PyObject *b); /* fn(a, b): b NULL for fn(a), a NULL for fn() */
PyObject *call_method2(PyObject *obj, PyObject *name, PyObject *a, PyObject *b);
int agent_replaced(Hot *h, PyObject *a, PyObject *b);
int list_clear(PyObject *l);
int attr_true(PyObject *o, PyObject *name);
long refs_at(PyObject *refs, Py_ssize_t i);
int is_tensor(Hot *h, PyObject *x);
int torch_storage(Hot *h, PyObject *t, int check_meta, PyObject **s);
void hand_failure(PyObject *log);
PyObject *desc_of(PyObject *t, PyObject *cache, PyObject *describe);

/* _hot_grad.c */
Pass *pass_new(Hot *h);
int hot_enter(Hot *h, Pass *p);
int hot_maybe_exit(Hot *h);
int chain_add(PyObject *chain, PyObject *pass, int kind);
int grad_init(PyObject *m);
extern long kind_input, kind_output;

/* _hot_region.c: the agent's one call, as Agent.c_calls gives it: (opts, swapagent_call's address). The hooks
 * pass their own buffers, so opts has SWAPAGENT_OPT_OWN_MEMORY, and SWAPAGENT_OPT_QUEUE where the agent
 * queues calls. */
struct calls {
  PyObject *agent;
  uint32_t opts;
  call_fn call;
};
int direct_calls(Hot *h, struct calls *c, PyObject *a, PyObject *b);
int agent_check(Hot *h, PyObject *agent, const char *fmt, long long rc);
#define RECORD(k, ...) (&(struct swapagent_call){.size = sizeof(struct swapagent_call), .kind = (k), __VA_ARGS__})
PyObject *hot_region(PyObject *self, PyObject *args, PyObject *kw); /* Hot.region, Hot.pre, Hot.post */
PyObject *hot_pre(PyObject *self, PyObject *args);
PyObject *hot_post(PyObject *self, PyObject *args);
extern long walk_max_depth;
extern PyObject *walk_atoms;
int region_init(void);

#endif
