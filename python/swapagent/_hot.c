/* _hot.c: the companions' per-saved-tensor work in C (swapagent.core.Layer's pack and unpack hooks, and the
 * Packed they hand the framework), against Python's limited API, so one build (abi3) serves every Python 3
 * from 3.9 on of an architecture. It does what the pure-Python closures of Layer._hot_path do, on the same
 * Python objects (the layer's lists, dict and sets), so either path can run and the rest of the companion
 * does not know which one did; core.py stays the one description of the rule. What it saves is the
 * interpreter: no bytecode, no frame, no attribute lookup of its own state, a Packed without a Python
 * __del__, and the agent's swapagent_unpack called directly instead of through ctypes.
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
    *s_agent, *s_unpack, *s_check, *s_dict, *s_dtype, *s_shape;

static PyTypeObject *PackedType, *HotType;

/* ---- Packed: what pack returns; core.Packed's fields and its __del__, in C. ---- */

typedef struct {
  PyObject_HEAD Py_ssize_t slot;
  PyObject *tensor;
  PyObject *pass_;
  PyObject *hot; /* the Hot that made it: the registry and the waiting set its end updates */
} Packed;

/* ---- Hot: one layer's pack and unpack, bound to its state. ---- */

/* The objects a Hot holds, in Hot()'s argument order: only object pointers, so init, traverse and clear walk
 * them as one array (hot_objs). */
struct hot_objs {
  PyObject *layer;
  PyObject *saved_of, *alias;                        /* Framework.saved, Framework.alias */
  PyObject *region;                                  /* dict: storage ptr -> slot */
  PyObject *bptr, *bsize, *bflag, *bstore, *saved_t; /* lists: the open region's saves, by slot */
  PyObject *waiting, *unpacked;                      /* sets */
  PyObject *entries;                                 /* dict: the registry's handle -> storage */
};
#define HOT_NOBJS (sizeof(struct hot_objs) / sizeof(PyObject *))
_Static_assert(HOT_NOBJS == 12, "Hot()'s argument format parses 12 objects");

typedef struct {
  PyObject_HEAD struct hot_objs o;
  unpack_fn unpack; /* swapagent_unpack, or NULL: the agent's Python method */
} Hot;

static PyObject **hot_objs(Hot *h) { return (PyObject **)&h->o; }

static int packed_traverse(PyObject *self, visitproc visit, void *arg) {
  Packed *p = (Packed *)self;
  Py_VISIT(p->tensor);
  Py_VISIT(p->pass_);
  Py_VISIT(p->hot);
  return 0;
}

static int packed_clear(PyObject *self) {
  Packed *p = (Packed *)self;
  Py_CLEAR(p->tensor);
  Py_CLEAR(p->pass_);
  Py_CLEAR(p->hot);
  return 0;
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
  PyObject *id = PyLong_FromVoidPtr(p);
  if (id != NULL) PySet_Discard(hot->o.waiting, id);
  Py_XDECREF(id);
}

static void packed_dealloc(PyObject *self) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject_GC_UnTrack(self);
  packed_end((Packed *)self);
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
  packed_clear(self);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  tp_free(self);
  Py_DECREF(tp);
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
    {Py_tp_traverse, packed_traverse},
    {Py_tp_clear, packed_clear},
    {Py_tp_members, packed_members},
    {Py_tp_getset, packed_getset},
    {Py_tp_doc, "What the compiled pack hook returns (core.Packed's fields)."},
    {0, NULL},
};

static PyType_Spec packed_spec = {"swapagent._hot.Packed", sizeof(Packed), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, packed_slots};

/* ---- Hot ---- */

static int hot_traverse(PyObject *self, visitproc visit, void *arg) {
  PyObject **o = hot_objs((Hot *)self);
  for (size_t i = 0; i < HOT_NOBJS; i++) Py_VISIT(o[i]);
  return 0;
}

static int hot_clear(PyObject *self) {
  PyObject **o = hot_objs((Hot *)self);
  for (size_t i = 0; i < HOT_NOBJS; i++) Py_CLEAR(o[i]);
  return 0;
}

