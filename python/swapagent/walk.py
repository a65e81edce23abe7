"""swapagent.walk: where the tensors of a layer's arguments and outputs are, however nested, and what each
one is (its argument path, dtype and shape): the descriptions a companion gives the agent. Shared by both
framework companions through swapagent.core."""

import dataclasses

_ATOMS = frozenset((str, bytes, int, float, bool, complex, type(None)))
_MAX_DEPTH = 64


def walk_named(obj, is_tensor, path, out, _depth=0, _seen=None):
    """Appends (path, tensor) to out for every object found in obj for which is_tensor(x) is true (each
    occurrence, in order), however nested in tuples, lists, namedtuples, dicts and dataclasses; a tensor is
    not looked into, a container that holds itself is walked once. path grows from the given one as "[i]"
    for sequences, "['key']" for dicts and ".field" for dataclasses ("rotary_cos_sin[0]", "batch['mask']"),
    the argument paths fault reports name. It runs on every forward of every wrapped layer, for its inputs
    and outputs: the common containers are told by their exact type first. Returns out."""
    if is_tensor(obj):
        out.append((path, obj))
        return out
    t = type(obj)
    if t in _ATOMS or _depth > _MAX_DEPTH:
        return out
    if t is tuple or t is list or isinstance(obj, (tuple, list)):
        items = (("%s[%d]" % (path, i), v) for i, v in enumerate(obj))
    elif t is dict or isinstance(obj, dict):
        items = (("%s[%r]" % (path, k), v) for k, v in obj.items())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = (("%s.%s" % (path, f.name), getattr(obj, f.name, None)) for f in dataclasses.fields(obj))
    else:
        return out
    if _seen is None:
        _seen = set()
    elif id(obj) in _seen:
        return out
    _seen.add(id(obj))
    for p, v in items:
        if is_tensor(v):
            out.append((p, v))
        elif type(v) not in _ATOMS:
            walk_named(v, is_tensor, p, out, _depth + 1, _seen)
    return out


_described = {}  # (dtype, shape) -> "DTYPE\tSHAPE": a saved tensor's description costs a dict lookup


def describe_tail(t):
    """"DTYPE\tSHAPE" of a tensor, the framework's type name without its module ("float32", "bfloat16")."""
    shape = tuple(t.shape)
    key = (t.dtype, shape)
    d = _described.get(key)
    if d is None:
        name = str(t.dtype).rsplit(".", 1)[-1].lower()
        d = _described[key] = "%s\t%s" % (name, ",".join(str(int(n)) for n in shape))
    return d


def describe_line(path, t):
    """The description the agent takes (swapagent.h): "PATH\tDTYPE\tSHAPE"."""
    return path + "\t" + describe_tail(t)


_saved_descs = {}  # (dtype, shape) -> b"\tDTYPE\tSHAPE", ready for the C array


def saved_desc(t):
    """The description of a saved tensor that is no argument (empty PATH), as bytes, cached per dtype and
    shape: a region's saves are described at its exit with no string built per tensor."""
    key = (t.dtype, tuple(t.shape))
    d = _saved_descs.get(key)
    if d is None:
        d = _saved_descs[key] = ("\t" + describe_tail(t)).encode()
    return d
