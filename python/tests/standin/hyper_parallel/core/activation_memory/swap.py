"""hyper_parallel.core.activation_memory.swap (stand-in): the newest layout's swap, a module (torch only).

As in hyper-parallel: a SwapTensor(val, funcname, group_swap, cpu_pool) per swapped tensor, kept in a
Storage (index -> SwapTensors) that a SwapGroup of the SwapManager holds; every layer set_forward_prefetch_layer
wires gets a group, and the last of the chain swaps nothing. A layer's forward hook protects its output
(protect_alias_tensors: the output only, the issue-294 bug), launches its group's offload when a next layer
exists and waits for the previous group's, which releases each storage with untyped_storage().resize_(0).
Its full backward pre-hook launches the previous group's load and waits for its own. group_swap=True copies
a group's eligible tensors through one packed buffer per dtype, and loads them back slice by slice with
Tensor.copy_, keeping each tensor's version counter as hyper-parallel does; a cpu_pool gives the host
buffers (acquire(nbytes), release(buffer))."""

import torch

from hyper_parallel.core.activation_checkpoint.swap import on_device


class SwapTensor:
    def __init__(self, val, funcname, group_swap=False, cpu_pool=None):
        self.val, self.funcname, self.group_swap, self.cpu_pool = val, funcname, group_swap, cpu_pool
        self.device = isinstance(val, torch.Tensor) and on_device(val)
        self.state = "device" if self.device else "non_tensor"
        self.storage_size = val.untyped_storage().nbytes() if self.device else 0
        self.keep, self.duplicate, self.packed, self.host = False, False, False, None

    def key(self):
        s = self.val.untyped_storage()
        return s.data_ptr(), self.val.storage_offset(), s.nbytes(), tuple(self.val.stride())

    def moves(self):
        return self.device and not self.keep and not self.duplicate

    def host_buffer(self):
        if self.cpu_pool is not None:
            return self.cpu_pool.acquire(self.storage_size)
        return torch.empty(self.storage_size, dtype=torch.uint8)  # pinned on a device; plain on CPU

    def async_offload(self):
        if not self.moves() or self.state != "device" or self.packed:
            return
        self.host = self.host_buffer()
        self.host.untyped_storage().copy_(self.val.untyped_storage())
        self.state = "d2h"

    def wait_offload(self):
        if not self.moves() or self.state != "d2h":
            return
        storage = self.val.untyped_storage()
        if storage.nbytes() != 0:
            storage.resize_(0)
        self.state = "host"

    def async_load(self, source=None):
        if not self.moves() or self.state != "host":
            return
        storage = self.val.untyped_storage()
        if storage.nbytes() != self.storage_size:
            storage.resize_(self.storage_size)
        if source is not None:  # a slice of the group's packed host buffer, the tensor's version kept
            version = self.val._version
            self.val.copy_(source.view(self.val.dtype).reshape(self.val.shape))
            torch._C._autograd._unsafe_set_version_counter((self.val,), (version,))  # pylint: disable=protected-access
        else:
            storage.copy_(self.host.untyped_storage())
            if self.cpu_pool is not None:
                self.cpu_pool.release(self.host)
            self.host = None
        self.state = "h2d"

    def wait_load(self):
        if self.state == "h2d":
            self.state = "device"

    def get_val(self):
        if self.state in ("host", "h2d"):
            raise RuntimeError("swap: a tensor of %s is used before its load completed" % self.funcname)
        return self.val


class Storage(dict):
    """A pack context's swapped tensors: index -> [SwapTensor]."""

    def __missing__(self, key):
        self[key] = []
        return self[key]

    def swap_tensors(self):
        return [st for sts in self.values() for st in sts]


