/* _hot.c: the companions' per-saved-tensor work in C (swapagent.core.Layer's pack and unpack hooks, and the
 * Packed they hand the framework), against Python's limited API, so one build (abi3) serves every Python 3
 * from 3.9 on of an architecture. It does what the pure-Python closures of Layer._hot_path do, on the same
 * Python objects (the layer's lists, dict and sets), so either path can run and the rest of the companion
 * does not know which one did; core.py stays the one description of the rule. What it saves is the
 * interpreter: no bytecode, no frame, no attribute lookup of its own state, a Packed without a Python
 * __del__, and the agent's swapagent_unpack called directly instead of through ctypes.
 *
 * Two more parts serve the torch companion, when it asks for them:
 *   - the region hooks (Hot.region, then Hot.pre and Hot.post as the module's forward pre-hook and forward
 *     hook): Layer.forward_pre and forward_post's common case (the walk of the inputs and outputs, the
 *     parameter pointers, the gradient hooks, the region's enter and end calls by address, with the GIL
 *     released); any case they do not cover (a guard, a test's hook, an agent without the C calls) goes to
 *     the Python methods, so those stay the rule;
 *   - Chain and Call: core._Chain and core._Call, the one gradient hook per tensor and its calls.
 *
 * Built by make (python/python.mk) beside libswapagent.so; swapagent.core loads it when it is there and
 * falls back to the pure-Python path when it is not. */
#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>

#include "swapagent.h"



typedef uintptr_t (*unpack_fn)(int64_t handle);

/* Interned attribute names, made once at import. */
static PyObject *s_latest, *s_params, *s_refs, *s_handles, *s_entered, *s_flush, *s_enter, *s_maybe_exit,
    *s_agent, *s_unpack, *s_check, *s_dict, *s_dtype, *s_shape, *s_is_cpu, *s_is_meta, *s_untyped_storage,
    *s_data_ptr, *s_nbytes, *s_exited, *s_inputs_left, *s_forward_pre, *s_forward_post, *s_c_calls,
    *s_region_enter, *s_region_exit, *s_guarded, *s_forward_hook, *s_saves_hook, *s_gen, *s_dicts, *s_key, *s_ptrs,
    *s_param_ptrs, *s_fw, *s_dataclass_fields, *s_layer, *s_removed, *s_input_grad, *s_output_grad,
    *s_requires_grad, *s_add, *s_lock, *s_acquire, *s_release, *s_ended,  *s_backward_enter,
    *s_backward_exit, *s_group, *s_end_failed;
static PyObject *zero; /* 0, the handle a save starts with */

static PyTypeObject *PackedType, *HotType;

/* ---- the bench's timed build (make bench-companions builds one with -DSWAPAGENT_HOT_TIMED) ----
 * The time spent in each entry point, and in the parts of the region hooks, inside real steps: where a saved
 * tensor's time goes on this path (python/bench/floor.py prints it beside the empty hooks'). timers() reads
 * and resets it. The plain build has none of it: the wrappers and probes compile to nothing. */
enum { T_PACK, T_UNPACK, T_PRE, T_POST, T_GRAD, T_END, T_FREE, T_PRE_PARAMS, T_PRE_INPUTS, T_POST_DESCS,
       T_POST_REPORT, T_POST_GRADS, T_N };
#ifdef SWAPAGENT_HOT_TIMED
#include <time.h>
static const char *const t_names[T_N] = {"pack", "unpack", "pre", "post", "grad", "end", "free", "pre.params",
                                         "pre.inputs", "post.descs", "post.report", "post.grads"};
static struct {
  double s;
  long n;
} t_acc[T_N];
static double t_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#define T_BEGIN(id) double t_##id = t_now()
#define T_END(id) (t_acc[id].s += t_now() - t_##id, t_acc[id].n++)
#define TIMED(fn) fn##_timed
#define TIMED_O(id, fn)                                           \
  static PyObject *fn##_timed(PyObject *a, PyObject *b) {         \
    T_BEGIN(id);                                                  \
    PyObject *r = fn(a, b);                                       \
    T_END(id);                                                    \
    return r;                                                     \
  }
#define TIMED_CALL(id, fn)                                        \
  static PyObject *fn##_timed(PyObject *a, PyObject *b, PyObject *c) { \
    T_BEGIN(id);                                                  \
    PyObject *r = fn(a, b, c);                                    \
    T_END(id);                                                    \
    return r;                                                     \
  }

/* timers(): {probe: (seconds, calls)} since the last call. */
static PyObject *timers(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(arg)) {
  PyObject *d = PyDict_New();
  for (int i = 0; d != NULL && i < T_N; i++) {
    PyObject *v = Py_BuildValue("(dl)", t_acc[i].s, t_acc[i].n);
    if (v == NULL || PyDict_SetItemString(d, t_names[i], v) < 0) Py_CLEAR(d);
    Py_XDECREF(v);
    t_acc[i].s = 0;
    t_acc[i].n = 0;
  }
  return d;
}
#else
#define T_BEGIN(id) ((void)0)
#define T_END(id) ((void)0)
#define TIMED(fn) fn
#define TIMED_O(id, fn)
#define TIMED_CALL(id, fn)
#endif

/* A native layer's backward bookkeeping in C (Layer.enter, maybe_exit, input_grad: the backward section). */
typedef struct Hot Hot;
static int hot_enter(Hot *h, PyObject *p);
static int hot_maybe_exit(Hot *h);
static int hot_input_grad(Hot *h, PyObject *p);
static int hot_backward_end(Hot *h, PyObject *p);

/* ---- Packed: what pack returns; core.Packed's fields and its __del__, in C. ---- */

typedef struct {
  PyObject_HEAD Py_ssize_t slot;
  PyObject *tensor;
  PyObject *pass_;
  PyObject *hot; /* the Hot that made it: the registry and the waiting count its end updates */
  int waiting;   /* counted in its Hot's waiting: neither unpacked nor freed yet */
} Packed;

/* ---- Hot: one layer's pack and unpack, bound to its state. ---- */

/* The objects a Hot holds, in Hot()'s argument order: only object pointers, so init, traverse and clear walk
 * them as one array (hot_objs). */
struct hot_objs {
  PyObject *layer;
  PyObject *saved_of, *alias;                        /* Framework.saved, Framework.alias */
  PyObject *region;                                  /* dict: storage ptr -> slot */
  PyObject *bptr, *bsize, *bflag, *bstore, *saved_t; /* lists: the open region's saves, by slot */
  PyObject *unpacked;                                /* set */
  PyObject *entries;                                 /* dict: the registry's handle -> storage */
};
#define HOT_NOBJS (sizeof(struct hot_objs) / sizeof(PyObject *))
_Static_assert(HOT_NOBJS == 11, "Hot()'s argument format parses 11 objects");

/* What the region path (Hot.region) holds besides, in region()'s argument order. */
struct region_objs {
  PyObject *module, *tensor_type, *pass_type;  /* the layer's module, the framework's tensor class, core.Pass */
  PyObject *saved, *handles;                   /* the layer's _saved and _handles lists */
  PyObject *param_cache, *registered;          /* Torch.param_ptrs's cache dict; _modules_registered or None */
  PyObject *push, *pop;                        /* torch's saved-tensor default hooks push and pop */
  PyObject *core;                              /* swapagent.core's globals: forward_hook, saves_hook */
  PyObject *group;                             /* bytes: the group's name, the C string the calls take */
  PyObject *descs, *describe, *walk, *is_tensor; /* core._saved_descs, core.saved_desc, walk_named, is_tensor */
  PyObject *chains, *chain;                    /* core._chains and core.chain: each tensor's gradient hook */
  PyObject *queue;                             /* torch's queue_callback: fn runs when the backward pass ends */
  PyObject *pack_m, *unpack_m;                 /* this Hot's bound pack and unpack, what push hands torch */
  PyObject *no_params;                         /* frozenset(): _params outside a forward */
  PyObject *acquire, *release;                 /* the layer's lock's (Layer._lock), bound once */
};
#define REGION_NOBJS (sizeof(struct region_objs) / sizeof(PyObject *))
_Static_assert(REGION_NOBJS == 23, "region()'s argument format parses 18 objects, 5 are made");

/* The layer's agent (Layer.agent, set once when the layer is made) and its instance dict (NULL: it has none),
 * looked up at the first call that needs them (hot_agent): each call still looks the agent's methods up in
 * that dict, as the Python path looks them up on the object. */
struct agent_objs {
  PyObject *agent, *dict;
};
#define AGENT_NOBJS (sizeof(struct agent_objs) / sizeof(PyObject *))

struct Hot {
  PyObject_HEAD struct hot_objs o;
  struct region_objs r; /* all NULL until region() */
  struct agent_objs a;  /* all NULL until hot_agent */
  unpack_fn unpack;     /* swapagent_unpack, or NULL: the agent's Python method */
  unpack_fn resident;   /* swapagent_unpack_resident, or NULL: every unpack by swapagent_unpack */
  int native;           /* region() ran: torch tensors are read here, the region hooks may run in C */
  int include_cpu;      /* CPU tensors are reported (Torch.include_cpu) */
  int active;           /* saved-tensor hooks pushed by pre and not popped yet */
  /* The saved tensors (Packed) of any forward neither unpacked nor freed yet: Layer._waiting, whose len() it
   * is. A count, not a set of ids: no object made, hashed and looked up per saved tensor. Read and changed
   * with the GIL held. */
  Py_ssize_t waiting;
};

/* A Packed leaves the waiting count (its unpack, or its end), once. */
static void packed_unwait(Packed *p) {
  if (p->waiting) {
    p->waiting = 0;
    ((Hot *)p->hot)->waiting--;
  }
}

/* Every object pointer of a Hot, as one array: hot_objs, region_objs then agent_objs, adjacent in the struct. */
#define HOT_ALL_OBJS (HOT_NOBJS + REGION_NOBJS + AGENT_NOBJS)
_Static_assert(offsetof(Hot, r) == offsetof(Hot, o) + sizeof(struct hot_objs), "o and r are adjacent");
_Static_assert(offsetof(Hot, a) == offsetof(Hot, r) + sizeof(struct region_objs), "r and a are adjacent");
static PyObject **hot_objs(Hot *h) { return (PyObject **)&h->o; }

/* The end of a heap type's object: freed, and its reference on the type dropped. */
static void heap_free(PyObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  tp_free(self);
  Py_DECREF(tp);
}

/* The end of a heap type's GC object: untracked (again: untracking twice is allowed), cleared, freed. */
static void gc_dealloc(PyObject *self, inquiry clear) {
  PyObject_GC_UnTrack(self);
  clear(self);
  heap_free(self);
}

/* The end of a saved tensor (core.Packed.__del__): one reference less on its slot; the registry forgets the
 * storage when the slot's last one went; the layer stops waiting for its unpack. Never an agent call (this may
 * run inside one, from the garbage collector), never an exception out. */
static void packed_end(Packed *p) {
  if (p->pass_ == NULL || p->hot == NULL) return;
  Hot *hot = (Hot *)p->hot;
  PyObject *refs = PyObject_GetAttr(p->pass_, s_refs);
  if (refs != NULL && PyList_Check(refs) && p->slot < PyList_Size(refs)) {
    long n = PyLong_AsLong(PyList_GetItem(refs, p->slot)) - 1;
    PyObject *v = PyLong_FromLong(n);
    if (v != NULL) PyList_SetItem(refs, p->slot, v); /* steals v */
    if (n == 0) {
      PyObject *hs = PyObject_GetAttr(p->pass_, s_handles);
      if (hs != NULL && PyList_Check(hs) && p->slot < PyList_Size(hs)) {
        PyObject *h = PyList_GetItem(hs, p->slot);
        if (PyDict_Contains(hot->o.entries, h) == 1) PyDict_DelItem(hot->o.entries, h);
      }
      Py_XDECREF(hs);
    }
  }
  Py_XDECREF(refs);
  packed_unwait(p);
}

