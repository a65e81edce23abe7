/* _hot_region.c: torch's region hooks in C (Hot.region, then Hot.pre and Hot.post as the module's forward
 * pre-hook and forward hook): what Layer.forward_pre and Layer.forward_post do, for a torch layer whose agent
 * takes its region calls through swapagent_call (Agent.c_calls) and that no guard watches (region_calls): the
 * same walks, pointers, descriptions and Python objects, with the agent's region enter and exit called
 * directly, without the GIL. Anything else runs those Python methods, so core.py stays the one description of
 * the rule. Why in C: in Python the two hooks and the gradient chains cost a region more than its saved
 * tensors' pack and unpack together (docs/companions.md). */
#include "_hot.h"

long walk_max_depth = -1; /* how deep the walk goes: the Python walk's limit, given by configure */
static PyObject *zero;    /* 0, the handle a save starts with */
PyObject *walk_atoms;     /* frozenset of the types the walk never looks into, given by configure */

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
  PyObject *r = ps && out && d ? PyObject_CallFunctionObjArgs(h->o.walk, obj, h->o.is_tensor, ps, out, d, *seen, NULL)
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

/* walk_named (swapagent.walk) below its top: tuples and lists by index, dicts by key repr, each container once. */
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

/* Appends PATH + saved_desc(t) ("PATH\tDTYPE\tSHAPE", describe_line's) to x as one line, ended by a NUL:
 * description lines as swapagent_call's text takes them. */
static int text_line(Hot *h, struct buf *x, const char *path, size_t len, PyObject *t) {
  PyObject *d = desc_of(t, h->o.descs, h->o.describe);
  char *s;
  Py_ssize_t k;
  int rc = d == NULL || PyBytes_AsStringAndSize(d, &s, &k) < 0 || buf_put(x, path, len) < 0 ||
                   buf_put(x, s, (size_t)k) < 0 || buf_put(x, "", 1) < 0
               ? -1
               : 0;
  Py_XDECREF(d);
  return rc;
}

/* Framework.ptr of each tensor a walk found that is reported, appended to ptrs, with a description line of
 * each (forward_pre's ptrs and descs); with dptrs, only those with a storage are described, their pointers
 * appended to dptrs (forward_post's). *n_pos counts the reported ones among the first n_named. */
static int found_ptrs(Hot *h, struct found *f, struct buf *ptrs, struct buf *dptrs, struct buf *tx, size_t n_named,
                      size_t *n_pos) {
  for (size_t i = 0; i < BUF_LEN(&f->ents, struct ent); i++) {
    struct ent *e = &BUF_AT(&f->ents, struct ent)[i];
    uintptr_t q;
    int got = tensor_ptr(h, e->t, &q);
    if (got <= 0) {
      if (got < 0) return -1;
      continue;
    }
    if (BUF_PUT(ptrs, uintptr_t, q) < 0) return -1;
    if (i < n_named) (*n_pos)++;
    if (dptrs != NULL && q == 0) continue;
    if ((dptrs != NULL && BUF_PUT(dptrs, uintptr_t, q) < 0) || text_line(h, tx, found_path(f, i), e->len, e->t) < 0)
      return -1;
  }
  return 0;
}

/* Whether the agent's calls a and b may be made directly: 1 with c filled from Agent.c_calls, 0 when they go
 * through its methods (an agent without c_calls, a test's or the bench's null agent, or one whose a or b was
 * replaced on the object, a recorder), -1 on an exception. */
int direct_calls(Hot *h, struct calls *c, PyObject *a, PyObject *b) {
  PyObject *cc = PyObject_GetAttr(h->o.agent, s_c_calls);
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
  if (got == 1) {
    int replaced = agent_replaced(h, a, b);
    got = replaced < 0 ? -1 : !replaced;
  }
  return got;
}

/* 1 when this layer's region hooks run here (calls filled, calls->agent a new reference), 0 when they run
 * through Layer.forward_pre and forward_post: the guard's hooks (core.watch, Layer.guarded), an agent object
 * without c_calls (a test's, the bench's null agent), or one whose region_enter or region_exit was replaced
 * (a recorder). -1 on an exception. */