static void hot_dealloc(PyObject *self) {
  PyObject_GC_UnTrack(self);
  hot_clear(self);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  tp_free(self);
  Py_DECREF(tp);
}

/* Hot(layer, saved_of, alias, region, bptr, bsize, bflag, bstore, saved_t, waiting, unpacked, entries,
 *     unpack_address): unpack_address is swapagent_unpack's address, or 0 to call layer.agent.unpack. */
static int hot_init(PyObject *self, PyObject *args, PyObject *kw) {
  Hot *h = (Hot *)self;
  unsigned long long unpack = 0;
  if (kw != NULL && PyDict_Size(kw) > 0) {
    PyErr_SetString(PyExc_TypeError, "Hot() takes no keyword arguments");
    return -1;
  }
  PyObject *o[HOT_NOBJS];
  if (!PyArg_ParseTuple(args, "OOOO!O!O!O!O!O!OOO!K", &o[0], &o[1], &o[2], &PyDict_Type, &o[3], &PyList_Type,
                        &o[4], &PyList_Type, &o[5], &PyList_Type, &o[6], &PyList_Type, &o[7], &PyList_Type,
                        &o[8], &o[9], &o[10], &PyDict_Type, &o[11], &unpack))
    return -1;
  if (!PyAnySet_Check(o[9]) || !PyAnySet_Check(o[10])) {
    PyErr_SetString(PyExc_TypeError, "Hot(): waiting and unpacked must be sets");
    return -1;
  }
  PyObject **dst = hot_objs(h);
  for (size_t i = 0; i < HOT_NOBJS; i++) {
    PyObject *old = dst[i];
    Py_INCREF(o[i]);
    dst[i] = o[i];
    Py_XDECREF(old);
  }
  h->unpack = (unpack_fn)(uintptr_t)unpack;
  return 0;
}

/* Truth of refs[i] (a list of ints): its count of saved tensors alive. */
static long refs_at(PyObject *refs, Py_ssize_t i) {
  if (i < 0 || i >= PyList_Size(refs)) return 0;
  return PyLong_AsLong(PyList_GetItem(refs, i));
}

