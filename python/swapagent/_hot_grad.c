/* _hot_grad.c: Pass (core.Pass as a C type: the state of one forward that the hooks of both paths read), the
 * gradient chains (grads._Chain and grads._Call) and a native layer's backward bookkeeping (core.Layer.enter,
 * maybe_exit, input_grad, backward_end), the same rule on the same state. Why in C: the gradient hooks and
 * their two agent calls cost a torch step about three times more in Python (docs/companions.md). */
#include "_hot.h"

PyTypeObject *PassType, *CallType, *ChainType;

/* What core says (configure): the kinds of a call on a chain (core.INPUT, core.OUTPUT). The end callback's
 * kind is this file's own: never on a chain. */
long kind_input = -2, kind_output = -3;
#define KIND_END (-1)

/* ---- Pass ---- */

/* A new forward of h's layer: a new reference, NULL on an exception. */
Pass *pass_new(Hot *h) {
  allocfunc alloc = (allocfunc)PyType_GetSlot(PassType, Py_tp_alloc);
  PyObject *refs = PyList_New(0), *handles = PyList_New(0);
  Pass *p = refs != NULL && handles != NULL ? (Pass *)alloc(PassType, 0) : NULL; /* zeroed, tracked */
  if (p == NULL) {
    Py_XDECREF(refs);
    Py_XDECREF(handles);
    return NULL;
  }
  Py_XINCREF(h->o.layer);
  p->layer = h->o.layer;
  Py_INCREF(h);
  p->hot = h;
  p->refs = refs;
  p->handles = handles;
  return p;
}

/* Pass(hot): a new forward of the layer whose state hot is. */
static PyObject *pass_make(PyTypeObject *Py_UNUSED(tp), PyObject *args, PyObject *kw) {
  PyObject *h;
  if ((kw != NULL && PyDict_Size(kw) > 0) || !PyArg_ParseTuple(args, "O!", HotType, &h)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Pass(hot) takes no keyword arguments");
    return NULL;
  }
  return (PyObject *)pass_new((Hot *)h);
}

static int pass_traverse(PyObject *self, visitproc visit, void *arg) {
  Pass *p = (Pass *)self;
  Py_VISIT(p->layer);
  Py_VISIT(p->hot);
  Py_VISIT(p->refs);
  Py_VISIT(p->handles);
  return 0;
}

static int pass_clear(PyObject *self) {
  Pass *p = (Pass *)self;
  Py_CLEAR(p->layer);
  Py_CLEAR(p->hot);
  Py_CLEAR(p->refs);
  Py_CLEAR(p->handles);
  return 0;
}

static void pass_dealloc(PyObject *self) {
  PyObject_GC_UnTrack(self);
  if (((Pass *)self)->weakrefs != NULL) PyObject_ClearWeakRefs(self);
  gc_dealloc(self, pass_clear);
}