static int region_calls(Hot *h, struct calls *c) {
  c->agent = NULL;
  if (!h->native || watched || h->guarded) return 0;
  int fast = direct_calls(h, c, s_region_enter, s_region_exit);
  if (fast == 1) {
    Py_INCREF(h->o.agent);
    c->agent = h->o.agent;
  }
  return fast;
}

/* The agent's check(fmt % group, rc): a failed call warned of once, the job goes on. */
int agent_check(Hot *h, PyObject *agent, const char *fmt, long long rc) {
  PyObject *call = PyUnicode_FromFormat(fmt, PyBytes_AsString(h->o.group)), *code = PyLong_FromLongLong(rc);
  PyObject *r = call && code ? call_method2(agent, s_check, call, code) : NULL;
  Py_XDECREF(call);
  Py_XDECREF(code);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

/* Layer._clear_region */
static int clear_region(Hot *h) {
  PyDict_Clear(h->o.region);
  PyObject *const ls[] = {h->o.bptr, h->o.bsize, h->o.bflag, h->o.bstore};
  for (size_t i = 0; i < 4; i++)
    if (list_clear(ls[i]) < 0) return -1;
  return 0;
}

/* The gradient hook (Chain) on tensor t, made by the layer's grads.chain (registered once per tensor) unless
 * grads._chains has it already; None when t takes no hook. A new reference, NULL on an exception. */
static PyObject *chain_of(Hot *h, PyObject *t) {
  PyObject *key = PyLong_FromVoidPtr(t);
  PyObject *e = key != NULL ? PyDict_GetItemWithError(h->o.chains, key) : NULL; /* borrowed: (ref, chain) */
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
  return call2(h->o.chain, t, NULL);
}

/* Layer._hook_grads(p, the first n tensors found, kind): a kind call of forward p on the gradient hook of
 * each distinct tensor that takes a gradient; how many were hooked, or -1. */
static Py_ssize_t hook_grads(Hot *h, Pass *p, struct found *f, size_t n, int kind) {
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
    PyObject *ch = chain_of(h, t);
    if (ch == NULL) return -1;
    int rc = ch == Py_None ? 0 : chain_add(ch, (PyObject *)p, kind); /* (a Python chain: a TypeError) */
    if (ch != Py_None && rc == 0) hooked++;
    Py_DECREF(ch);
    if (rc < 0) return -1;
  }
  return hooked;
}

/* Layer.forward_pre(args, kwargs), with the agent's region enter called directly. */
static int region_pre(Hot *h, struct calls *c, PyObject *args, PyObject *kwargs) {
  PyObject *params = NULL;
  Pass *p = NULL;
  struct found f;
  struct buf ptrs;
  struct buf tx;
  found_init(&f);
  buf_init(&ptrs);
  buf_init(&tx);
  int rc = -1;
  /* core.end_freed: forwards whose saved tensors the framework freed end before this one saves */
  if (freed_layers != NULL && PyList_Size(freed_layers) > 0) {
    PyObject *r = PyObject_CallNoArgs(end_freed);
    if (r == NULL) goto done;
    Py_DECREF(r);
  }
  /* maybe_exit: a previous forward that only waited for a freed tensor ends now, and so does one never
   * entered whose saved tensors the framework all freed (it has nothing to do for a forward already exited,
   * still waiting, or with no handle to forget, as every forward under no_grad: asked here without a call) */
  Pass *last = (Pass *)h->o.latest;
  if (last != NULL && Py_TYPE(last) == PassType && !last->exited &&
      (last->entered || (h->waiting == 0 && PyList_Size(h->o.handles) > 0)) && hot_maybe_exit(h) < 0)
    goto done;
  T_BEGIN(T_PRE_PARAMS);
  if ((params = PyObject_CallNoArgs(h->o.param_ptrs)) == NULL) goto done;
  T_END(T_PRE_PARAMS);
  set_ref(&h->o.params, params);
  params = NULL;
  if (list_clear(h->o.saved) < 0 || clear_region(h) < 0 || (p = pass_new(h)) == NULL) goto done;
  Py_INCREF(p);
  set_ref(&h->o.latest, (PyObject *)p);
  if (walk_top(h, args, "args", NULL, &f) < 0) goto done;
  size_t n_named = BUF_LEN(&f.ents, struct ent);
  /* Backward exit waits for the gradient of each positional input that takes one. */
  Py_ssize_t n = hook_grads(h, p, &f, n_named, kind_input);
  if (n < 0) goto done;
  p->inputs_left += n; /* (under the GIL: no gradient fires during the forward) */
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
  if (found_ptrs(h, &f, &ptrs, NULL, &tx, n_named, &n_pos) < 0) goto done;
  T_END(T_PRE_INPUTS);
  const char *g = PyBytes_AsString(h->o.group);
  const uintptr_t *in = BUF_ARG(&ptrs, uintptr_t);
  size_t n_in = BUF_LEN(&ptrs, uintptr_t);
  int64_t e;
  Py_BEGIN_ALLOW_THREADS;
  e = c->call(RECORD(SWAPAGENT_CALL_REGION_ENTER, .group = g, .ptrs = in, .n = n_in, .n_positional = n_pos,
                     .text = n_in > 0 ? tx.p : NULL, .text_len = n_in > 0 ? tx.n : 0),
              c->opts);
  Py_END_ALLOW_THREADS;
  rc = e == 0 ? 0 : agent_check(h, c->agent, "region_enter(%s)", e);
done:
  buf_free(&tx);
  buf_free(&ptrs);
  found_free(&f);
  Py_XDECREF(params);
  Py_XDECREF(p);
  return rc;
}