/* pack(t): Layer._hot_path's pack. */
static PyObject *hot_pack(PyObject *self, PyObject *t) {
  Hot *h = (Hot *)self;
  PyObject *info = PyObject_CallFunctionObjArgs(h->o.saved_of, t, NULL);
  if (info == NULL) return NULL;
  if (info == Py_None || !PyTuple_Check(info) || PyTuple_Size(info) != 3) {
    Py_DECREF(info);
    Py_INCREF(t);
    return t;
  }
  PyObject *s = PyTuple_GetItem(info, 0), *ptr = PyTuple_GetItem(info, 1), *nbytes = PyTuple_GetItem(info, 2);
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
  PyObject *id = PyLong_FromVoidPtr(pk);
  if (id == NULL || PySet_Add(h->o.waiting, id) < 0) {
    Py_XDECREF(id);
    Py_DECREF(pk);
    goto done;
  }
  Py_DECREF(id);
  out = (PyObject *)pk;
done:
  Py_XDECREF(alias);
  Py_XDECREF(refs);
  Py_XDECREF(ps);
  Py_DECREF(info);
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

/* The agent's unpack of handle h: nonzero when the storage is on the device. */
static int agent_unpack(Hot *h, PyObject *hv, long long handle) {
  PyObject *agent = PyObject_GetAttr(h->o.layer, s_agent);
  if (agent == NULL) return -1;
  if (h->unpack != NULL) {
    /* Directly, unless the agent object's unpack was replaced (a test's recorder, a wrapper): the Python
     * path looks the method up at every call, and so does this one. */
    PyObject *d = PyObject_GetAttr(agent, s_dict);
    int replaced = d != NULL && PyDict_Check(d) && PyDict_GetItemWithError(d, s_unpack) != NULL;
    Py_XDECREF(d);
    if (PyErr_Occurred()) {
      Py_DECREF(agent);
      return -1;
    }
    if (!replaced) {
      Py_DECREF(agent);
      uintptr_t base;
      /* Without the GIL, as ctypes calls it: the agent may wait for a copy whose storage op is Python. */
      Py_BEGIN_ALLOW_THREADS base = h->unpack((int64_t)handle);
      Py_END_ALLOW_THREADS return base != 0;
    }
  }
  PyObject *r = call_method(agent, s_unpack, hv);
  Py_DECREF(agent);
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
    if ((r = call_method(h->o.layer, s_enter, ps)) == NULL) goto done;
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
          PyObject *agent = PyObject_GetAttr(h->o.layer, s_agent);
          PyObject *call = PyUnicode_FromFormat("unpack(%lld)", handle);
          PyObject *code = PyLong_FromLong(SWAPAGENT_ERUNTIME);
          r = agent && call && code ? call_method2(agent, s_check, call, code) : NULL;
          Py_XDECREF(agent);
          Py_XDECREF(call);
          Py_XDECREF(code);
          if (r == NULL) goto done;
          Py_CLEAR(r);
        }
      }
    }
  }
  PyObject *id = PyLong_FromVoidPtr(p);
  if (id == NULL) goto done;
  PySet_Discard(h->o.waiting, id);
  Py_DECREF(id);
  if (PySet_Size(h->o.waiting) == 0) {
    if ((r = call_method(h->o.layer, s_maybe_exit, NULL)) == NULL) goto done;
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
    PyObject *t = PyList_GetItem(ts, i); /* borrowed */
    PyObject *dtype = PyObject_GetAttr(t, s_dtype), *shape = dtype != NULL ? PyObject_GetAttr(t, s_shape) : NULL;
    PyObject *key = shape != NULL ? PyTuple_Pack(2, dtype, shape) : NULL;
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    PyObject *d = key != NULL ? PyDict_GetItemWithError(cache, key) : NULL; /* borrowed */
    Py_XDECREF(key);
    if (d != NULL) {
      Py_INCREF(d);
    } else {
      PyErr_Clear(); /* an attribute the framework lacks, an unhashable shape: describe says what is wrong */
      d = PyObject_CallFunctionObjArgs(describe, t, NULL);
      if (d == NULL) {
        Py_DECREF(out);
        return NULL;
      }
    }
    PyList_SetItem(out, i, d); /* steals d */
  }
  return out;
}

static PyMethodDef module_methods[] = {
    {"saved_descs", saved_descs, METH_VARARGS, "core.saved_desc of each tensor of a list, as a list."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef hot_methods[] = {
    {"pack", hot_pack, METH_O, "The saved-tensor pack hook (core.Layer.pack)."},
    {"unpack", hot_unpack, METH_O, "The saved-tensor unpack hook (core.Layer.unpack)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot hot_slots[] = {
    {Py_tp_init, hot_init},
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
  } names[] = {{&s_latest, "latest"}, {&s_params, "_params"},   {&s_refs, "refs"},
               {&s_handles, "handles"}, {&s_entered, "entered"}, {&s_flush, "flush"},
               {&s_enter, "enter"},     {&s_maybe_exit, "maybe_exit"}, {&s_agent, "agent"},
               {&s_unpack, "unpack"},   {&s_check, "check"},            {&s_dict, "__dict__"},
               {&s_dtype, "dtype"},     {&s_shape, "shape"}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if ((*names[i].dst = PyUnicode_InternFromString(names[i].name)) == NULL) return NULL;
  PyObject *m = PyModule_Create(&hot_module);
  if (m == NULL) return NULL;
  PackedType = (PyTypeObject *)PyType_FromSpec(&packed_spec);
  HotType = (PyTypeObject *)PyType_FromSpec(&hot_spec);
  if (PackedType == NULL || HotType == NULL) goto fail;
  Py_INCREF(PackedType);
  if (PyModule_AddObject(m, "Packed", (PyObject *)PackedType) < 0) goto fail;
  Py_INCREF(HotType);
  if (PyModule_AddObject(m, "Hot", (PyObject *)HotType) < 0) goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