static PyMemberDef pass_members[] = {
    {"layer", T_OBJECT, offsetof(Pass, layer), READONLY, "the layer (core.Layer)"},
    {"refs", T_OBJECT, offsetof(Pass, refs), READONLY, "by slot: how many of its saved tensors are alive"},
    {"handles", T_OBJECT, offsetof(Pass, handles), READONLY, "by slot: the agent's handle, or its refusal code"},
    {"inputs_left", T_PYSSIZET, offsetof(Pass, inputs_left), 0, "positional inputs whose gradient is to come"},
    {"entered", T_BOOL, offsetof(Pass, entered), 0, "its backward began"},
    {"exited", T_BOOL, offsetof(Pass, exited), 0, "its backward exit was reported"},
    {"ended", T_BOOL, offsetof(Pass, ended), 0, "the backward pass that entered it ended"},
    {"__weakrefoffset__", T_PYSSIZET, offsetof(Pass, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot pass_slots[] = {
    {Py_tp_new, pass_make},         {Py_tp_dealloc, pass_dealloc}, {Py_tp_traverse, pass_traverse},
    {Py_tp_clear, pass_clear},      {Py_tp_members, pass_members},
    {Py_tp_doc, "One forward of a layer, from its region enter until its backward exit (core.Pass)."},
    {0, NULL},
};

static PyType_Spec pass_spec = {"swapagent._hot.Pass", sizeof(Pass), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                pass_slots};

/* ---- the backward bookkeeping of a native layer ----
 * The same rule as core.Layer's methods (its class comment), on the same Pass and Hot state, under the
 * layer's own lock; the agent's backward enter and exit through swapagent_call where it gives it. */

/* The layer's lock (an RLock) taken: 0, or -1 on an exception. */
static int lock_take(Hot *h) {
  PyObject *r = PyObject_CallNoArgs(h->o.acquire);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

/* Releases the lock lock_take took (an exception pending is kept); -1 when the release failed. */
static int lock_give(Hot *h) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *r = PyObject_CallNoArgs(h->o.release);
  if (type != NULL) {
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
    return -1;
  }
  if (r == NULL) return -1;
  Py_DECREF(r);
  return 0;
}

/* The agent's backward_enter(group) (exit 0) or backward_exit(group) (exit 1): through swapagent_call, without the
 * GIL (a prefetch may wait for a copy whose storage op is Python), where the agent gives it and has neither
 * method replaced; else its Python methods. A failed call is warned of once, as Agent.backward_enter does. */
static int backward_call(Hot *h, int exit) {
  PyObject *agent = h->o.agent;
  struct calls c;
  int fast = direct_calls(h, &c, s_backward_enter, s_backward_exit);
  if (fast < 0) return -1;
  if (fast) {
    const char *g = PyBytes_AsString(h->o.group);
    int64_t e;
    uint32_t kind = exit ? SWAPAGENT_CALL_BACKWARD_EXIT : SWAPAGENT_CALL_BACKWARD_ENTER;
    Py_BEGIN_ALLOW_THREADS e = c.call(RECORD(kind, .group = g), c.opts);
    Py_END_ALLOW_THREADS if (e == 0) return 0;
    return agent_check(h, agent, exit ? "backward_exit(%s)" : "backward_enter(%s)", e);
  }
  PyObject *group = PyUnicode_FromEncodedObject(h->o.group, "utf-8", NULL);
  PyObject *r = group != NULL ? call_method2(agent, exit ? s_backward_exit : s_backward_enter, group, NULL) : NULL;
  Py_XDECREF(group);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

/* Layer.maybe_exit: reports the backward exit of the latest forward once the rule holds. */
int hot_maybe_exit(Hot *h) {
  if (lock_take(h) < 0) return -1;
  Pass *p = (Pass *)h->o.latest;
  PyObject *handles = NULL;
  /* never entered: only once its region reported its saves, if the agent holds any */
  int go = p != NULL && Py_TYPE(p) == PassType && h->waiting == 0 && !h->removed && !p->exited &&
           (p->entered ? p->inputs_left <= 0 || p->ended
                       : PyList_Size(h->o.handles) > 0 && PyList_Size(p->handles) == PyList_Size(p->refs));
  if (go) {
    p->exited = 1;
    handles = PyList_GetSlice(h->o.handles, 0, PyList_Size(h->o.handles));
    if (handles == NULL || list_clear(h->o.handles) < 0 || PySet_Clear(h->o.unpacked) < 0) go = 0;
  }
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

/* ---- Call: grads._Call, and a native layer's end-of-backward callback (KIND_END) ---- */

typedef struct {
  PyObject_HEAD Pass *pass_; /* the forward it belongs to */
  int kind;
  int fired;
} Call;

/* Whether the call is dead (grads._Call.dead) */
static int call_dead(Call *c) {
  Pass *p = c->pass_;
  if (c->fired || p->hot == NULL || p->hot->removed || p->exited) return 1;
  /* An output call only matters until its forward entered backward; an input call only while its forward
   * is the group's latest. */
  return c->kind == kind_output ? p->entered : (PyObject *)p != p->hot->o.latest;
}

/* A kind call of forward p: a new reference, NULL on an exception. */
static Call *call_new(Pass *p, int kind) {
  allocfunc alloc = (allocfunc)PyType_GetSlot(CallType, Py_tp_alloc);
  Call *c = (Call *)alloc(CallType, 0);
  if (c == NULL) return NULL;
  Py_INCREF(p);
  c->pass_ = p;
  c->kind = kind;
  return c;
}

/* Layer.input_grad(p) and Layer.backward_end(p): the gradient of one of p's positional inputs arrived, or
 * the backward pass that entered p ended. */
static int hot_input_grad(Hot *h, Pass *p, int end) {
  if (lock_take(h) < 0) return -1;
  if (end) p->ended = 1;
  else p->inputs_left--;
  if (lock_give(h) < 0) return -1;
  return hot_maybe_exit(h);
}

/* Fires the call (grads._Call.fire): the layer's input_grad or output_grad of the call's forward (an end call: its
 * backward_end), at most once. */
static int call_fire(Call *c) {
  if (c->fired) return 0;
  c->fired = 1;
  Hot *h = c->pass_->hot;
  if (h == NULL || h->o.layer == NULL) return 0; /* its layer is gone (cleared by the collector) */
  if (h->native)
    return c->kind == kind_output ? hot_enter(h, c->pass_) : hot_input_grad(h, c->pass_, c->kind == KIND_END);
  if (c->kind == KIND_END) return 0;
  PyObject *r = call2(c->kind == kind_input ? h->o.input_grad : h->o.output_grad, (PyObject *)c->pass_, NULL);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

/* call(): fires it, as the framework's end-of-backward callback; a failure goes to core's logger (never an
 * exception into the framework's backward). */
static PyObject *call_call(PyObject *self, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kw)) {
  if (call_fire((Call *)self) < 0) hand_failure(end_failed);
  Py_RETURN_NONE;
}

/* Layer.enter(p): the backward of forward p begins (its first output gradient or unpack). */
int hot_enter(Hot *h, Pass *p) {
  if (lock_take(h) < 0) return -1;
  int go = !p->entered && !p->exited && !h->removed;
  if (go) p->entered = 1;
  if (lock_give(h) < 0) return -1;
  if (!go) return 0;
  if (backward_call(h, 0) < 0) return -1;
  Call *end = call_new(p, KIND_END);
  if (end == NULL) return -1;
  /* Torch.at_backward_end, without its Python frame */
  PyObject *r = call2(h->o.queue, (PyObject *)end, NULL);
  Py_XDECREF(r);
  Py_DECREF(end);
  if (r == NULL) { /* not in a backward pass (an unpack outside one) */
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
  }
  return hot_maybe_exit(h);
}

static int call_traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(((Call *)self)->pass_);
  return 0;
}

static int call_clear(PyObject *self) {
  Py_CLEAR(((Call *)self)->pass_);
  return 0;
}

static void call_dealloc(PyObject *self) { gc_dealloc(self, call_clear); }

static PyMemberDef call_members[] = {
    {"pass_", T_OBJECT, offsetof(Call, pass_), READONLY, "the forward (Pass) it belongs to"},
    {"kind", T_INT, offsetof(Call, kind), READONLY, "core.INPUT, core.OUTPUT, or -1: an end-of-backward callback"},
    {"fired", T_INT, offsetof(Call, fired), READONLY, "whether it fired"},
    {NULL, 0, 0, 0, NULL},
};

TIMED_CALL(T_END, call_call)

static PyType_Slot call_slots[] = {
    {Py_tp_dealloc, call_dealloc},  {Py_tp_traverse, call_traverse},
    {Py_tp_clear, call_clear},      {Py_tp_members, call_members},
    {Py_tp_call, TIMED(call_call)}, {Py_tp_doc, "One forward's call on a gradient (grads._Call), or its end callback."},
    {0, NULL},
};

static PyType_Spec call_spec = {"swapagent._hot.Call", sizeof(Call), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                call_slots};

/* ---- Chain: grads._Chain, the one gradient hook the companion puts on a tensor crossing its layers ----
 * The same lists, the same order (a tensor's input calls before its output calls), the same rule of which
 * calls are dead. */

typedef struct {
  PyObject_HEAD PyObject *inputs, *outputs; /* lists of Call, in the order added */
  PyObject *remove;                         /* the gradient hook's remover (grads.chain sets it) */
} Chain;

/* Drops the dead calls of a list, in place. */
static int prune_list(PyObject *l) {
  Py_ssize_t n = PyList_Size(l);
  PyObject *keep = PyList_New(0);
  if (keep == NULL) return -1;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *c = PyList_GetItem(l, i);
    if (!call_dead((Call *)c) && PyList_Append(keep, c) < 0) {
      Py_DECREF(keep);
      return -1;
    }
  }
  int rc = PyList_Size(keep) == n ? 0 : PyList_SetSlice(l, 0, n, keep);
  Py_DECREF(keep);
  return rc;
}

static int chain_prune(Chain *ch) { return prune_list(ch->inputs) < 0 || prune_list(ch->outputs) < 0 ? -1 : 0; }

/* A kind call of forward pass (a Pass) on chain (a Chain). */
int chain_add(PyObject *chain, PyObject *pass, int kind) {
  Chain *ch = (Chain *)chain;
  if (Py_TYPE(pass) != PassType) {
    PyErr_SetString(PyExc_TypeError, "Chain.add: not a Pass of this module");
    return -1;
  }
  if (chain_prune(ch) < 0) return -1;
  Call *c = call_new((Pass *)pass, kind);
  if (c == NULL) return -1;
  int rc = PyList_Append(kind == kind_input ? ch->inputs : ch->outputs, (PyObject *)c);
  Py_DECREF(c);
  return rc;
}

/* The gradient hook: a tensor's input calls (the backward exit of the layer it entered) before its output
 * calls (the backward enter of the layer it left), each on the list as it was at the call. A call that
 * raised is logged (core's hook_failed), never raised into the backward. */
static PyObject *chain_call(PyObject *self, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kw)) {
  Chain *ch = (Chain *)self;
  PyObject *const lists[] = {ch->inputs, ch->outputs};
  for (size_t k = 0; k < 2; k++) {
    PyObject *calls = PyList_GetSlice(lists[k], 0, PyList_Size(lists[k]));
    if (calls == NULL) {
      hand_failure(hook_failed);
      continue;
    }
    for (Py_ssize_t i = 0; i < PyList_Size(calls); i++)
      if (call_fire((Call *)PyList_GetItem(calls, i)) < 0) hand_failure(hook_failed);
    Py_DECREF(calls);
  }
  if (chain_prune(ch) < 0) hand_failure(hook_failed);
  Py_RETURN_NONE;
}

static PyObject *chain_add_m(PyObject *self, PyObject *args) {
  PyObject *pass;
  int kind;
  if (!PyArg_ParseTuple(args, "Oi", &pass, &kind) || chain_add(self, pass, kind) < 0) return NULL;
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
  if ((kw != NULL && PyDict_Size(kw) > 0) || PyTuple_Size(args) != 0) {
    PyErr_SetString(PyExc_TypeError, "Chain() takes no arguments");
    return -1;
  }
  PyObject *ins = PyList_New(0), *outs = PyList_New(0);
  if (ins == NULL || outs == NULL) {
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    return -1;
  }
  PyObject *old[] = {ch->inputs, ch->outputs};
  ch->inputs = ins;
  ch->outputs = outs;
  for (size_t i = 0; i < 2; i++) Py_XDECREF(old[i]);
  return 0;
}

static int chain_traverse(PyObject *self, visitproc visit, void *arg) {
  Chain *ch = (Chain *)self;
  Py_VISIT(ch->inputs);
  Py_VISIT(ch->outputs);
  Py_VISIT(ch->remove);
  return 0;
}

static int chain_clear(PyObject *self) {
  Chain *ch = (Chain *)self;
  Py_CLEAR(ch->inputs);
  Py_CLEAR(ch->outputs);
  Py_CLEAR(ch->remove);
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
    {Py_tp_init, chain_init},         {Py_tp_new, PyType_GenericNew}, {Py_tp_dealloc, chain_dealloc},
    {Py_tp_traverse, chain_traverse}, {Py_tp_clear, chain_clear},     {Py_tp_call, TIMED(chain_call)},
    {Py_tp_members, chain_members},   {Py_tp_methods, chain_methods},
    {Py_tp_doc, "The companion's gradient hook on one tensor (grads._Chain)."},
    {0, NULL},
};

static PyType_Spec chain_spec = {"swapagent._hot.Chain", sizeof(Chain), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                 chain_slots};

int grad_init(PyObject *m) {
  return add_type(m, "Pass", &PassType, &pass_spec) < 0 || add_type(m, "Call", &CallType, &call_spec) < 0 ||
                 add_type(m, "Chain", &ChainType, &chain_spec) < 0
             ? -1
             : 0;
}