/* Layer.flush(report) with the agent's region end as report: the open region's saves, its outputs and the
 * descriptions in one call. */
static int flush_end(Hot *h, struct calls *c, struct buf *outs, struct buf *dptrs, struct buf *tx) {
  PyObject *hs = NULL, *refs = NULL, *got = NULL;
  struct buf live, sp, sz, sf, hbuf;
  buf_init(&live);
  buf_init(&sp);
  buf_init(&sz);
  buf_init(&sf);
  buf_init(&hbuf);
  int rc = -1, any_flag = 0;
  Pass *p = (Pass *)h->o.latest;
  if (p != NULL && Py_TYPE(p) == PassType) {
    Py_INCREF(p);
    hs = p->handles;
    refs = p->refs;
  } else
    p = NULL;
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
  const char *g = PyBytes_AsString(h->o.group);
  int64_t e;
  Py_BEGIN_ALLOW_THREADS;
  e = c->call(RECORD(SWAPAGENT_CALL_REGION_EXIT, .group = g, .ptrs = BUF_ARG(outs, uintptr_t), .n = n_out,
                     .save_ptrs = BUF_ARG(&sp, uintptr_t), .save_nbytes = BUF_ARG(&sz, size_t),
                     .save_flags = any_flag ? BUF_ARG(&sf, uint32_t) : NULL, .n_save = k,
                     .handles = k > 0 ? BUF_AT(&hbuf, int64_t) : NULL, .desc_ptrs = BUF_ARG(dptrs, uintptr_t),
                     .n_desc = n_desc, .text = n_desc > 0 ? tx->p : NULL, .text_len = n_desc > 0 ? tx->n : 0),
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
  PyObject *saved = h->o.saved;
  for (size_t j = 0; j < k; j++) {
    Py_ssize_t i = BUF_AT(&live, Py_ssize_t)[j];
    if ((got = PyLong_FromLongLong(handles[j])) == NULL || PyList_SetItem(hs, i, got) < 0) goto done;
    /* got is hs's now */
    if (handles[j] <= 0) continue;
    if (PyDict_SetItem(h->o.entries, got, PyList_GetItem(h->o.bstore, i)) < 0 || PyList_Append(h->o.handles, got) < 0 ||
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
  Py_XDECREF(p);
  return rc;
}

/* Layer.forward_post(output), with the agent's region end called directly. */
static int region_post(Hot *h, struct calls *c, PyObject *output) {
  struct found f;
  struct buf outs, dptrs;
  struct buf tx;
  found_init(&f);
  buf_init(&outs);
  buf_init(&dptrs);
  buf_init(&tx);
  int rc = -1;
  if (walk_top(h, output, "output", NULL, &f) < 0 || found_ptrs(h, &f, &outs, &dptrs, &tx, 0, NULL) < 0) goto done;
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
  PyObject *none = PyFrozenSet_New(NULL);
  if (none == NULL) goto done;
  set_ref(&h->o.params, none);
  if (clear_region(h) < 0) goto done;
  /* Backward enter: the first gradient of an output (however nested) to arrive. */
  T_BEGIN(T_POST_GRADS);
  Pass *p = (Pass *)h->o.latest;
  Py_XINCREF(p);
  size_t n = BUF_LEN(&f.ents, struct ent);
  rc = p != NULL && Py_TYPE(p) == PassType && hook_grads(h, p, &f, n, kind_output) < 0 ? -1 : 0;
  Py_XDECREF(p);
  T_END(T_POST_GRADS);
done:
  buf_free(&tx);
  buf_free(&dptrs);
  buf_free(&outs);
  found_free(&f);
  return rc;
}

/* pre(module, args, kwargs): the forward pre-hook (with kwargs) Torch registers for a layer with a region
 * path: the region's enter, then its saved-tensor hooks (this Hot's pack and unpack) pushed. */
PyObject *hot_pre(PyObject *self, PyObject *args) {
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
    r = call2(h->o.forward_pre, a, kw);
    rc = r == NULL ? -1 : 0;
    Py_XDECREF(r);
  }
  Py_XDECREF(c.agent);
  if (rc < 0 || (r = PyObject_CallFunctionObjArgs(h->o.push, h->o.pack_m, h->o.unpack_m, NULL)) == NULL) return NULL;
  Py_DECREF(r);
  h->active++;
  Py_RETURN_NONE;
}

/* post(module, args, output): the forward hook: the saved-tensor hooks popped, then the region's end (even
 * when the pop failed, as a finally would). */
PyObject *hot_post(PyObject *self, PyObject *args) {
  Hot *h = (Hot *)self;
  PyObject *module, *a, *output, *r, *et = NULL, *ev = NULL, *tb = NULL;
  if (!PyArg_ParseTuple(args, "OOO", &module, &a, &output)) return NULL;
  if (!h->native) {
    PyErr_SetString(PyExc_RuntimeError, "Hot.post: region() was not called");
    return NULL;
  }
  if (h->active > 0) {
    h->active--;
    if ((r = PyObject_CallFunctionObjArgs(h->o.pop, NULL)) == NULL) PyErr_Fetch(&et, &ev, &tb);
    Py_XDECREF(r);
  }
  struct calls c;
  int fast = region_calls(h, &c);
  int rc = fast < 0 ? -1 : fast ? region_post(h, &c, output) : 0;
  if (fast == 0) {
    r = call2(h->o.forward_post, output, NULL);
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

/* region(tensor_type=, push=, pop=, descs=, describe=, walk=, is_tensor=, chains=, chain=, queue=, param_ptrs=,
 *        include_cpu=): makes pre and post this torch layer's region hooks (swapagent.torch._region_hooks says
 * what each is). */
PyObject *hot_region(PyObject *self, PyObject *args, PyObject *kw) {
  static char *names[] = {"tensor_type", "push", "pop", "descs", "describe", "walk", "is_tensor", "chains", "chain",
                          "queue", "param_ptrs", "include_cpu", NULL};
  Hot *h = (Hot *)self;
  struct hot_objs *o = &h->o;
  PyObject *v[11];
  int include_cpu;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO!OOOO!OOOp", names, &v[0], &v[1], &v[2], &PyDict_Type, &v[3],
                                   &v[4], &v[5], &v[6], &PyDict_Type, &v[7], &v[8], &v[9], &v[10], &include_cpu))
    return NULL;
  PyObject **dst[] = {&o->tensor_type, &o->push,   &o->pop,   &o->descs, &o->describe,  &o->walk,
                      &o->is_tensor,   &o->chains, &o->chain, &o->queue, &o->param_ptrs};
  for (size_t i = 0; i < 11; i++) {
    Py_INCREF(v[i]);
    set_ref(dst[i], v[i]);
  }
  set_ref(&o->pack_m, PyObject_GetAttrString(self, "pack"));
  set_ref(&o->unpack_m, PyObject_GetAttrString(self, "unpack"));
  h->include_cpu = include_cpu;
  h->native = o->pack_m != NULL && o->unpack_m != NULL;
  if (!h->native) return NULL;
  Py_RETURN_NONE;
}

int region_init(void) {
  if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL) return -1;
  if (utf8_cache == NULL && (utf8_cache = PyDict_New()) == NULL) return -1;
  return 0;
}