static void packed_dealloc(PyObject *self) {
  T_BEGIN(T_FREE);
  Packed *p = (Packed *)self;
  /* The alias goes last, outside the probe: the empty hooks' alias is released too, by the framework. */
  PyObject *alias = p->tensor, *type, *value, *tb;
  p->tensor = NULL;
  PyErr_Fetch(&type, &value, &tb);
  packed_end(p);
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
  Py_CLEAR(p->pass_);
  Py_CLEAR(p->hot);
  heap_free(self);
  T_END(T_FREE);
  Py_XDECREF(alias);
}

/* The agent's handle (0 before the region reported its saves, or when the save was refused). */
static PyObject *packed_handle(PyObject *self, void *closure) {
  (void)closure;
  Packed *p = (Packed *)self;
  PyObject *hs = PyObject_GetAttr(p->pass_, s_handles);
  if (hs == NULL) return NULL;
  long long h = 0;
  if (PyList_Check(hs) && p->slot < PyList_Size(hs)) h = PyLong_AsLongLong(PyList_GetItem(hs, p->slot));
  Py_DECREF(hs);
  if (h == -1 && PyErr_Occurred()) return NULL;
  return PyLong_FromLongLong(h > 0 ? h : 0);
}

static PyMemberDef packed_members[] = {
    {"slot", T_PYSSIZET, offsetof(Packed, slot), READONLY, "index of its storage among the forward's saves"},
    {"tensor", T_OBJECT, offsetof(Packed, tensor), READONLY, "the saved tensor's alias"},
    {"pass_", T_OBJECT, offsetof(Packed, pass_), READONLY, "the forward (core.Pass) that saved it"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef packed_getset[] = {
    {"handle", packed_handle, NULL, "the agent's handle, 0 before the region reported its saves", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot packed_slots[] = {
    {Py_tp_dealloc, packed_dealloc},
    {Py_tp_members, packed_members},
    {Py_tp_getset, packed_getset},
    {Py_tp_doc, "What the compiled pack hook returns (core.Packed's fields)."},
    {0, NULL},
};

/* Not tracked by the garbage collector: one saved tensor is one Packed, and tracking each (and the collections
 * its allocations start) was a tenth of its cost. It cannot close a cycle the collector could break: its
 * only referrer is the framework's saved variable, in C++, which the collector never sees; what it holds
 * (the alias, without autograd history, and plain state) never leads back to it once the region ended. */
static PyType_Spec packed_spec = {"swapagent._hot.Packed", sizeof(Packed), 0, Py_TPFLAGS_DEFAULT, packed_slots};

/* ---- Hot ---- */

static int hot_traverse(PyObject *self, visitproc visit, void *arg) {
  PyObject **o = hot_objs((Hot *)self);
  for (size_t i = 0; i < HOT_ALL_OBJS; i++) Py_VISIT(o[i]);
  return 0;
}

static int hot_clear(PyObject *self) {
  PyObject **o = hot_objs((Hot *)self);
  for (size_t i = 0; i < HOT_ALL_OBJS; i++) Py_CLEAR(o[i]);
  ((Hot *)self)->native = 0;
  return 0;
}

static void hot_dealloc(PyObject *self) { gc_dealloc(self, hot_clear); }

/* Hot(layer, saved_of, alias, region, bptr, bsize, bflag, bstore, saved_t, unpacked, entries, unpack_address
 *     [, resident_address]): unpack_address is swapagent_unpack's address, or 0 to call layer.agent.unpack;
 * resident_address swapagent_unpack_resident's, or 0 (the default). */
static int hot_init(PyObject *self, PyObject *args, PyObject *kw) {
  Hot *h = (Hot *)self;
  unsigned long long unpack = 0, resident = 0;
  if (kw != NULL && PyDict_Size(kw) > 0) {
    PyErr_SetString(PyExc_TypeError, "Hot() takes no keyword arguments");
    return -1;
  }
  PyObject *o[HOT_NOBJS];
  if (!PyArg_ParseTuple(args, "OOOO!O!O!O!O!O!OO!K|K", &o[0], &o[1], &o[2], &PyDict_Type, &o[3], &PyList_Type,
                        &o[4], &PyList_Type, &o[5], &PyList_Type, &o[6], &PyList_Type, &o[7], &PyList_Type,
                        &o[8], &o[9], &PyDict_Type, &o[10], &unpack, &resident))
    return -1;
  if (!PyAnySet_Check(o[9])) {
    PyErr_SetString(PyExc_TypeError, "Hot(): unpacked must be a set");
    return -1;
  }
  PyObject **dst = hot_objs(h);
  for (size_t i = 0; i < HOT_NOBJS; i++) {
    PyObject *old = dst[i];
    Py_INCREF(o[i]);
    dst[i] = o[i];
    Py_XDECREF(old);
  }
  Py_CLEAR(h->a.agent); /* the new layer's, at the first call that needs it */
  Py_CLEAR(h->a.dict);
  h->unpack = (unpack_fn)(uintptr_t)unpack;
  h->resident = (unpack_fn)(uintptr_t)resident;
  return 0;
}

/* Truth of refs[i] (a list of ints): its count of saved tensors alive. */
static long refs_at(PyObject *refs, Py_ssize_t i) {
  if (i < 0 || i >= PyList_Size(refs)) return 0;
  return PyLong_AsLong(PyList_GetItem(refs, i));
}

/* The truth of attribute name of o: 1, 0, or -1 on an exception. */
static int attr_true(PyObject *o, PyObject *name) {
  PyObject *v = PyObject_GetAttr(o, name);
  int yes = v == NULL ? -1 : PyObject_IsTrue(v);
  Py_XDECREF(v);
  return yes;
}

/* isinstance(x, the framework's tensor class): a subtype without asking the metaclass (the common case) */
static int is_tensor(Hot *h, PyObject *x) {
  PyTypeObject *tp = (PyTypeObject *)h->r.tensor_type;
  return PyType_IsSubtype(Py_TYPE(x), tp) ? 1 : PyObject_IsInstance(x, h->r.tensor_type);
}

/* The storage of torch tensor t as Torch.storage finds it (meta: only when asked, Torch.saved does not
 * check it): 1 and *s, 0 when t is not reported, -1 on an exception. */
static int torch_storage(Hot *h, PyObject *t, int check_meta, PyObject **s) {
  *s = NULL;
  int is = is_tensor(h, t);
  if (is <= 0) return is;
  static PyObject *const *const flags[] = {&s_is_cpu, &s_is_meta};
  for (int i = h->include_cpu ? 1 : 0; i < (check_meta ? 2 : 1); i++) {
    int yes = attr_true(t, *flags[i]);
    if (yes != 0) return yes < 0 ? -1 : 0;
  }
  *s = PyObject_CallMethodObjArgs(t, s_untyped_storage, NULL);
  if (*s != NULL) return 1;
  /* sparse layouts, functional wrappers: no storage */
  if (PyErr_ExceptionMatches(PyExc_RuntimeError) || PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
    PyErr_Clear();
    return 0;
  }
  return -1;
}

/* Framework.saved(t) (natively for torch, no tuple made): 1 and new references *s, *ptr and *nbytes (the
 * storage, its pointer and size), 0 when t is not reported (None), -1 on an exception. */
static int saved_of(Hot *h, PyObject *t, PyObject **s, PyObject **ptr, PyObject **nbytes) {
  *ptr = *nbytes = NULL;
  if (h->native) {
    int rc = torch_storage(h, t, 0, s);
    if (rc <= 0) return rc;
    *ptr = PyObject_CallMethodObjArgs(*s, s_data_ptr, NULL);
    *nbytes = *ptr != NULL ? PyObject_CallMethodObjArgs(*s, s_nbytes, NULL) : NULL;
    if (*nbytes != NULL) return 1;
  } else {
    PyObject *info = PyObject_CallFunctionObjArgs(h->o.saved_of, t, NULL);
    *s = NULL;
    if (info == NULL) return -1;
    int got = info != Py_None && PyTuple_Check(info) && PyTuple_Size(info) == 3;
    if (got) {
      PyObject **dst[] = {s, ptr, nbytes};
      for (Py_ssize_t i = 0; i < 3; i++) {
        *dst[i] = PyTuple_GetItem(info, i);
        Py_INCREF(*dst[i]);
      }
    }
    Py_DECREF(info);
    return got;
  }
  Py_CLEAR(*s);
  Py_CLEAR(*ptr);
  return -1;
}

/* pack(t): Layer._hot_path's pack. */
static PyObject *hot_pack(PyObject *self, PyObject *t) {
  Hot *h = (Hot *)self;
  PyObject *s, *ptr, *nbytes;
  int got = saved_of(h, t, &s, &ptr, &nbytes);
  if (got <= 0) {
    if (got < 0) return NULL;
    Py_INCREF(t);
    return t;
  }
  PyObject *ps = PyObject_GetAttr(h->o.layer, s_latest);
  PyObject *out = NULL, *refs = NULL, *alias = NULL;
  if (ps == NULL) goto done;
  if (!PyObject_IsTrue(nbytes) || !PyObject_IsTrue(ptr) || ps == Py_None) {
    Py_INCREF(t);
    out = t;
    goto done;
  }
  refs = PyObject_GetAttr(ps, s_refs);
  if (refs == NULL) goto done;
  if (!PyList_Check(refs)) {
    PyErr_SetString(PyExc_TypeError, "Pass.refs is not a list");
    goto done;
  }
  Py_ssize_t i = -1;
  PyObject *slot = PyDict_GetItemWithError(h->o.region, ptr); /* borrowed */
  if (slot == NULL && PyErr_Occurred()) goto done;
  if (slot != NULL) i = PyLong_AsSsize_t(slot);
  long n = i >= 0 ? refs_at(refs, i) : 0;
  if (PyErr_Occurred()) goto done;
  if (n > 0) {
    /* The region saved this storage already, and a saved tensor still holds it: the same slot. */
    PyObject *v = PyLong_FromLong(n + 1);
    if (v == NULL || PyList_SetItem(refs, i, v) < 0) goto done;
  } else {
    i = PyList_Size(h->o.bptr);
    PyObject *iv = PyLong_FromSsize_t(i);
    if (iv == NULL) goto done;
    int rc = PyDict_SetItem(h->o.region, ptr, iv);
    Py_DECREF(iv);
    if (rc < 0) goto done;
    PyObject *params = PyObject_GetAttr(h->o.layer, s_params);
    if (params == NULL) goto done;
    int param = PySequence_Contains(params, ptr);
    Py_DECREF(params);
    if (param < 0) goto done;
    PyObject *flag = PyLong_FromLong(param ? SWAPAGENT_SAVE_PARAM : 0), *one = PyLong_FromLong(1);
    rc = flag == NULL || one == NULL || PyList_Append(h->o.bptr, ptr) < 0 || PyList_Append(h->o.bsize, nbytes) < 0 ||
         PyList_Append(h->o.bflag, flag) < 0 || PyList_Append(h->o.bstore, s) < 0 || PyList_Append(refs, one) < 0 ||
         PyList_Append(h->o.saved_t, t) < 0;
    Py_XDECREF(flag);
    Py_XDECREF(one);
    if (rc) goto done;
  }
  alias = PyObject_CallFunctionObjArgs(h->o.alias, t, NULL);
  if (alias == NULL) goto done;
  allocfunc alloc = (allocfunc)PyType_GetSlot(PackedType, Py_tp_alloc);
  Packed *pk = (Packed *)alloc(PackedType, 0);
  if (pk == NULL) goto done;
  pk->slot = i;
  pk->tensor = alias;
  alias = NULL;
  Py_INCREF(ps);
  pk->pass_ = ps;
  Py_INCREF(self);
  pk->hot = self;
  pk->waiting = 1;
  h->waiting++;
  out = (PyObject *)pk;
done:
  Py_XDECREF(alias);
  Py_XDECREF(refs);
  Py_XDECREF(ps);
  Py_DECREF(s);
  Py_DECREF(ptr);
  Py_DECREF(nbytes);
  return out;
}

/* Calls a method of the layer (or of what it holds) with no or one argument; NULL on its exception. */
static PyObject *call_method(PyObject *obj, PyObject *name, PyObject *arg) {
  PyObject *fn = PyObject_GetAttr(obj, name);
  if (fn == NULL) return NULL;
  PyObject *r = PyObject_CallFunctionObjArgs(fn, arg, NULL); /* arg NULL: no argument */
  Py_DECREF(fn);
  return r;
}

static PyObject *call_method2(PyObject *obj, PyObject *name, PyObject *a, PyObject *b) {
  PyObject *fn = PyObject_GetAttr(obj, name);
  if (fn == NULL) return NULL;
  PyObject *r = PyObject_CallFunctionObjArgs(fn, a, b, NULL);
  Py_DECREF(fn);
  return r;
}

/* The layer's agent (struct agent_objs): borrowed, or NULL on an exception. */
static PyObject *hot_agent(Hot *h) {
  if (h->a.agent != NULL) return h->a.agent;
  if (h->o.layer == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "swapagent: a cleared Hot was called");
    return NULL;
  }
  PyObject *agent = PyObject_GetAttr(h->o.layer, s_agent);
  if (agent == NULL) return NULL;
  PyObject *d = PyObject_GetAttr(agent, s_dict);
  if (d == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
      Py_DECREF(agent);
      return NULL;
    }
    PyErr_Clear(); /* an object without a __dict__ cannot have had its methods replaced */
  } else if (!PyDict_Check(d)) {
    Py_CLEAR(d);
  }
  h->a.agent = agent;
  h->a.dict = d;
  return agent;
}

/* Whether the agent object's own dict replaced method a or b (b NULL: a alone), as a test's recorder or a
 * wrapper does: 1, 0, or -1 on an exception. Call after hot_agent. */
static int agent_replaced(Hot *h, PyObject *a, PyObject *b) {
  if (h->a.dict == NULL) return 0;
  int yes = PyDict_GetItemWithError(h->a.dict, a) != NULL ||
            (b != NULL && PyDict_GetItemWithError(h->a.dict, b) != NULL);
  return PyErr_Occurred() ? -1 : yes;
}

/* The agent's unpack of handle h: nonzero when the storage is on the device. */
static int agent_unpack(Hot *h, PyObject *hv, long long handle) {
  PyObject *agent = hot_agent(h);
  if (agent == NULL) return -1;
  if (h->unpack != NULL) {
    /* Directly, unless the agent object's unpack was replaced. */
    int replaced = agent_replaced(h, s_unpack, NULL);
    if (replaced < 0) return -1;
    if (!replaced) {
      /* A storage that stays on device is answered at once, with the GIL held (nothing waits); any other
       * without it, as ctypes calls it: the agent may wait for a copy whose storage op is Python. */
      uintptr_t base = h->resident != NULL ? h->resident((int64_t)handle) : 0;
      if (base == 0) {
        Py_BEGIN_ALLOW_THREADS base = h->unpack((int64_t)handle);
        Py_END_ALLOW_THREADS
      }
      return base != 0;
    }
  }
  PyObject *r = call_method(agent, s_unpack, hv);
  if (r == NULL) return -1;
  int ok = PyObject_IsTrue(r);
  Py_DECREF(r);
  return ok;
}

/* unpack(p): Layer._hot_path's unpack. */
static PyObject *hot_unpack(PyObject *self, PyObject *arg) {
  Hot *h = (Hot *)self;
  if (Py_TYPE(arg) != PackedType) {
    Py_INCREF(arg);
    return arg;
  }
  Packed *p = (Packed *)arg;
  PyObject *ps = p->pass_, *hs = NULL, *r = NULL, *latest = NULL, *out = NULL;
  Py_INCREF(ps);
  hs = PyObject_GetAttr(ps, s_handles);
  if (hs == NULL || !PyList_Check(hs)) goto done;
  if (p->slot >= PyList_Size(hs)) {
    latest = PyObject_GetAttr(h->o.layer, s_latest);
    if (latest == NULL) goto done;
    if (latest == ps) { /* an unpack inside the region that saved it: the agent hears of its saves first */
      if ((r = call_method(h->o.layer, s_flush, NULL)) == NULL) goto done;
      Py_CLEAR(r);
    }
  }
  r = PyObject_GetAttr(ps, s_entered);
  if (r == NULL) goto done;
  int entered = PyObject_IsTrue(r);
  Py_CLEAR(r);
  if (!entered) { /* the first unpack of a forward not yet entered enters it (and prefetches) */
    if (h->native) {
      if (hot_enter(h, ps) < 0) goto done;
    } else if ((r = call_method(h->o.layer, s_enter, ps)) == NULL)
      goto done;
    Py_CLEAR(r);
  }
  if (p->slot < PyList_Size(hs)) {
    PyObject *hv = PyList_GetItem(hs, p->slot); /* borrowed; hs holds it */
    long long handle = PyLong_AsLongLong(hv);
    if (handle == -1 && PyErr_Occurred()) goto done;
    if (handle > 0) {
      int seen = PySet_Contains(h->o.unpacked, hv);
      if (seen < 0) goto done;
      if (!seen) {
        if (PySet_Add(h->o.unpacked, hv) < 0) goto done;
        int ok = agent_unpack(h, hv, handle);
        if (ok < 0) goto done;
        if (!ok) {
          /* agent.check("unpack(<h>)", ERUNTIME): warned of once, the job goes on */
          PyObject *agent = hot_agent(h); /* borrowed */
          PyObject *call = PyUnicode_FromFormat("unpack(%lld)", handle);
          PyObject *code = PyLong_FromLong(SWAPAGENT_ERUNTIME);
          r = agent && call && code ? call_method2(agent, s_check, call, code) : NULL;
          Py_XDECREF(call);
          Py_XDECREF(code);
          if (r == NULL) goto done;
          Py_CLEAR(r);
        }
      }
    }
  }
  packed_unwait(p);
  if (h->waiting == 0) {
    if (h->native) {
      if (hot_maybe_exit(h) < 0) goto done;
    } else if ((r = call_method(h->o.layer, s_maybe_exit, NULL)) == NULL)
      goto done;
    Py_CLEAR(r);
  }
  Py_INCREF(p->tensor);
  out = p->tensor;
done:
  Py_XDECREF(latest);
  Py_XDECREF(hs);
  Py_DECREF(ps);
  return out;
}

/* ---- Chain: core._Chain and its calls (core._Call) in C ----
 *
 * The one gradient hook the companion puts on a tensor crossing its layers: the same lists, the same order
 * (a tensor's input calls before its output calls), the same rule of which calls are dead; firing a call
 * runs the layer's own input_grad or output_grad. A native layer's end-of-backward callback is a Call too
 * (KIND_END, never on a chain): calling it fires it (Layer.enter's end, Layer.backward_end). */

/* What core says (configure): the kinds of a call on a chain (core.INPUT, core.OUTPUT), how deep the walk of
 * nested arguments goes (core._MAX_DEPTH) and the types it never looks into (core._ATOMS). The end callback's
 * kind is this file's own: never on a chain. */
static long kind_input = -2, kind_output = -3, walk_max_depth = -1;
static PyObject *walk_atoms; /* frozenset of types */
#define KIND_END (-1)

typedef struct {
  PyObject_HEAD PyObject *pass_; /* the forward it belongs to (a Pass) */
  PyObject *hot;                 /* the native layer's Hot (its bookkeeping runs in C), or NULL: the layer's methods */
  int kind;
  int fired;
} Call;

typedef struct {
  PyObject_HEAD PyObject *inputs, *outputs; /* lists of Call, in the order added */
  PyObject *remove;                         /* the gradient hook's remover (core.chain sets it) */
  PyObject *failed;                         /* failed(exception): logs a call that raised */
} Chain;

static PyTypeObject *CallType, *ChainType;

/* core._Call.dead: 1, 0, or -1 on an exception. */
static int call_dead(Call *c) {
  if (c->fired) return 1;
  PyObject *layer = PyObject_GetAttr(c->pass_, s_layer);
  if (layer == NULL) return -1;
  int dead = attr_true(layer, s_removed);
  if (dead == 0) dead = attr_true(c->pass_, s_exited);
  /* An output call only matters until its forward entered backward; an input call only while its forward
   * is the group's latest. */
  if (dead == 0 && c->kind == kind_output) dead = attr_true(c->pass_, s_entered);
  else if (dead == 0) {
    PyObject *latest = PyObject_GetAttr(layer, s_latest);
    dead = latest == NULL ? -1 : latest != c->pass_;
    Py_XDECREF(latest);
  }
  Py_DECREF(layer);
  return dead;
}

/* A kind call of forward pass; hot: the native layer's Hot, or NULL. A new reference, NULL on an exception. */
static Call *call_new(PyObject *pass, int kind, PyObject *hot) {
  allocfunc alloc = (allocfunc)PyType_GetSlot(CallType, Py_tp_alloc);
  Call *c = (Call *)alloc(CallType, 0);
  if (c == NULL) return NULL;
  Py_INCREF(pass);
  c->pass_ = pass;
  Py_XINCREF(hot);
  c->hot = hot;
  c->kind = kind;
  return c;
}

/* core._Call.fire: the layer's input_grad or output_grad of the call's forward (an end call: its
 * backward_end), at most once. */
static int call_fire(Call *c) {
  if (c->fired) return 0;
  c->fired = 1;
  if (c->hot != NULL && ((Hot *)c->hot)->native) { /* (not native: cleared by the collector) */
    Hot *h = (Hot *)c->hot;
    return c->kind == kind_input ? hot_input_grad(h, c->pass_)
           : c->kind == kind_output ? hot_enter(h, c->pass_)
                                    : hot_backward_end(h, c->pass_);
  }
  if (c->kind == KIND_END) return 0; /* its layer is gone */
  PyObject *layer = PyObject_GetAttr(c->pass_, s_layer);
  PyObject *r = layer == NULL ? NULL
                              : PyObject_CallMethodObjArgs(layer, c->kind == kind_input ? s_input_grad : s_output_grad,
                                                           c->pass_, NULL);
  Py_XDECREF(layer);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

static int call_traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(((Call *)self)->pass_);
  Py_VISIT(((Call *)self)->hot);
  return 0;
}

static int call_clear(PyObject *self) {
  Py_CLEAR(((Call *)self)->pass_);
  Py_CLEAR(((Call *)self)->hot);
  return 0;
}

static void call_dealloc(PyObject *self) { gc_dealloc(self, call_clear); }

static PyMemberDef call_members[] = {
    {"pass_", T_OBJECT, offsetof(Call, pass_), READONLY, "the forward (core.Pass) it belongs to"},
    {"kind", T_INT, offsetof(Call, kind), READONLY, "core.INPUT, core.OUTPUT, or 2: an end-of-backward callback"},
    {"fired", T_INT, offsetof(Call, fired), READONLY, "whether it fired"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *call_call(PyObject *self, PyObject *args, PyObject *kw);
TIMED_CALL(T_END, call_call)

static PyType_Slot call_slots[] = {
    {Py_tp_dealloc, call_dealloc}, {Py_tp_traverse, call_traverse},
    {Py_tp_clear, call_clear},     {Py_tp_members, call_members},
    {Py_tp_call, TIMED(call_call)},       {Py_tp_doc, "One forward's call on a gradient (core._Call), or its end callback."},
    {0, NULL},
};

static PyType_Spec call_spec = {"swapagent._hot.Call", sizeof(Call), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                call_slots};

/* The exception pending handed to log(exception) (NULL: dropped) and cleared: a hook or callback of the
 * framework's never raises into it. */
static void hand_failure(PyObject *log) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != NULL && tb != NULL) PyException_SetTraceback(value, tb);
  PyObject *r = log != NULL && value != NULL ? PyObject_CallFunctionObjArgs(log, value, NULL) : NULL;
  Py_XDECREF(r);
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

/* A call that raised: handed to chain.failed, which logs it; a gradient hook never breaks the step. */
static void chain_failed(Chain *ch) { hand_failure(ch->failed); }

/* call(): fires it, as the framework's end-of-backward callback; a failure goes to core._end_failed, which
 * logs it (never an exception into the framework's backward). */
static PyObject *call_call(PyObject *self, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kw)) {
  Call *c = (Call *)self;
  if (call_fire(c) < 0) {
    PyObject *core = c->hot != NULL ? ((Hot *)c->hot)->r.core : NULL;
    hand_failure(core != NULL && PyDict_Check(core) ? PyDict_GetItem(core, s_end_failed) : NULL); /* borrowed */
  }
  Py_RETURN_NONE;
}

/* Drops the dead calls of a list, in place. */
static int prune_list(PyObject *l) {
  Py_ssize_t n = PyList_Size(l);
  PyObject *keep = PyList_New(0);
  if (keep == NULL) return -1;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *c = PyList_GetItem(l, i);
    int dead = c == NULL ? -1 : call_dead((Call *)c);
    if (dead < 0 || (!dead && PyList_Append(keep, c) < 0)) {
      Py_DECREF(keep);
      return -1;
    }
  }
  int rc = PyList_Size(keep) == n ? 0 : PyList_SetSlice(l, 0, n, keep);
  Py_DECREF(keep);
  return rc;
}

static int chain_prune(Chain *ch) { return prune_list(ch->inputs) < 0 || prune_list(ch->outputs) < 0 ? -1 : 0; }

/* A kind call of forward pass; hot: the native layer's Hot, or NULL. */
static int chain_add(Chain *ch, PyObject *pass, int kind, PyObject *hot) {
  if (chain_prune(ch) < 0) return -1;
  Call *c = call_new(pass, kind, hot);
  if (c == NULL) return -1;
  int rc = PyList_Append(kind == kind_input ? ch->inputs : ch->outputs, (PyObject *)c);
  Py_DECREF(c);
  return rc;
}

/* The gradient hook: a tensor's input calls (the backward exit of the layer it entered) before its output
 * calls (the backward enter of the layer it left), each on the list as it was at the call. */
static PyObject *chain_call(PyObject *self, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kw)) {
  Chain *ch = (Chain *)self;
  PyObject *const lists[] = {ch->inputs, ch->outputs};
  for (size_t k = 0; k < 2; k++) {
    PyObject *calls = PyList_GetSlice(lists[k], 0, PyList_Size(lists[k]));
    if (calls == NULL) {
      chain_failed(ch);
      continue;
    }
    for (Py_ssize_t i = 0; i < PyList_Size(calls); i++)
      if (call_fire((Call *)PyList_GetItem(calls, i)) < 0) chain_failed(ch);
    Py_DECREF(calls);
  }
  if (chain_prune(ch) < 0) chain_failed(ch);
  Py_RETURN_NONE;
}

