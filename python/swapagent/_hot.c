/* _hot.c: the companions' per-saved-tensor work in C (swapagent.core.Layer's pack and unpack hooks, and the
 * Packed they hand the framework), against Python's limited API, so one build (abi3) serves every Python 3
 * from 3.9 on of an architecture. It does what the pure-Python closures of Layer._hot_path do, on the same
 * Python objects (the layer's lists, dict and sets), so either path can run and the rest of the companion
 * does not know which one did; core.py stays the one description of the rule. What it saves is the
 * interpreter: no bytecode, no frame, no attribute lookup, a Packed without a Python __del__, and the agent's
 * swapagent_unpack called directly instead of through ctypes.
 *
 * The layer's state the hooks read (its latest forward, its parameters, whether it was removed) lives in
 * this file's Hot and in _hot_grad.c's Pass, as C members that core reads and writes by attribute: C never
 * looks up an attribute of core's objects by name. _hot_grad.c and _hot_region.c hold the parts a
 * measurement keeps in C (docs/companions.md): the gradient chains and torch's region hooks.
 *
 * Built by make (python/python.mk) beside libswapagent.so; swapagent.core loads it when it is there and
 * falls back to the pure-Python path when it is not. */
#include "_hot.h"

/* Names of the framework's and the binding's attributes, made once at import. */
PyObject *s_agent_unpack, *s_check, *s_c_calls, *s_region_enter, *s_region_exit, *s_backward_enter,
    *s_backward_exit, *s_dtype, *s_shape, *s_is_cpu, *s_is_meta, *s_untyped_storage, *s_data_ptr, *s_nbytes,
    *s_requires_grad, *s_dataclass_fields;
static PyObject *s_dict, *s_acquire, *s_release;

PyTypeObject *HotType, *PackedType;
int watched;          /* a guard's hooks watch every region (watch(), which core calls) */
PyObject *hook_failed, *end_failed; /* core's loggers of a failed gradient hook and end callback (configure) */
PyObject *freed_layers, *end_freed; /* storage.freed_layers and core.end_freed (configure) */

#ifdef SWAPAGENT_HOT_TIMED
static const char *const t_names[T_N] = {"pack", "unpack", "pre", "post", "grad", "end", "free", "pre.params",
                                         "pre.inputs", "post.descs", "post.report", "post.grads"};
struct t_acc t_acc[T_N];

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
#endif

/* ---- helpers the three files share ---- */

/* The end of a heap type's object: freed, and its reference on the type dropped. */
void heap_free(PyObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  tp_free(self);
  Py_DECREF(tp);
}

/* The end of a heap type's GC object: untracked (again: untracking twice is allowed), cleared, freed. */
void gc_dealloc(PyObject *self, inquiry clear) {
  PyObject_GC_UnTrack(self);
  clear(self);
  heap_free(self);
}

PyObject *call2(PyObject *fn, PyObject *a, PyObject *b) { return PyObject_CallFunctionObjArgs(fn, a, b, NULL); }

PyObject *call_method2(PyObject *obj, PyObject *name, PyObject *a, PyObject *b) {
  PyObject *fn = PyObject_GetAttr(obj, name);
  if (fn == NULL) return NULL;
  PyObject *r = call2(fn, a, b);
  Py_DECREF(fn);
  return r;
}

int list_clear(PyObject *l) { return PyList_SetSlice(l, 0, PyList_Size(l), NULL); }

/* refs[i] (a list of ints): its count of saved tensors alive. */
long refs_at(PyObject *refs, Py_ssize_t i) {
  if (i < 0 || i >= PyList_Size(refs)) return 0;
  return PyLong_AsLong(PyList_GetItem(refs, i));
}

/* Whether the agent object's own dict replaced method a or b (b NULL: a alone), as a test's recorder or a
 * wrapper does: 1, 0, or -1 on an exception. */