class SwapGroup:
    def __init__(self, name):
        self.name, self.storages, self.is_last_group = name, [], False
        self.packed = None  # group_swap: (host buffer, [(SwapTensor, offset)])

    def swap_tensors(self):
        return [st for s in self.storages for st in s.swap_tensors()]

    def launch_offload(self):
        seen = set()
        for st in self.swap_tensors():  # a storage saved twice in the group moves once
            if st.device:
                st.duplicate = st.key() in seen
                seen.add(st.key())
        group = [st for st in self.swap_tensors() if st.moves() and st.group_swap and st.val.is_contiguous()
                 and st.storage_size == st.val.numel() * st.val.element_size()]
        if len(group) > 1:  # one packed copy of the group's contiguous tensors
            flat = torch.cat([st.val.reshape(-1).view(torch.uint8) for st in group])
            host = torch.empty(flat.numel(), dtype=torch.uint8)
            host.copy_(flat)
            offsets, off = [], 0
            for st in group:
                st.packed, st.state = True, "d2h"
                offsets.append((st, off))
                off += st.storage_size
            self.packed = (host, offsets)
        for st in self.swap_tensors():
            st.async_offload()

    def wait_offload(self):
        for st in self.swap_tensors():
            st.wait_offload()

    def launch_load(self):
        if self.packed is not None:
            host, offsets = self.packed
            for st, off in offsets:
                st.async_load(host[off:off + st.storage_size])
            self.packed = None
        for st in self.swap_tensors():
            st.async_load()

    def wait_load(self):
        for st in self.swap_tensors():
            st.wait_load()

    def protect_alias_tensors(self, tensors):
        ptrs = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves(tensors)  # pylint: disable=protected-access
                if isinstance(t, torch.Tensor)}
        for st in self.swap_tensors():
            if st.device and st.val.untyped_storage().data_ptr() in ptrs:
                st.keep = True


class SwapManager:
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            inst = super().__new__(cls)
            inst._groups, inst._current, inst._layer_count = {}, "", 0
            cls._instance = inst
        return cls._instance

    def add_storage(self, group_name, storage):
        self._groups.setdefault(group_name, SwapGroup(group_name)).storages.append(storage)

    def get_current_group_name(self):
        return self._current

    def set_current_group_name(self, name):
        self._current = name

    def is_last_group(self, name):
        g = self._groups.get(name)
        return g is not None and g.is_last_group

    def groups(self):
        return list(self._groups.values())

    def protect_alias_tensors(self, name, tensors):
        if name in self._groups:
            self._groups[name].protect_alias_tensors(tensors)

    def launch_offload(self, name):
        self._groups[name].launch_offload()

    def wait_offload(self, name):
        self._groups[name].wait_offload()

    def launch_load(self, name):
        self._groups[name].launch_load()

    def wait_load(self, name):
        self._groups[name].wait_load()

    def release_group_storage(self, name):
        if name in self._groups:
            self._groups[name].storages = []

    def set_forward_prefetch_layer(self, first_layer, second_layer):
        """Both layers get a group (swap_group_<n>); first_layer's next is second_layer. Hooks as hyper-parallel
        registers them: forward pre (prepend) and forward hooks without kwargs, full backward pre (prepend) and full
        backward hooks, so torch hands each wired layer views of its positional inputs and outputs."""
        def ensure(m):
            if not hasattr(m, "_swap_group_name"):
                m._swap_group_name = "swap_group_%d" % self._layer_count
                m._swap_group_order = {"prev": None, "next": None}
                self._layer_count += 1
            self._groups.setdefault(m._swap_group_name, SwapGroup(m._swap_group_name))
            return m._swap_group_name
        a, b = ensure(first_layer), ensure(second_layer)
        if first_layer._swap_group_order["next"] is None:
            first_layer._swap_group_order["next"] = b
        if second_layer._swap_group_order["prev"] is None:
            second_layer._swap_group_order["prev"] = a
        for m in (first_layer, second_layer):
            self._groups[m._swap_group_name].is_last_group = m._swap_group_order["next"] is None
            if not getattr(m, "_swap_hooked", False):
                m._swap_hooked = True
                _hook(self, m)


def _hook(manager, m):
    name = m._swap_group_name

    def pre(_m, _args):
        if getattr(m, "_swap_state", None) != "pre_backward":
            manager.set_current_group_name(name)

    def post(_m, _args, output):
        if getattr(m, "_swap_state", None) == "pre_backward":
            return
        if m._swap_group_order["next"]:
            manager.protect_alias_tensors(name, output)
            manager.launch_offload(name)
        if m._swap_group_order["prev"]:
            manager.wait_offload(m._swap_group_order["prev"])

    def backward_pre(_m, _grad_output):
        m._swap_state = "pre_backward"
        if m._swap_group_order["prev"]:
            manager.launch_load(m._swap_group_order["prev"])
        if m._swap_group_order["next"]:
            manager.launch_load(name)  # nothing to do where the next layer's backward launched it
            manager.wait_load(name)
        manager.release_group_storage(name)

    def backward(_m, _grad_input, _grad_output):
        m._swap_state = "backward"

    m.register_forward_pre_hook(pre, prepend=True)
    m.register_forward_hook(post)
    m.register_full_backward_pre_hook(backward_pre, prepend=True)
    m.register_full_backward_hook(backward)