static PyObject *chain_add_m(PyObject *self, PyObject *args) {
  PyObject *pass;
  int kind;
  if (!PyArg_ParseTuple(args, "Oi", &pass, &kind)) return NULL;
  if (chain_add((Chain *)self, pass, kind, NULL) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *chain_prune_m(PyObject *self, PyObject *Py_UNUSED(arg)) {
  if (chain_prune((Chain *)self) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *chain_empty_m(PyObject *self, PyObject *Py_UNUSED(arg)) {
  Chain *ch = (Chain *)self;
  return PyBool_FromLong(PyList_Size(ch->inputs) == 0 && PyList_Size(ch->outputs) == 0);
}

static int chain_init(PyObject *self, PyObject *args, PyObject *kw) {
  Chain *ch = (Chain *)self;
  PyObject *failed;
  if ((kw != NULL && PyDict_Size(kw) > 0) || !PyArg_ParseTuple(args, "O", &failed)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Chain(failed) takes no keyword arguments");
    return -1;
  }
  PyObject *ins = PyList_New(0), *outs = PyList_New(0);
  if (ins == NULL || outs == NULL) {
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    return -1;
  }
  Py_INCREF(failed);
  PyObject *old[] = {ch->inputs, ch->outputs, ch->failed};
  ch->inputs = ins;
  ch->outputs = outs;
  ch->failed = failed;
  for (size_t i = 0; i < 3; i++) Py_XDECREF(old[i]);
  return 0;
}

static int chain_traverse(PyObject *self, visitproc visit, void *arg) {
  Chain *ch = (Chain *)self;
  Py_VISIT(ch->inputs);
  Py_VISIT(ch->outputs);
  Py_VISIT(ch->remove);
  Py_VISIT(ch->failed);
  return 0;
}

static int chain_clear(PyObject *self) {
  Chain *ch = (Chain *)self;
  Py_CLEAR(ch->inputs);
  Py_CLEAR(ch->outputs);
  Py_CLEAR(ch->remove);
  Py_CLEAR(ch->failed);
  return 0;
}

static void chain_dealloc(PyObject *self) { gc_dealloc(self, chain_clear); }

static PyMemberDef chain_members[] = {
    {"inputs", T_OBJECT, offsetof(Chain, inputs), READONLY, "input calls (core.INPUT), in the order added"},
    {"outputs", T_OBJECT, offsetof(Chain, outputs), READONLY, "output calls (core.OUTPUT), in the order added"},
    {"remove", T_OBJECT, offsetof(Chain, remove), 0, "removes the gradient hook (None: none)"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef chain_methods[] = {
    {"add", chain_add_m, METH_VARARGS, "add(pass, kind): a call of forward pass of kind INPUT or OUTPUT."},
    {"prune", chain_prune_m, METH_NOARGS, "Drops the dead calls."},
    {"empty", chain_empty_m, METH_NOARGS, "Whether no call is left."},
    {NULL, NULL, 0, NULL},
};

TIMED_CALL(T_GRAD, chain_call)

static PyType_Slot chain_slots[] = {
    {Py_tp_init, chain_init},         {Py_tp_new, PyType_GenericNew},   {Py_tp_dealloc, chain_dealloc},
    {Py_tp_traverse, chain_traverse}, {Py_tp_clear, chain_clear},       {Py_tp_call, TIMED(chain_call)},
    {Py_tp_members, chain_members},   {Py_tp_methods, chain_methods},
    {Py_tp_doc, "The companion's gradient hook on one tensor (core._Chain)."},
    {0, NULL},
};

static PyType_Spec chain_spec = {"swapagent._hot.Chain", sizeof(Chain), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                 chain_slots};

/* ---- the region path: Torch's forward pre-hook and forward hook in C (Hot.region, Hot.pre, Hot.post) ----
 *
 * What Layer.forward_pre and Layer.forward_post do, for a torch layer whose agent takes its region calls
 * through swapagent_call (Agent.c_calls) and that no test hook or guard watches (region_calls): the same walks,
 * pointers, descriptions and Python objects, with the agent's region enter and exit called directly.
 * Anything else runs those Python methods, so core.py stays the one description of the rule. */

/* core.saved_desc(t): b"\tDTYPE\tSHAPE" from its cache by (t.dtype, t.shape), else describe(t), which fills
 * the cache (the shape as the framework gives it: torch.Size and MindSpore's tuple hash and compare as the
 * tuple core.saved_desc keys by). A new reference. */
static PyObject *desc_of(PyObject *t, PyObject *cache, PyObject *describe) {
  PyObject *dtype = PyObject_GetAttr(t, s_dtype), *shape = dtype != NULL ? PyObject_GetAttr(t, s_shape) : NULL;
  PyObject *key = shape != NULL ? PyTuple_Pack(2, dtype, shape) : NULL;
  Py_XDECREF(dtype);
  Py_XDECREF(shape);
  PyObject *d = key != NULL ? PyDict_GetItemWithError(cache, key) : NULL; /* borrowed */
  Py_XDECREF(key);
  if (d != NULL) {
    Py_INCREF(d);
    return d;
  }
  PyErr_Clear(); /* an attribute the framework lacks, an unhashable shape: describe says what is wrong */
  return PyObject_CallFunctionObjArgs(describe, t, NULL);
}

/* A growable byte buffer that starts on the stack: a region's pointers, sizes and text fit in it. */
struct buf {
  char *p;
  size_t n, cap;
  _Alignas(8) char small[512];
};

static void buf_init(struct buf *b) {
  b->p = b->small;
  b->n = 0;
  b->cap = sizeof b->small;
}

static void buf_free(struct buf *b) {
  if (b->p != b->small) PyMem_Free(b->p);
  buf_init(b);
}

static int buf_put(struct buf *b, const void *d, size_t k) {
  if (b->n + k > b->cap) {
    size_t cap = b->cap * 2;
    while (cap < b->n + k) cap *= 2;
    char *p = PyMem_Malloc(cap);
    if (p == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    memcpy(p, b->p, b->n);
    if (b->p != b->small) PyMem_Free(b->p);
    b->p = p;
    b->cap = cap;
  }
  if (k > 0) memcpy(b->p + b->n, d, k);
  b->n += k;
  return 0;
}

#define BUF_PUT(b, T, v) (buf_put((b), &(T){(v)}, sizeof(T)))
#define BUF_AT(b, T) ((T *)(void *)(b)->p)
#define BUF_LEN(b, T) ((b)->n / sizeof(T))
/* The array of a buffer for a C call: NULL when empty, as the Python path passes it. */
#define BUF_ARG(b, T) ((b)->n > 0 ? (const T *)(const void *)(b)->p : NULL)

/* str's UTF-8 appended to b, through a bounded cache (argument names and dict keys repeat every step). */
static PyObject *utf8_cache;

static int put_utf8(struct buf *b, PyObject *str) {
  PyObject *bs = PyDict_GetItemWithError(utf8_cache, str); /* borrowed */
  if (bs == NULL) {
    if (PyErr_Occurred() || (bs = PyUnicode_AsUTF8String(str)) == NULL) return -1;
    if (PyDict_Size(utf8_cache) >= 4096) PyDict_Clear(utf8_cache);
    int rc = PyDict_SetItem(utf8_cache, str, bs);
    Py_DECREF(bs); /* the cache holds it */
    if (rc < 0) return -1;
  }
  char *p;
  Py_ssize_t k;
  return PyBytes_AsStringAndSize(bs, &p, &k) < 0 ? -1 : buf_put(b, p, (size_t)k);
}

/* What a walk found: each tensor (a reference held) with its path, in order. */
struct ent {
  size_t off, len; /* the path in found.paths */
  PyObject *t;
};

struct found {
  struct buf ents, paths;
};

static void found_init(struct found *f) {
  buf_init(&f->ents);
  buf_init(&f->paths);
}

static void found_free(struct found *f) {
  for (size_t i = 0; i < BUF_LEN(&f->ents, struct ent); i++) Py_DECREF(BUF_AT(&f->ents, struct ent)[i].t);
  buf_free(&f->ents);
  buf_free(&f->paths);
}

static int found_add(struct found *f, const char *path, size_t len, PyObject *t) {
  struct ent e = {f->paths.n, len, t};
  if (buf_put(&f->paths, path, len) < 0 || buf_put(&f->ents, &e, sizeof e) < 0) return -1;
  Py_INCREF(t);
  return 0;
}

static const char *found_path(struct found *f, size_t i) {
  return f->paths.p + BUF_AT(&f->ents, struct ent)[i].off;
}

/* Whether x's type is one the walk never looks into (walk_atoms, core's): 1, 0, or -1 on an exception. */
static int is_atom(PyObject *x) { return PySet_Contains(walk_atoms, (PyObject *)Py_TYPE(x)); }

static int walk(Hot *h, PyObject *obj, struct buf *path, int depth, PyObject **seen, struct found *f);

/* One item of a container, as walk_named's loop takes it: a tensor is found, anything else not an atom
 * walked one level deeper. */
static int walk_item(Hot *h, PyObject *v, struct buf *path, int depth, PyObject **seen, struct found *f) {
  int is = is_tensor(h, v);
  if (is != 0) return is < 0 ? -1 : found_add(f, path->p, path->n, v);
  int atom = is_atom(v);
  return atom != 0 ? (atom < 0 ? -1 : 0) : walk(h, v, path, depth + 1, seen, f);
}

/* Subclasses of tuple, list and dict (namedtuples, ModelOutput) and dataclasses: walk_named itself walks
 * them, with this walk's seen set; anything else holds no tensor it would find. */
static int walk_other(Hot *h, PyObject *obj, struct buf *path, int depth, PyObject **seen, struct found *f) {
  if (!PyTuple_Check(obj) && !PyList_Check(obj) && !PyDict_Check(obj)) {
    if (PyType_Check(obj) || !PyObject_HasAttr((PyObject *)Py_TYPE(obj), s_dataclass_fields)) return 0;
  }
  if (*seen == NULL && (*seen = PySet_New(NULL)) == NULL) return -1;
  PyObject *ps = PyUnicode_DecodeUTF8(path->p, (Py_ssize_t)path->n, NULL), *out = PyList_New(0),
           *d = PyLong_FromLong(depth);
  PyObject *r = ps && out && d ? PyObject_CallFunctionObjArgs(h->r.walk, obj, h->r.is_tensor, ps, out, d, *seen, NULL)
                               : NULL;
  int rc = r == NULL ? -1 : 0;
  for (Py_ssize_t i = 0; rc == 0 && i < PyList_Size(out); i++) {
    PyObject *e = PyList_GetItem(out, i), *p = NULL; /* (path, tensor) */
    char *s;
    Py_ssize_t k;
    rc = PyTuple_Check(e) && PyTuple_Size(e) == 2 && (p = PyUnicode_AsUTF8String(PyTuple_GetItem(e, 0))) != NULL &&
                 PyBytes_AsStringAndSize(p, &s, &k) == 0
             ? found_add(f, s, (size_t)k, PyTuple_GetItem(e, 1))
             : -1;
    Py_XDECREF(p);
  }
  Py_XDECREF(r);
  Py_XDECREF(d);
  Py_XDECREF(out);
  Py_XDECREF(ps);
  return rc;
}

/* core.walk_named below its top: tuples and lists by index, dicts by key repr, each container once. */
static int walk(Hot *h, PyObject *obj, struct buf *path, int depth, PyObject **seen, struct found *f) {
  int atom = is_atom(obj);
  if (atom != 0 || depth > walk_max_depth) return atom < 0 ? -1 : 0;
  int kind = PyTuple_CheckExact(obj) ? 1 : PyList_CheckExact(obj) ? 2 : PyDict_CheckExact(obj) ? 3 : 0;
  if (kind == 0) return walk_other(h, obj, path, depth, seen, f);
  if (*seen == NULL && (*seen = PySet_New(NULL)) == NULL) return -1;
  PyObject *id = PyLong_FromVoidPtr(obj);
  int in = id == NULL ? -1 : PySet_Contains(*seen, id);
  if (in == 0 && PySet_Add(*seen, id) < 0) in = -1;
  Py_XDECREF(id);
  if (in != 0) return in < 0 ? -1 : 0;
  size_t base = path->n;
  int rc = 0;
  if (kind == 3) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (rc == 0 && PyDict_Next(obj, &pos, &k, &v)) {
      Py_INCREF(k);
      Py_INCREF(v);
      PyObject *r = PyObject_Repr(k);
      path->n = base;
      rc = r == NULL || buf_put(path, "[", 1) < 0 || put_utf8(path, r) < 0 || buf_put(path, "]", 1) < 0
               ? -1
               : walk_item(h, v, path, depth, seen, f);
      Py_XDECREF(r);
      Py_DECREF(v);
      Py_DECREF(k);
    }
  } else {
    for (Py_ssize_t i = 0; rc == 0 && i < (kind == 1 ? PyTuple_Size(obj) : PyList_Size(obj)); i++) {
      PyObject *v = kind == 1 ? PyTuple_GetItem(obj, i) : PyList_GetItem(obj, i);
      if (v == NULL) return -1;
      Py_INCREF(v);
      char num[32];
      int k = snprintf(num, sizeof num, "[%zd]", i);
      path->n = base;
      rc = buf_put(path, num, (size_t)k) < 0 ? -1 : walk_item(h, v, path, depth, seen, f);
      Py_DECREF(v);
    }
  }
  path->n = base;
  return rc;
}

/* walk_named(obj, is_tensor, path, found): name is a C string, or NULL for the str key. */
static int walk_top(Hot *h, PyObject *obj, const char *name, PyObject *key, struct found *f) {
  struct buf path;
  buf_init(&path);
  int rc = name != NULL ? buf_put(&path, name, strlen(name)) : put_utf8(&path, key);
  int is = rc < 0 ? -1 : is_tensor(h, obj);
  PyObject *seen = NULL;
  rc = is < 0 ? -1 : is ? found_add(f, path.p, path.n, obj) : walk(h, obj, &path, 0, &seen, f);
  Py_XDECREF(seen);
  buf_free(&path);
  return rc;
}

/* Framework.ptr(t): 1 and *ptr (0 for an empty storage), 0 when t is not reported, -1 on an exception. */
static int tensor_ptr(Hot *h, PyObject *t, uintptr_t *ptr) {
  PyObject *s;
  int rc = torch_storage(h, t, 1, &s);
  if (rc <= 0) return rc;
  *ptr = 0;
  PyObject *nb = PyObject_CallMethodObjArgs(s, s_nbytes, NULL), *p = NULL;
  Py_ssize_t size = nb == NULL ? -1 : PyLong_AsSsize_t(nb);
  int pos = size == -1 && PyErr_Occurred() ? -1 : size > 0;
  if (pos > 0 && (p = PyObject_CallMethodObjArgs(s, s_data_ptr, NULL)) != NULL)
    *ptr = (uintptr_t)PyLong_AsUnsignedLongLong(p);
  rc = pos < 0 || (pos > 0 && (p == NULL || PyErr_Occurred())) ? -1 : 1;
  Py_XDECREF(p);
  Py_XDECREF(nb);
  Py_DECREF(s);
  return rc;
}

/* Description lines as the calls take them: each line ended by a NUL (swapagent_call's text). */
struct text {
  struct buf blob;
};

static void text_init(struct text *x) { buf_init(&x->blob); }

static void text_free(struct text *x) { buf_free(&x->blob); }

/* Appends PATH + saved_desc(t) ("PATH\tDTYPE\tSHAPE", describe_line's) as one line. */
static int text_line(Hot *h, struct text *x, const char *path, size_t len, PyObject *t) {
  PyObject *d = desc_of(t, h->r.descs, h->r.describe);
  char *s;
  Py_ssize_t k;
  int rc = d == NULL || PyBytes_AsStringAndSize(d, &s, &k) < 0 || buf_put(&x->blob, path, len) < 0 ||
                   buf_put(&x->blob, s, (size_t)k) < 0 || buf_put(&x->blob, "", 1) < 0
               ? -1
               : 0;
  Py_XDECREF(d);
  return rc;
}

typedef __typeof__(&swapagent_call) call_fn;

/* The agent's one call, as Agent.c_calls gives it: (opts, swapagent_call's address). The hooks pass their own
 * buffers, so opts has SWAPAGENT_OPT_OWN_MEMORY (no read through the kernel), and SWAPAGENT_OPT_QUEUE where
 * the agent queues calls. */
struct calls {
  PyObject *agent;
  uint32_t opts;
  call_fn call;
};

/* calls_of reads Agent.c_calls into c: 1, 0 when the agent has none (a test's, the bench's null agent), -1 on
 * an exception. */
static int calls_of(PyObject *agent, struct calls *c) {
  PyObject *cc = PyObject_GetAttr(agent, s_c_calls);
  int got = -1;
  if (cc == NULL || !PyTuple_Check(cc) || PyTuple_Size(cc) != 2) {
    if (cc == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
    got = PyErr_Occurred() ? -1 : 0;
  } else {
    c->opts = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GetItem(cc, 0));
    *(void **)&c->call = PyLong_AsVoidPtr(PyTuple_GetItem(cc, 1));
    got = PyErr_Occurred() ? -1 : c->call != NULL;
  }
  Py_XDECREF(cc);
  return got;
}

/* A record of kind k with the fields given, for swapagent_call. */
#define RECORD(k, ...) (&(struct swapagent_call){.size = sizeof(struct swapagent_call), .kind = (k), __VA_ARGS__})

/* 1 when this layer's region hooks run here (calls filled, calls->agent a new reference), 0 when they run
 * through Layer.forward_pre and forward_post: a test's or the guard's hooks (core.forward_hook, saves_hook,
 * Layer.guarded), an agent object without c_calls (a test's, the bench's null agent), or one whose
 * region_enter or region_exit was replaced (a recorder). -1 on an exception. */
static int region_calls(Hot *h, struct calls *c) {
  c->agent = NULL;
  if (!h->native) return 0;
  PyObject *const names[] = {s_forward_hook, s_saves_hook};
  for (size_t i = 0; i < 2; i++) {
    PyObject *v = PyDict_GetItemWithError(h->r.core, names[i]); /* borrowed */
    if (v == NULL && PyErr_Occurred()) return -1;
    if (v != NULL && v != Py_None) return 0;
  }
  int guarded = attr_true(h->o.layer, s_guarded);
  if (guarded != 0) return guarded < 0 ? -1 : 0;
  PyObject *agent = hot_agent(h);
  if (agent == NULL) return -1;
  int fast = calls_of(agent, c);
  if (fast == 1) {
    int replaced = agent_replaced(h, s_region_enter, s_region_exit);
    fast = replaced < 0 ? -1 : !replaced;
  }
  if (fast == 1) {
    Py_INCREF(agent);
    c->agent = agent;
  }
  return fast;
}

/* agent.check(fmt % group, rc): a failed call warned of once, the job goes on. */
static int agent_check(Hot *h, PyObject *agent, const char *fmt, long long rc) {
  PyObject *call = PyUnicode_FromFormat(fmt, PyBytes_AsString(h->r.group)), *code = PyLong_FromLongLong(rc);
  PyObject *r = call && code ? call_method2(agent, s_check, call, code) : NULL;
  Py_XDECREF(call);
  Py_XDECREF(code);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

/* ---- the backward bookkeeping of a native layer: Layer.enter, maybe_exit, input_grad, backward_end ----
 *
 * The same rule as core.Layer's methods (its class comment), on the same Pass and Layer state, under the
 * layer's own lock; the agent's backward enter and exit through swapagent_call where it gives it (Agent.c_calls). */

static int list_clear(PyObject *l) { return PyList_SetSlice(l, 0, PyList_Size(l), NULL); }

/* The layer's lock (Layer._lock, an RLock) taken: 0, or -1 on an exception. */
static int lock_take(Hot *h) {
  PyObject *r = PyObject_CallObject(h->r.acquire, NULL);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

/* Releases the lock lock_take took (an exception pending is kept); -1 when the release failed. */
static int lock_give(Hot *h) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *r = PyObject_CallObject(h->r.release, NULL);
  if (type != NULL) {
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
    return -1;
  }
  if (r == NULL) return -1;
  Py_DECREF(r);
  return 0;
}

/* agent.backward_enter(group) (exit 0) or backward_exit(group) (exit 1): through swapagent_call, without the
 * GIL (a prefetch may wait for a copy whose storage op is Python), where the agent gives it and has neither
 * method replaced; else its Python methods. A failed call is warned of once, as Agent.backward_enter does. */
static int backward_call(Hot *h, int exit) {
  PyObject *agent = hot_agent(h), *r = NULL;
  if (agent == NULL) return -1;
  int rc = -1;
  struct calls c;
  int fast = calls_of(agent, &c);
  if (fast == 1) {
    int replaced = agent_replaced(h, s_backward_enter, s_backward_exit);
    fast = replaced < 0 ? -1 : !replaced;
  }
  if (fast < 0) goto done;
  if (fast) {
    const char *g = PyBytes_AsString(h->r.group);
    int64_t e;
    uint32_t kind = exit ? SWAPAGENT_CALL_BACKWARD_EXIT : SWAPAGENT_CALL_BACKWARD_ENTER;
    Py_BEGIN_ALLOW_THREADS e = c.call(RECORD(kind, .group = g), c.opts);
    Py_END_ALLOW_THREADS rc = e == 0 ? 0 : agent_check(h, agent, exit ? "backward_exit(%s)" : "backward_enter(%s)", e);
    goto done;
  }
  PyObject *group = PyObject_GetAttr(h->o.layer, s_group);
  r = group != NULL ? call_method(agent, exit ? s_backward_exit : s_backward_enter, group) : NULL;
  Py_XDECREF(group);
  rc = r == NULL ? -1 : 0;
done:
  Py_XDECREF(r);
  return rc;
}

/* Layer.maybe_exit: reports the backward exit of the latest forward once the rule holds. */
static int hot_maybe_exit(Hot *h) {
  PyObject *p = NULL, *left = NULL, *handles = NULL;
  if (lock_take(h) < 0) return -1;
  int go = 0;
  if ((p = PyObject_GetAttr(h->o.layer, s_latest)) == NULL) goto locked;
  if (p == Py_None || h->waiting != 0) goto locked;
  int removed = attr_true(h->o.layer, s_removed), entered = removed == 0 ? attr_true(p, s_entered) : -1;
  int exited = entered > 0 ? attr_true(p, s_exited) : -1;
  if (removed != 0 || entered <= 0 || exited != 0) goto locked; /* -1 with an exception, or not now */
  if ((left = PyObject_GetAttr(p, s_inputs_left)) == NULL) goto locked;
  long n_left = PyLong_AsLong(left);
  if (n_left == -1 && PyErr_Occurred()) goto locked;
  int ended = n_left > 0 ? attr_true(p, s_ended) : 1;
  if (ended <= 0) goto locked;
  if (PyObject_SetAttr(p, s_exited, Py_True) < 0) goto locked;
  handles = PyList_GetSlice(h->r.handles, 0, PyList_Size(h->r.handles));
  if (handles == NULL || list_clear(h->r.handles) < 0 || PySet_Clear(h->o.unpacked) < 0) goto locked;
  go = 1;
locked:
  Py_XDECREF(left);
  Py_XDECREF(p);
  int bad = lock_give(h) < 0 || PyErr_Occurred();
  if (bad || !go) {
    Py_XDECREF(handles);
    return bad ? -1 : 0;
  }
  int rc = backward_call(h, 1);
  /* registry.forget(handles): the agent forgot them */
  for (Py_ssize_t i = 0; rc == 0 && i < PyList_Size(handles); i++) {
    PyObject *hv = PyList_GetItem(handles, i);
    int has = PyDict_Contains(h->o.entries, hv);
    if (has < 0 || (has && PyDict_DelItem(h->o.entries, hv) < 0)) rc = -1;
  }
  Py_DECREF(handles);
  return rc;
}

/* Layer.input_grad(p): the gradient of one of p's positional inputs arrived. */
static int hot_input_grad(Hot *h, PyObject *p) {
  if (lock_take(h) < 0) return -1;
  PyObject *left = PyObject_GetAttr(p, s_inputs_left), *one = PyLong_FromLong(1);
  PyObject *less = left != NULL && one != NULL ? PyNumber_Subtract(left, one) : NULL;
  if (less != NULL) PyObject_SetAttr(p, s_inputs_left, less);
  Py_XDECREF(less);
  Py_XDECREF(one);
  Py_XDECREF(left);
  if (lock_give(h) < 0 || PyErr_Occurred()) return -1;
  return hot_maybe_exit(h);
}

/* Layer.backward_end(p): the backward pass that entered p ended (its end call, queued at enter). */
static int hot_backward_end(Hot *h, PyObject *p) {
  if (lock_take(h) < 0) return -1;
  PyObject_SetAttr(p, s_ended, Py_True);
  if (lock_give(h) < 0 || PyErr_Occurred()) return -1;
  return hot_maybe_exit(h);
}

/* Layer.enter(p): the backward of forward p begins (its first output gradient or unpack). */
static int hot_enter(Hot *h, PyObject *p) {
  if (lock_take(h) < 0) return -1;
  int entered = attr_true(p, s_entered), exited = entered == 0 ? attr_true(p, s_exited) : -1;
  int removed = exited == 0 ? attr_true(h->o.layer, s_removed) : -1;
  int go = entered == 0 && exited == 0 && removed == 0 && PyObject_SetAttr(p, s_entered, Py_True) == 0;
  if (lock_give(h) < 0 || PyErr_Occurred()) return -1;
  if (!go) return 0;
  if (backward_call(h, 0) < 0) return -1;
  Call *end = call_new(p, KIND_END, (PyObject *)h);
  if (end == NULL) return -1;
  /* Torch.at_backward_end, without its Python frame */
  PyObject *r = PyObject_CallFunctionObjArgs(h->r.queue, (PyObject *)end, NULL);
  Py_XDECREF(r);
  Py_DECREF(end);
  if (r == NULL) { /* not in a backward pass (an unpack outside one) */
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
  }
  return hot_maybe_exit(h);
}

/* Torch.param_ptrs(module, cache), answered from the cache when it holds (no module registered since it was
 * made, every parameter and buffer where it was); else the Python method, which makes it again. */
static PyObject *param_ptrs(Hot *h) {
  PyObject *c = h->r.param_cache;
  if (h->r.registered != Py_None && PyList_Check(h->r.registered) && PyList_Size(h->r.registered) > 0) {
    PyObject *gen = PyDict_GetItemWithError(c, s_gen), *dicts = PyDict_GetItemWithError(c, s_dicts),
             *key = PyDict_GetItemWithError(c, s_key), *ptrs = PyDict_GetItemWithError(c, s_ptrs);
    int holds = gen && dicts && key && ptrs && PyList_Check(dicts) && PyTuple_Check(key) &&
                PyObject_RichCompareBool(gen, PyList_GetItem(h->r.registered, 0), Py_EQ) == 1;
    Py_ssize_t j = 0, nkey = holds ? PyTuple_Size(key) : 0;
    for (Py_ssize_t i = 0; holds && i < PyList_Size(dicts); i++) {
      PyObject *d = PyList_GetItem(dicts, i), *t;
      Py_ssize_t pos = 0;
      if (!PyDict_Check(d)) holds = 0;
      while (holds && PyDict_Next(d, &pos, NULL, &t)) {
        if (t == Py_None) continue;
        PyObject *p = j < nkey ? PyObject_CallMethodObjArgs(t, s_data_ptr, NULL) : NULL;
        holds = p != NULL && PyObject_RichCompareBool(p, PyTuple_GetItem(key, j++), Py_EQ) == 1;
        Py_XDECREF(p);
      }
    }
    if (holds && j == nkey) {
      Py_INCREF(ptrs);
      return ptrs;
    }
    PyErr_Clear(); /* the Python method meets whatever went wrong here, and says so */
  }
  PyObject *fw = PyObject_GetAttr(h->o.layer, s_fw);
  PyObject *r = fw != NULL ? call_method2(fw, s_param_ptrs, h->r.module, c) : NULL;
  Py_XDECREF(fw);
  return r;
}

/* Layer._clear_region */
static int clear_region(Hot *h) {
  PyDict_Clear(h->o.region);
  PyObject *const ls[] = {h->o.bptr, h->o.bsize, h->o.bflag, h->o.bstore};
  for (size_t i = 0; i < 4; i++)
    if (list_clear(ls[i]) < 0) return -1;
  return 0;
}

/* The gradient hook (Chain) on tensor t, made by core.chain (registered once per tensor) unless core._chains
 * has it already; None when t takes no hook. A new reference, NULL on an exception. */
static PyObject *chain_of(Hot *h, PyObject *t) {
  PyObject *key = PyLong_FromVoidPtr(t);
  PyObject *e = key != NULL ? PyDict_GetItemWithError(h->r.chains, key) : NULL; /* borrowed: (ref, chain) */
  Py_XDECREF(key);
  if (e == NULL && PyErr_Occurred()) return NULL;
  if (e != NULL && PyTuple_Check(e) && PyTuple_Size(e) == 2) {
    PyObject *live = PyObject_CallFunctionObjArgs(PyTuple_GetItem(e, 0), NULL);
    int same = live == t;
    Py_XDECREF(live);
    if (live == NULL) return NULL;
    if (same) {
      PyObject *ch = PyTuple_GetItem(e, 1);
      Py_INCREF(ch);
      return ch;
    }
  }
  PyObject *fw = PyObject_GetAttr(h->o.layer, s_fw);
  PyObject *ch = fw != NULL ? PyObject_CallFunctionObjArgs(h->r.chain, fw, t, NULL) : NULL;
  Py_XDECREF(fw);
  return ch;
}

/* Layer._hook_grads(p, the first n tensors found, kind): a kind call of forward p on the gradient hook of
 * each distinct tensor that takes a gradient; how many were hooked, or -1. */
static Py_ssize_t hook_grads(Hot *h, PyObject *p, struct found *f, size_t n, int kind) {
  struct ent *e = BUF_AT(&f->ents, struct ent);
  Py_ssize_t hooked = 0;
  for (size_t i = 0; i < n; i++) {
    PyObject *t = e[i].t;
    size_t j = 0;
    while (j < i && e[j].t != t) j++;
    if (j < i) continue; /* hooked already, or takes no gradient */
    int takes = attr_true(t, s_requires_grad); /* Torch.takes_grad: every tensor found is a torch.Tensor */
    if (takes < 0) return -1;
    if (!takes) continue;
    PyObject *ch = chain_of(h, t), *r = NULL;
    if (ch == NULL) return -1;
    int rc = 0;
    if (Py_TYPE(ch) == ChainType) rc = chain_add((Chain *)ch, p, kind, (PyObject *)h);
    else if (ch != Py_None) { /* a Python chain: its add method */
      PyObject *k = PyLong_FromLong(kind);
      r = k != NULL ? call_method2(ch, s_add, p, k) : NULL;
      rc = r == NULL ? -1 : 0;
      Py_XDECREF(r);
      Py_XDECREF(k);
    }
    if (ch != Py_None && rc == 0) hooked++;
    Py_DECREF(ch);
    if (rc < 0) return -1;
  }
  return hooked;
}

/* Layer.forward_pre(args, kwargs), with the agent's region enter called directly. */
static int region_pre(Hot *h, struct calls *c, PyObject *args, PyObject *kwargs) {
  PyObject *layer = h->o.layer, *p = NULL, *params = NULL;
  struct found f;
  struct buf ptrs;
  struct text tx;
  found_init(&f);
  buf_init(&ptrs);
  text_init(&tx);
  int rc = -1;
  /* maybe_exit: a previous forward that only waited for a freed tensor ends now (it has nothing to do for
   * a forward not entered or already exited, the common case: asked here without a call) */
  PyObject *latest = PyObject_GetAttr(layer, s_latest);
  if (latest == NULL) goto done;
  int ask = 0;
  if (latest != Py_None) {
    int entered = attr_true(latest, s_entered), exited = entered > 0 ? attr_true(latest, s_exited) : 0;
    ask = entered < 0 || exited < 0 ? -1 : entered && !exited;
  }
  Py_DECREF(latest);
  if (ask < 0 || (ask > 0 && hot_maybe_exit(h) < 0)) goto done;
  T_BEGIN(T_PRE_PARAMS);
  if ((params = param_ptrs(h)) == NULL || PyObject_SetAttr(layer, s_params, params) < 0) goto done;
  T_END(T_PRE_PARAMS);
  if (list_clear(h->r.saved) < 0 || clear_region(h) < 0) goto done;
  if ((p = PyObject_CallFunctionObjArgs(h->r.pass_type, layer, NULL)) == NULL ||
      PyObject_SetAttr(layer, s_latest, p) < 0)
    goto done;
  if (walk_top(h, args, "args", NULL, &f) < 0) goto done;
  size_t n_named = BUF_LEN(&f.ents, struct ent);
  /* Backward exit waits for the gradient of each positional input that takes one. */
  Py_ssize_t n = hook_grads(h, p, &f, n_named, kind_input);
  if (n < 0) goto done;
  if (n > 0) {
    PyObject *left = PyObject_GetAttr(p, s_inputs_left), *add = PyLong_FromSsize_t(n);
    PyObject *sum = left && add ? PyNumber_Add(left, add) : NULL;
    int bad = sum == NULL || PyObject_SetAttr(p, s_inputs_left, sum) < 0;
    Py_XDECREF(sum);
    Py_XDECREF(add);
    Py_XDECREF(left);
    if (bad) goto done;
  }
  if (kwargs != NULL && PyDict_Check(kwargs)) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(kwargs, &pos, &k, &v))
      if (!PyUnicode_Check(k) || walk_top(h, v, NULL, k, &f) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a keyword argument's name is not a str");
        goto done;
      }
  }
  size_t n_pos = 0;
  T_BEGIN(T_PRE_INPUTS);
  for (size_t i = 0; i < BUF_LEN(&f.ents, struct ent); i++) {
    struct ent *e = &BUF_AT(&f.ents, struct ent)[i];
    uintptr_t q;
    int got = tensor_ptr(h, e->t, &q);
    if (got < 0) goto done;
    if (got == 0) continue;
    if (BUF_PUT(&ptrs, uintptr_t, q) < 0 || text_line(h, &tx, found_path(&f, i), e->len, e->t) < 0) goto done;
    if (i < n_named) n_pos++;
  }
  T_END(T_PRE_INPUTS);
  const char *g = PyBytes_AsString(h->r.group);
  const uintptr_t *in = BUF_ARG(&ptrs, uintptr_t);
  size_t n_in = BUF_LEN(&ptrs, uintptr_t);
  int64_t e;
  Py_BEGIN_ALLOW_THREADS;
  e = c->call(RECORD(SWAPAGENT_CALL_REGION_ENTER, .group = g, .ptrs = in, .n = n_in, .n_positional = n_pos,
                     .text = n_in > 0 ? tx.blob.p : NULL, .text_len = n_in > 0 ? tx.blob.n : 0),
              c->opts);
  Py_END_ALLOW_THREADS;
  rc = e == 0 ? 0 : agent_check(h, c->agent, "region_enter(%s)", e);
done:
  text_free(&tx);
  buf_free(&ptrs);
  found_free(&f);
  Py_XDECREF(params);
  Py_XDECREF(p);
  return rc;
}

/* Layer.flush(report) with the agent's region end as report: the open region's saves, its outputs and the
 * descriptions in one call. */
static int flush_end(Hot *h, struct calls *c, struct buf *outs, struct buf *dptrs, struct text *tx) {
  PyObject *layer = h->o.layer, *hs = NULL, *refs = NULL, *got = NULL;
  struct buf live, sp, sz, sf, hbuf;
  buf_init(&live);
  buf_init(&sp);
  buf_init(&sz);
  buf_init(&sf);
  buf_init(&hbuf);
  int rc = -1, any_flag = 0;
  PyObject *p = PyObject_GetAttr(layer, s_latest);
  if (p == NULL) goto done;
  if (p != Py_None && ((hs = PyObject_GetAttr(p, s_handles)) == NULL || (refs = PyObject_GetAttr(p, s_refs)) == NULL))
    goto done;
  if (hs != NULL && (!PyList_Check(hs) || !PyList_Check(refs))) {
    PyErr_SetString(PyExc_TypeError, "Pass.handles and Pass.refs must be lists");
    goto done;
  }
  Py_ssize_t start = hs ? PyList_Size(hs) : 0, n = hs ? PyList_Size(h->o.bptr) : 0;
  for (Py_ssize_t i = start; i < n; i++) {
    long alive = refs_at(refs, i);
    if (PyErr_Occurred()) goto done;
    if (!alive) continue; /* its saved tensors are all gone already: not reported */
    unsigned long long ptr = PyLong_AsUnsignedLongLong(PyList_GetItem(h->o.bptr, i));
    size_t size = PyLong_AsSize_t(PyList_GetItem(h->o.bsize, i));
    unsigned long flag = PyLong_AsUnsignedLong(PyList_GetItem(h->o.bflag, i));
    if (PyErr_Occurred() || BUF_PUT(&live, Py_ssize_t, i) < 0 || BUF_PUT(&sp, uintptr_t, (uintptr_t)ptr) < 0 ||
        BUF_PUT(&sz, size_t, size) < 0 || BUF_PUT(&sf, uint32_t, (uint32_t)flag) < 0)
      goto done;
    any_flag |= flag != 0;
  }
  for (Py_ssize_t i = start; i < n; i++)
    if (PyList_Append(hs, zero) < 0) goto done;
  size_t k = BUF_LEN(&live, Py_ssize_t), n_out = BUF_LEN(outs, uintptr_t), n_desc = BUF_LEN(dptrs, uintptr_t);
  for (size_t j = 0; j < k; j++)
    if (BUF_PUT(&hbuf, int64_t, 0) < 0) goto done;
  const char *g = PyBytes_AsString(h->r.group);
  int64_t e;
  Py_BEGIN_ALLOW_THREADS;
  e = c->call(RECORD(SWAPAGENT_CALL_REGION_EXIT, .group = g, .ptrs = BUF_ARG(outs, uintptr_t), .n = n_out,
                     .save_ptrs = BUF_ARG(&sp, uintptr_t), .save_nbytes = BUF_ARG(&sz, size_t),
                     .save_flags = any_flag ? BUF_ARG(&sf, uint32_t) : NULL, .n_save = k,
                     .handles = k > 0 ? BUF_AT(&hbuf, int64_t) : NULL, .desc_ptrs = BUF_ARG(dptrs, uintptr_t),
                     .n_desc = n_desc, .text = n_desc > 0 ? tx->blob.p : NULL, .text_len = n_desc > 0 ? tx->blob.n : 0),
              c->opts);
  Py_END_ALLOW_THREADS;
  /* Each save's handle or code, as Agent.region_exit gives them (each code warned of once). */
  int64_t *handles = BUF_AT(&hbuf, int64_t);
  int none = 1;
  for (size_t j = 0; j < k; j++) none &= handles[j] == 0;
  if (e < 0 && none) {
    if (agent_check(h, c->agent, "region_exit(%s)", e) < 0) goto done;
    for (size_t j = 0; j < k; j++) handles[j] = e;
  } else {
    for (size_t j = 0; j < k; j++) {
      if (handles[j] >= 0) continue;
      PyObject *save = PyUnicode_FromString("save"), *code = PyLong_FromLongLong(handles[j]);
      PyObject *r = save && code ? call_method2(c->agent, s_check, save, code) : NULL;
      Py_XDECREF(save);
      Py_XDECREF(code);
      if (r == NULL) goto done;
      Py_DECREF(r);
    }
    if (e < 0 && agent_check(h, c->agent, "region_exit(%s)", e) < 0) goto done;
  }
  if (start >= n) {
    rc = 0;
    goto done;
  }
  PyObject *saved = h->r.saved;
  for (size_t j = 0; j < k; j++) {
    Py_ssize_t i = BUF_AT(&live, Py_ssize_t)[j];
    if ((got = PyLong_FromLongLong(handles[j])) == NULL || PyList_SetItem(hs, i, got) < 0) goto done;
    /* got is hs's now */
    if (handles[j] <= 0) continue;
    if (PyDict_SetItem(h->o.entries, got, PyList_GetItem(h->o.bstore, i)) < 0 || PyList_Append(h->r.handles, got) < 0 ||
        PyList_Append(saved, got) < 0 || PyList_Append(saved, PyList_GetItem(h->o.bptr, i)) < 0 ||
        PyList_Append(saved, PyList_GetItem(h->o.bsize, i)) < 0 ||
        PyList_Append(saved, PyList_GetItem(h->o.bflag, i)) < 0)
      goto done;
  }
  got = NULL;
  /* A saved tensor freed while the agent was called: its entry goes too (Packed's end found none). */
  for (size_t j = 0; j < k; j++) {
    Py_ssize_t i = BUF_AT(&live, Py_ssize_t)[j];
    long alive = refs_at(refs, i);
    if (PyErr_Occurred()) goto done;
    if (!alive && handles[j] > 0) {
      PyObject *hv = PyList_GetItem(hs, i);
      if (PyDict_Contains(h->o.entries, hv) == 1 && PyDict_DelItem(h->o.entries, hv) < 0) goto done;
    }
  }
  for (Py_ssize_t i = start; i < n; i++) /* the registry holds what it needs */
    if ((Py_INCREF(Py_None), PyList_SetItem(h->o.bstore, i, Py_None)) < 0) goto done;
  rc = 0;
done:
  buf_free(&live);
  buf_free(&sp);
  buf_free(&sz);
  buf_free(&sf);
  buf_free(&hbuf);
  Py_XDECREF(refs);
  Py_XDECREF(hs);
  Py_XDECREF(p);
  return rc;
}

/* Layer.forward_post(output), with the agent's region end called directly. */
static int region_post(Hot *h, struct calls *c, PyObject *output) {
  struct found f;
  struct buf outs, dptrs;
  struct text tx;
  found_init(&f);
  buf_init(&outs);
  buf_init(&dptrs);
  text_init(&tx);
  int rc = -1;
  PyObject *p = NULL;
  if (walk_top(h, output, "output", NULL, &f) < 0) goto done;
  for (size_t i = 0; i < BUF_LEN(&f.ents, struct ent); i++) {
    struct ent *e = &BUF_AT(&f.ents, struct ent)[i];
    uintptr_t q;
    int got = tensor_ptr(h, e->t, &q);
    if (got < 0) goto done;
    if (got == 0) continue;
    if (BUF_PUT(&outs, uintptr_t, q) < 0) goto done;
    if (q != 0 && (BUF_PUT(&dptrs, uintptr_t, q) < 0 || text_line(h, &tx, found_path(&f, i), e->len, e->t) < 0))
      goto done;
  }
  /* What the region saved, by storage: dtype and shape (no path: a saved input keeps its argument's). */
  T_BEGIN(T_POST_DESCS);
  Py_ssize_t n_saved = PyList_Size(h->o.bptr);
  if (PyList_Size(h->o.saved_t) != n_saved) {
    PyErr_SetString(PyExc_RuntimeError, "swapagent: a region's saves and their tensors differ in number");
    goto done;
  }
  for (Py_ssize_t i = 0; i < n_saved; i++) {
    unsigned long long q = PyLong_AsUnsignedLongLong(PyList_GetItem(h->o.bptr, i));
    if (PyErr_Occurred() || BUF_PUT(&dptrs, uintptr_t, (uintptr_t)q) < 0 ||
        text_line(h, &tx, "", 0, PyList_GetItem(h->o.saved_t, i)) < 0)
      goto done;
  }
  T_END(T_POST_DESCS);
  T_BEGIN(T_POST_REPORT);
  if (list_clear(h->o.saved_t) < 0 || flush_end(h, c, &outs, &dptrs, &tx) < 0) goto done;
  T_END(T_POST_REPORT);
  if (PyObject_SetAttr(h->o.layer, s_params, h->r.no_params) < 0 || clear_region(h) < 0) goto done;
  if ((p = PyObject_GetAttr(h->o.layer, s_latest)) == NULL) goto done;
  /* Backward enter: the first gradient of an output (however nested) to arrive. */
  T_BEGIN(T_POST_GRADS);
  rc = p == Py_None ? 0 : hook_grads(h, p, &f, BUF_LEN(&f.ents, struct ent), kind_output) < 0 ? -1 : 0;
  T_END(T_POST_GRADS);
done:
  Py_XDECREF(p);
  text_free(&tx);
  buf_free(&dptrs);
  buf_free(&outs);
  found_free(&f);
  return rc;
}

/* pre(module, args, kwargs): the forward pre-hook (with kwargs) Torch registers for a layer with a region
 * path: the region's enter, then its saved-tensor hooks (this Hot's pack and unpack) pushed. */
static PyObject *hot_pre(PyObject *self, PyObject *args) {
  Hot *h = (Hot *)self;
  PyObject *module, *a, *kw, *r;
  if (!PyArg_ParseTuple(args, "OOO", &module, &a, &kw)) return NULL;
  if (!h->native) {
    PyErr_SetString(PyExc_RuntimeError, "Hot.pre: region() was not called");
    return NULL;
  }
  struct calls c;
  int fast = region_calls(h, &c);
  int rc = fast < 0 ? -1 : fast ? region_pre(h, &c, a, kw) : 0;
  if (fast == 0) {
    r = call_method2(h->o.layer, s_forward_pre, a, kw);
    rc = r == NULL ? -1 : 0;
    Py_XDECREF(r);
  }
  Py_XDECREF(c.agent);
  if (rc < 0 || (r = PyObject_CallFunctionObjArgs(h->r.push, h->r.pack_m, h->r.unpack_m, NULL)) == NULL) return NULL;
  Py_DECREF(r);
  h->active++;
  Py_RETURN_NONE;
}

/* post(module, args, output): the forward hook: the saved-tensor hooks popped, then the region's end (even
 * when the pop failed, as a finally would). */
static PyObject *hot_post(PyObject *self, PyObject *args) {
  Hot *h = (Hot *)self;
  PyObject *module, *a, *output, *r, *et = NULL, *ev = NULL, *tb = NULL;
  if (!PyArg_ParseTuple(args, "OOO", &module, &a, &output)) return NULL;
  if (!h->native) {
    PyErr_SetString(PyExc_RuntimeError, "Hot.post: region() was not called");
    return NULL;
  }
  if (h->active > 0) {
    h->active--;
    if ((r = PyObject_CallFunctionObjArgs(h->r.pop, NULL)) == NULL) PyErr_Fetch(&et, &ev, &tb);
    Py_XDECREF(r);
  }
  struct calls c;
  int fast = region_calls(h, &c);
  int rc = fast < 0 ? -1 : fast ? region_post(h, &c, output) : 0;
  if (fast == 0) {
    r = call_method(h->o.layer, s_forward_post, output);
    rc = r == NULL ? -1 : 0;
    Py_XDECREF(r);
  }
  Py_XDECREF(c.agent);
  if (rc < 0) {
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return NULL;
  }
  if (et != NULL) {
    PyErr_Restore(et, ev, tb);
    return NULL;
  }
  Py_RETURN_NONE;
}

/* region(module, tensor_type, pass_type, saved, handles, param_cache, registered, push, pop, core, group,
 *        descs, describe, walk, is_tensor, chains, chain, queue, include_cpu): makes pre and post this torch layer's
 * region hooks (swapagent.torch._region_hooks says what each argument is). */
static PyObject *hot_region(PyObject *self, PyObject *args) {
  Hot *h = (Hot *)self;
  PyObject *o[REGION_NOBJS];
  int include_cpu;
  if (!PyArg_ParseTuple(args, "OOOO!O!O!OOOO!O!O!OOOO!OOp", &o[0], &o[1], &o[2], &PyList_Type, &o[3], &PyList_Type,
                        &o[4], &PyDict_Type, &o[5], &o[6], &o[7], &o[8], &PyDict_Type, &o[9], &PyBytes_Type, &o[10],
                        &PyDict_Type, &o[11], &o[12], &o[13], &o[14], &PyDict_Type, &o[15], &o[16], &o[17],
                        &include_cpu))
    return NULL;
  for (size_t i = 0; i < 18; i++) Py_INCREF(o[i]);
  o[18] = PyObject_GetAttrString(self, "pack");
  o[19] = PyObject_GetAttrString(self, "unpack");
  o[20] = PyFrozenSet_New(NULL);
  PyObject *lock = PyObject_GetAttr(h->o.layer, s_lock);
  o[21] = lock != NULL ? PyObject_GetAttr(lock, s_acquire) : NULL;
  o[22] = lock != NULL ? PyObject_GetAttr(lock, s_release) : NULL;
  Py_XDECREF(lock);
  PyObject **dst = (PyObject **)&h->r;
  for (size_t i = 0; i < REGION_NOBJS; i++) {
    PyObject *old = dst[i];
    dst[i] = o[i];
    Py_XDECREF(old);
  }
  if (o[18] == NULL || o[19] == NULL || o[20] == NULL || o[21] == NULL || o[22] == NULL) {
    h->native = 0;
    return NULL;
  }
  h->include_cpu = include_cpu;
  h->native = 1;
  Py_RETURN_NONE;
}

/* saved_descs(tensors, cache, describe): core.saved_desc of each tensor, as a list: cache[(t.dtype, t.shape)]
 * where the cache has it (the shape as the framework gives it: torch.Size and MindSpore's tuple hash and
 * compare as the tuple core.saved_desc keys by), else describe(t), which fills the cache. */
static PyObject *saved_descs(PyObject *Py_UNUSED(module), PyObject *args) {
  PyObject *ts, *cache, *describe;
  if (!PyArg_ParseTuple(args, "O!O!O", &PyList_Type, &ts, &PyDict_Type, &cache, &describe)) return NULL;
  Py_ssize_t n = PyList_Size(ts);
  PyObject *out = PyList_New(n);
  if (out == NULL) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *d = desc_of(PyList_GetItem(ts, i), cache, describe);
    if (d == NULL) {
      Py_DECREF(out);
      return NULL;
    }
    PyList_SetItem(out, i, d); /* steals d */
  }
  return out;
}

TIMED_O(T_PACK, hot_pack)
TIMED_O(T_UNPACK, hot_unpack)
TIMED_O(T_PRE, hot_pre)
TIMED_O(T_POST, hot_post)

/* configure(INPUT, OUTPUT, MAX_DEPTH, ATOMS): what core says of the chains' call kinds and the walk, once,
 * before anything else of this module is used (core.load_hot). */
static PyObject *configure(PyObject *Py_UNUSED(module), PyObject *args) {
  long in, out, depth;
  PyObject *atoms;
  if (!PyArg_ParseTuple(args, "lllO!", &in, &out, &depth, &PyFrozenSet_Type, &atoms)) return NULL;
  if (in == out || in < 0 || out < 0 || depth < 0) {
    PyErr_SetString(PyExc_ValueError, "configure: kinds must differ and not be negative, the depth not negative");
    return NULL;
  }
  kind_input = in;
  kind_output = out;
  walk_max_depth = depth;
  PyObject *old = walk_atoms;
  Py_INCREF(atoms);
  walk_atoms = atoms;
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS, "configure(INPUT, OUTPUT, MAX_DEPTH, ATOMS): core's constants, once."},
#ifdef SWAPAGENT_HOT_TIMED
    {"timers", timers, METH_NOARGS, "{probe: (seconds, calls)} since the last call (the bench's timed build)."},
#endif
    {"saved_descs", saved_descs, METH_VARARGS, "core.saved_desc of each tensor of a list, as a list."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef hot_methods[] = {
    {"pack", TIMED(hot_pack), METH_O, "The saved-tensor pack hook (core.Layer.pack)."},
    {"unpack", TIMED(hot_unpack), METH_O, "The saved-tensor unpack hook (core.Layer.unpack)."},
    {"region", hot_region, METH_VARARGS, "Makes pre and post this torch layer's region hooks."},
    {"pre", TIMED(hot_pre), METH_VARARGS, "The forward pre-hook (with kwargs): the region's enter (Layer.forward_pre)."},
    {"post", TIMED(hot_post), METH_VARARGS, "The forward hook: the region's end (Layer.forward_post)."},
    {NULL, NULL, 0, NULL},
};

/* len(hot): its waiting count (Layer._waiting on the compiled path: its truth is whether any waits) */
static Py_ssize_t hot_len(PyObject *self) { return ((Hot *)self)->waiting; }

static PyType_Slot hot_slots[] = {
    {Py_tp_init, hot_init},
    {Py_sq_length, hot_len},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, hot_dealloc},
    {Py_tp_traverse, hot_traverse},
    {Py_tp_clear, hot_clear},
    {Py_tp_methods, hot_methods},
    {Py_tp_doc, "One layer's compiled pack and unpack hooks, on the layer's own state."},
    {0, NULL},
};

static PyType_Spec hot_spec = {"swapagent._hot.Hot", sizeof(Hot), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                               hot_slots};

static struct PyModuleDef hot_module = {
    PyModuleDef_HEAD_INIT, "_hot", "The companions' compiled hot path (see _hot.c).", -1, module_methods, NULL, NULL,
    NULL, NULL,
};

PyMODINIT_FUNC PyInit__hot(void) {
  struct {
    PyObject **dst;
    const char *name;
  } names[] = {
      {&s_latest, "latest"}, {&s_params, "_params"}, {&s_refs, "refs"}, {&s_handles, "handles"},
      {&s_entered, "entered"}, {&s_flush, "flush"}, {&s_enter, "enter"}, {&s_maybe_exit, "maybe_exit"},
      {&s_agent, "agent"}, {&s_unpack, "unpack"}, {&s_check, "check"}, {&s_dict, "__dict__"},
      {&s_dtype, "dtype"}, {&s_shape, "shape"}, {&s_is_cpu, "is_cpu"}, {&s_is_meta, "is_meta"},
      {&s_untyped_storage, "untyped_storage"}, {&s_data_ptr, "data_ptr"}, {&s_nbytes, "nbytes"},
      {&s_exited, "exited"}, {&s_inputs_left, "inputs_left"}, {&s_forward_pre, "forward_pre"},
      {&s_forward_post, "forward_post"}, {&s_c_calls, "c_calls"}, {&s_region_enter, "region_enter"},
      {&s_region_exit, "region_exit"}, {&s_guarded, "guarded"}, {&s_forward_hook, "forward_hook"},
      {&s_saves_hook, "saves_hook"}, {&s_gen, "gen"}, {&s_dicts, "dicts"}, {&s_key, "key"}, {&s_ptrs, "ptrs"},
      {&s_param_ptrs, "param_ptrs"}, {&s_fw, "fw"}, {&s_dataclass_fields, "__dataclass_fields__"},
      {&s_layer, "layer"}, {&s_removed, "removed"}, {&s_input_grad, "input_grad"},
      {&s_output_grad, "output_grad"}, {&s_requires_grad, "requires_grad"}, {&s_add, "add"},
      {&s_lock, "_lock"}, {&s_acquire, "acquire"}, {&s_release, "release"}, {&s_ended, "ended"},
      {&s_backward_enter, "backward_enter"}, {&s_backward_exit, "backward_exit"},
      {&s_group, "group"}, {&s_end_failed, "_end_failed"}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if ((*names[i].dst = PyUnicode_InternFromString(names[i].name)) == NULL) return NULL;
  if ((zero = PyLong_FromLong(0)) == NULL || (utf8_cache = PyDict_New()) == NULL) return NULL;
  PyObject *m = PyModule_Create(&hot_module);
  if (m == NULL) return NULL;
  PackedType = (PyTypeObject *)PyType_FromSpec(&packed_spec);
  HotType = (PyTypeObject *)PyType_FromSpec(&hot_spec);
  CallType = (PyTypeObject *)PyType_FromSpec(&call_spec);
  ChainType = (PyTypeObject *)PyType_FromSpec(&chain_spec);
  if (PackedType == NULL || HotType == NULL || CallType == NULL || ChainType == NULL) goto fail;
  Py_INCREF(CallType);
  if (PyModule_AddObject(m, "Call", (PyObject *)CallType) < 0) goto fail;
  Py_INCREF(ChainType);
  if (PyModule_AddObject(m, "Chain", (PyObject *)ChainType) < 0) goto fail;
  Py_INCREF(PackedType);
  if (PyModule_AddObject(m, "Packed", (PyObject *)PackedType) < 0) goto fail;
  Py_INCREF(HotType);
  if (PyModule_AddObject(m, "Hot", (PyObject *)HotType) < 0) goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