int agent_replaced(Hot *h, PyObject *a, PyObject *b) {
  if (h->o.agent_dict == NULL) return 0;
  int yes = PyDict_GetItemWithError(h->o.agent_dict, a) != NULL ||
            (b != NULL && PyDict_GetItemWithError(h->o.agent_dict, b) != NULL);
  return PyErr_Occurred() ? -1 : yes;
}

/* The exception pending handed to log(exception) (NULL: dropped) and cleared: a hook or callback of the
 * framework's never raises into it. */
void hand_failure(PyObject *log) {
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

/* The truth of attribute name of o: 1, 0, or -1 on an exception. */
int attr_true(PyObject *o, PyObject *name) {
  PyObject *v = PyObject_GetAttr(o, name);
  int yes = v == NULL ? -1 : PyObject_IsTrue(v);
  Py_XDECREF(v);
  return yes;
}

/* isinstance(x, torch.Tensor): a subtype without asking the metaclass (the common case) */
int is_tensor(Hot *h, PyObject *x) {
  PyTypeObject *tp = (PyTypeObject *)h->o.tensor_type;
  return PyType_IsSubtype(Py_TYPE(x), tp) ? 1 : PyObject_IsInstance(x, h->o.tensor_type);
}

/* The storage of torch tensor t as Torch.storage finds it (meta: only when asked, Torch.saved does not
 * check it): 1 and *s, 0 when t is not reported, -1 on an exception. */
int torch_storage(Hot *h, PyObject *t, int check_meta, PyObject **s) {
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

/* What saved_desc(t) of swapagent.walk gives: b"\tDTYPE\tSHAPE" from its cache by (t.dtype, t.shape), else
 * describe(t), which fills the cache (the shape as the framework gives it: torch.Size and MindSpore's tuple
 * hash and compare as the tuple saved_desc keys by). A new reference. */
PyObject *desc_of(PyObject *t, PyObject *cache, PyObject *describe) {
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


/* ---- Packed: what pack returns; core.Packed's fields and its __del__, in C. ---- */

typedef struct {
  PyObject_HEAD Py_ssize_t slot;
  PyObject *tensor;
  Pass *pass_;
  int waiting; /* counted in its layer's Hot's waiting: neither unpacked nor freed yet */
} Packed;

/* A Packed leaves the waiting count (its unpack, or its end), once. */
static void packed_unwait(Packed *p) {
  if (p->waiting) {
    p->waiting = 0;
    p->pass_->hot->waiting--;
  }
}

/* The end of a saved tensor (core.Packed.__del__): one reference less on its slot; the registry forgets the
 * storage when the slot's last one went; the layer stops waiting for its unpack. Never an agent call (this may
 * run inside one, from the garbage collector), never an exception out. */
static void packed_end(Packed *p) {
  Pass *ps = p->pass_;
  if (ps == NULL || ps->hot == NULL || p->slot >= PyList_Size(ps->refs)) return;
  long n = PyLong_AsLong(PyList_GetItem(ps->refs, p->slot)) - 1;
  PyObject *v = PyLong_FromLong(n);
  if (v != NULL) PyList_SetItem(ps->refs, p->slot, v); /* steals v */
  if (n == 0 && p->slot < PyList_Size(ps->handles)) {
    PyObject *h = PyList_GetItem(ps->handles, p->slot), *entries = ps->hot->o.entries;
    if (entries != NULL && PyDict_Contains(entries, h) == 1) PyDict_DelItem(entries, h);
  }
  /* Layer.freed: the last saved tensor the layer waited for notes the layer (core.end_freed asks it) */
  Hot *hot = ps->hot;
  int was_waiting = p->waiting;
  packed_unwait(p);
  if (was_waiting && hot->waiting == 0 && freed_layers != NULL && hot->o.layer != NULL)
    (void)PyList_Append(freed_layers, hot->o.layer);
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
  heap_free(self);
  T_END(T_FREE);
  Py_XDECREF(alias);
}

/* The agent's handle (0 before the region reported its saves, or when the save was refused). */
static PyObject *packed_handle(PyObject *self, void *closure) {
  (void)closure;
  Packed *p = (Packed *)self;
  long long h = 0;
  if (p->slot < PyList_Size(p->pass_->handles)) h = PyLong_AsLongLong(PyList_GetItem(p->pass_->handles, p->slot));
  if (h == -1 && PyErr_Occurred()) return NULL;
  return PyLong_FromLongLong(h > 0 ? h : 0);
}

static PyMemberDef packed_members[] = {
    {"slot", T_PYSSIZET, offsetof(Packed, slot), READONLY, "index of its storage among the forward's saves"},
    {"tensor", T_OBJECT, offsetof(Packed, tensor), READONLY, "the saved tensor's alias"},
    {"pass_", T_OBJECT, offsetof(Packed, pass_), READONLY, "the forward (Pass) that saved it"},
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

static PyObject **hot_objs(Hot *h) { return (PyObject **)&h->o; }

static int hot_traverse(PyObject *self, visitproc visit, void *arg) {
  PyObject **o = hot_objs((Hot *)self);
  for (size_t i = 0; i < HOT_NOBJS; i++) Py_VISIT(o[i]);
  return 0;
}

static int hot_clear(PyObject *self) {
  PyObject **o = hot_objs((Hot *)self);
  for (size_t i = 0; i < HOT_NOBJS; i++) Py_CLEAR(o[i]);
  ((Hot *)self)->native = 0;
  return 0;
}

static void hot_dealloc(PyObject *self) { gc_dealloc(self, hot_clear); }

/* Hot(layer=, saved_of=, alias=, region=, bptr=, bsize=, bflag=, bstore=, saved_t=, unpacked=, entries=,
 *     handles=, saved=, agent=, group=, lock=, flush=, enter=, maybe_exit=, input_grad=, output_grad=,
 *     forward_pre=, forward_post=, unpack_address=0, resident_address=0): core.Layer's (Layer._hot_path says
 * what each is). unpack_address is swapagent_unpack's address, or 0 to call the agent's unpack method;
 * resident_address swapagent_unpack_resident's, or 0. */
static int hot_init(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"layer", "saved_of", "alias", "region", "bptr", "bsize", "bflag", "bstore", "saved_t",
                          "unpacked", "entries", "handles", "saved", "agent", "group", "lock", "flush", "enter",
                          "maybe_exit", "input_grad", "output_grad", "forward_pre", "forward_post",
                          "unpack_address", "resident_address", NULL};
  Hot *h = (Hot *)self;
  unsigned long long unpack = 0, resident = 0;
  PyObject *v[23], *lock;
  if (!PyArg_ParseTupleAndKeywords(
          args, kw, "OOOO!O!O!O!O!O!OO!O!O!OO!OOOOOOOO|KK", names, &v[0], &v[1], &v[2], &PyDict_Type, &v[3],
          &PyList_Type, &v[4], &PyList_Type, &v[5], &PyList_Type, &v[6], &PyList_Type, &v[7], &PyList_Type, &v[8],
          &v[9], &PyDict_Type, &v[10], &PyList_Type, &v[11], &PyList_Type, &v[12], &v[13], &PyBytes_Type, &v[14],
          &lock, &v[15], &v[16], &v[17], &v[18], &v[19], &v[20], &v[21], &unpack, &resident))
    return -1;
  if (!PyAnySet_Check(v[9])) {
    PyErr_SetString(PyExc_TypeError, "Hot(): unpacked must be a set");
    return -1;
  }
  PyObject *acquire = PyObject_GetAttr(lock, s_acquire), *release = PyObject_GetAttr(lock, s_release);
  PyObject *d = PyObject_GetAttr(v[13], s_dict);
  if (d == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
    PyErr_Clear(); /* an object without a __dict__ cannot have had its methods replaced */
  if (acquire == NULL || release == NULL || PyErr_Occurred()) {
    Py_XDECREF(acquire);
    Py_XDECREF(release);
    Py_XDECREF(d);
    return -1;
  }
  hot_clear(self);
  struct hot_objs *o = &h->o;
  PyObject **given[] = {&o->layer, &o->saved_of, &o->alias, &o->region, &o->bptr, &o->bsize, &o->bflag,
                        &o->bstore, &o->saved_t, &o->unpacked, &o->entries, &o->handles, &o->saved, &o->agent,
                        &o->group, &o->flush, &o->enter, &o->maybe_exit, &o->input_grad, &o->output_grad,
                        &o->forward_pre, &o->forward_post};
  _Static_assert(sizeof given / sizeof given[0] == 22, "Hot() takes 22 objects besides its lock");
  for (size_t i = 0; i < 22; i++) {
    Py_INCREF(v[i]);
    *given[i] = v[i];
  }
  o->acquire = acquire;
  o->release = release;
  o->agent_dict = d != NULL && PyDict_Check(d) ? d : NULL;
  if (o->agent_dict == NULL) Py_XDECREF(d);
  Py_INCREF(Py_None);
  o->latest = Py_None;
  if ((o->params = PyFrozenSet_New(NULL)) == NULL) return -1;
  h->unpack = (unpack_fn)(uintptr_t)unpack;
  h->resident = (unpack_fn)(uintptr_t)resident;
  h->removed = h->guarded = 0;
  return 0;
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
  PyObject *out = NULL, *alias = NULL, *refs;
  Pass *ps = (Pass *)h->o.latest;
  if (!PyObject_IsTrue(nbytes) || !PyObject_IsTrue(ptr) || ps == NULL || Py_TYPE(ps) != PassType) {
    Py_INCREF(t);
    out = t;
    ps = NULL;
    goto done;
  }
  Py_INCREF(ps);
  refs = ps->refs;
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
    int param = h->o.params != NULL ? PySequence_Contains(h->o.params, ptr) : 0;
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
  pk->pass_ = ps;
  ps = NULL;
  pk->waiting = 1;
  h->waiting++;
  out = (PyObject *)pk;
done:
  Py_XDECREF(ps);
  Py_XDECREF(alias);
  Py_DECREF(s);
  Py_DECREF(ptr);
  Py_DECREF(nbytes);
  return out;
}

/* The agent's unpack of handle h: nonzero when the storage is on the device. */
static int agent_unpack(Hot *h, PyObject *hv, long long handle) {
  if (h->unpack != NULL) {
    /* Directly, unless the agent object's unpack was replaced. */
    int replaced = agent_replaced(h, s_agent_unpack, NULL);
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
  PyObject *r = call_method2(h->o.agent, s_agent_unpack, hv, NULL);
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
  Pass *ps = p->pass_;
  PyObject *r = NULL, *out = NULL, *hs = ps->handles;
  Py_INCREF(ps);
  /* an unpack inside the region that saved it: the agent hears of its saves first */
  if (p->slot >= PyList_Size(hs) && (PyObject *)ps == h->o.latest) {
    if ((r = PyObject_CallNoArgs(h->o.flush)) == NULL) goto done;
    Py_CLEAR(r);
  }
  if (!ps->entered) { /* the first unpack of a forward not yet entered enters it (and prefetches) */
    if (h->native) {
      if (hot_enter(h, ps) < 0) goto done;
    } else if ((r = call2(h->o.enter, (PyObject *)ps, NULL)) == NULL)
      goto done;
    Py_CLEAR(r);
  }
  if (p->slot < PyList_Size(hs)) {
    PyObject *hv = PyList_GetItem(hs, p->slot); /* borrowed; hs holds it */
    long long handle = PyLong_AsLongLong(hv);
    if (handle == -1 && PyErr_Occurred()) goto done;
    int seen = handle > 0 ? PySet_Contains(h->o.unpacked, hv) : 1;
    if (seen < 0) goto done;
    if (!seen) {
      if (PySet_Add(h->o.unpacked, hv) < 0) goto done;
      int ok = agent_unpack(h, hv, handle);
      if (ok < 0) goto done;
      /* the agent's check("unpack(<h>)", ERUNTIME): warned of once, the job goes on */
      if (!ok) {
        PyObject *call = PyUnicode_FromFormat("unpack(%lld)", handle), *code = PyLong_FromLong(SWAPAGENT_ERUNTIME);
        r = call && code ? call_method2(h->o.agent, s_check, call, code) : NULL;
        Py_XDECREF(call);
        Py_XDECREF(code);
        if (r == NULL) goto done;
        Py_CLEAR(r);
      }
    }
  }
  packed_unwait(p);
  if (h->waiting == 0) {
    if (h->native) {
      if (hot_maybe_exit(h) < 0) goto done;
    } else if ((r = PyObject_CallNoArgs(h->o.maybe_exit)) == NULL)
      goto done;
    Py_CLEAR(r);
  }
  Py_INCREF(p->tensor);
  out = p->tensor;
done:
  Py_DECREF(ps);
  return out;
}

TIMED_O(T_PACK, hot_pack)
TIMED_O(T_UNPACK, hot_unpack)
TIMED_O(T_PRE, hot_pre)
TIMED_O(T_POST, hot_post)

static PyMethodDef hot_methods[] = {
    {"pack", TIMED(hot_pack), METH_O, "The saved-tensor pack hook (core.Layer.pack)."},
    {"unpack", TIMED(hot_unpack), METH_O, "The saved-tensor unpack hook (core.Layer.unpack)."},
    {"region", (PyCFunction)(void (*)(void))hot_region, METH_VARARGS | METH_KEYWORDS,
     "Makes pre and post this torch layer's region hooks (_hot_region.c)."},
    {"pre", TIMED(hot_pre), METH_VARARGS, "The forward pre-hook (with kwargs): the region's enter (forward_pre)."},
    {"post", TIMED(hot_post), METH_VARARGS, "The forward hook: the region's end (Layer.forward_post)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef hot_members[] = {
    {"latest", T_OBJECT, offsetof(Hot, o.latest), 0, "the Pass of the layer's latest forward, or None"},
    {"params", T_OBJECT, offsetof(Hot, o.params), 0, "the parameters' storage pointers during a forward"},
    {"removed", T_BOOL, offsetof(Hot, removed), 0, "the layer's hooks were taken off (Handle.remove)"},
    {"guarded", T_BOOL, offsetof(Hot, guarded), 0, "the guard reports this layer (swapagent.guard)"},
    {NULL, 0, 0, 0, NULL},
};

/* len(hot): its waiting count (Layer._waiting on the compiled path: its truth is whether any waits) */
static Py_ssize_t hot_len(PyObject *self) { return ((Hot *)self)->waiting; }

static PyType_Slot hot_slots[] = {
    {Py_tp_init, hot_init},         {Py_sq_length, hot_len},         {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, hot_dealloc},   {Py_tp_traverse, hot_traverse},  {Py_tp_clear, hot_clear},
    {Py_tp_methods, hot_methods},   {Py_tp_members, hot_members},
    {Py_tp_doc, "One layer's state and compiled hooks (core.Layer.st on the compiled path)."},
    {0, NULL},
};

static PyType_Spec hot_spec = {"swapagent._hot.Hot", sizeof(Hot), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                               hot_slots};

/* configure(INPUT, OUTPUT, MAX_DEPTH, ATOMS, hook_failed, end_failed, freed_layers, end_freed): what core says of
 * the chains' call kinds and the walk, its loggers of a gradient hook and an end-of-backward callback that
 * raised, and its list of layers whose waiting saved tensors were freed with the call that asks them, once,
 * before anything else of this module is used (core.load_hot). */
static PyObject *configure(PyObject *Py_UNUSED(module), PyObject *args) {
  long in, out, depth;
  PyObject *atoms, *failed[2], *freed, *end;
  if (!PyArg_ParseTuple(args, "lllO!OOO!O", &in, &out, &depth, &PyFrozenSet_Type, &atoms, &failed[0], &failed[1],
                        &PyList_Type, &freed, &end))
    return NULL;
  if (in == out || in < 0 || out < 0 || depth < 0) {
    PyErr_SetString(PyExc_ValueError, "configure: kinds must differ and not be negative, the depth not negative");
    return NULL;
  }
  kind_input = in;
  kind_output = out;
  walk_max_depth = depth;
  PyObject **dst[] = {&walk_atoms, &hook_failed, &end_failed, &freed_layers, &end_freed},
           *src[] = {atoms, failed[0], failed[1], freed, end};
  for (size_t i = 0; i < 5; i++) {
    PyObject *old = *dst[i];
    Py_INCREF(src[i]);
    *dst[i] = src[i];
    Py_XDECREF(old);
  }
  Py_RETURN_NONE;
}

/* watch(on): whether a guard's hooks (core.forward_hook, saves_hook) watch the regions: then every region
 * hook runs through the layer's Python methods, which call them (core.watch). */
static PyObject *watch(PyObject *Py_UNUSED(module), PyObject *on) {
  int yes = PyObject_IsTrue(on);
  if (yes < 0) return NULL;
  watched = yes;
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(INPUT, OUTPUT, MAX_DEPTH, ATOMS, hook_failed, end_failed, freed_layers, end_freed)."},
    {"watch", watch, METH_O, "watch(on): whether a guard's hooks watch the regions (core.watch)."},
#ifdef SWAPAGENT_HOT_TIMED
    {"timers", timers, METH_NOARGS, "{probe: (seconds, calls)} since the last call (the bench's timed build)."},
#endif
    {"saved_descs", saved_descs, METH_VARARGS, "core.saved_desc of each tensor of a list, as a list."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hot_module = {
    PyModuleDef_HEAD_INIT, "_hot", "The companions' compiled hot path (see _hot.c).", -1, module_methods, NULL, NULL,
    NULL, NULL,
};

/* *dst made from spec and added to module m as name: 0, or -1 on an exception. */
int add_type(PyObject *m, const char *name, PyTypeObject **dst, PyType_Spec *spec) {
  *dst = (PyTypeObject *)PyType_FromSpec(spec);
  if (*dst == NULL) return -1;
  Py_INCREF(*dst);
  if (PyModule_AddObject(m, name, (PyObject *)*dst) == 0) return 0;
  Py_DECREF(*dst);
  return -1;
}

PyMODINIT_FUNC PyInit__hot(void) {
  struct {
    PyObject **dst;
    const char *name;
  } names[] = {{&s_agent_unpack, "unpack"},
               {&s_check, "check"},
               {&s_c_calls, "c_calls"},
               {&s_region_enter, "region_enter"},
               {&s_region_exit, "region_exit"},
               {&s_backward_enter, "backward_enter"},
               {&s_backward_exit, "backward_exit"},
               {&s_dtype, "dtype"},
               {&s_shape, "shape"},
               {&s_is_cpu, "is_cpu"},
               {&s_is_meta, "is_meta"},
               {&s_untyped_storage, "untyped_storage"},
               {&s_data_ptr, "data_ptr"},
               {&s_nbytes, "nbytes"},
               {&s_requires_grad, "requires_grad"},
               {&s_dataclass_fields, "__dataclass_fields__"},
               {&s_dict, "__dict__"},
               {&s_acquire, "acquire"},
               {&s_release, "release"}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if ((*names[i].dst = PyUnicode_InternFromString(names[i].name)) == NULL) return NULL;
  if (region_init() < 0) return NULL;
  PyObject *m = PyModule_Create(&hot_module);
  if (m == NULL) return NULL;
  if (add_type(m, "Packed", &PackedType, &packed_spec) < 0 || add_type(m, "Hot", &HotType, &hot_spec) < 0 ||
      grad_init(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
