"""hyper_parallel.core.activation_checkpoint.swap (stand-in): SwapTensor, SwapManager and swap_wrapper.

The schedule is hyper-parallel's: set_forward_prefetch_layer names a group (swap_group_<n>) for both
layers it chains. A wrapped layer's forward saves its eligible tensors as SwapTensors of its group; the
forward hook of a layer with a next one protects the output's aliases and launches the group's offload
(copy to host); the forward hook of the next layer waits for that offload, and wait_offload releases each
device storage with untyped_storage().resize_(0). The last layer of a chain keeps its group on device. In
backward, the gradient of the layer's output launches the load of the group before it and waits for its
own: resize_ back, then copy the host bytes in. The unpack hands a SwapTensor's tensor to autograd and
drops the SwapTensor, as hyper-parallel pops it from its storage: nothing of the swap outlives the
backward. Duplicates are found per group only, and nothing but the output is protected: the issue-294
bug."""

import os

from hyper_parallel.platform import get_platform


def on_device(t):
    """hyper-parallel's device check; HYPER_PARALLEL_STANDIN_DEVICE=1 (the tests' switch) counts CPU too."""
    return os.environ.get("HYPER_PARALLEL_STANDIN_DEVICE") == "1" or str(t.device).lower() != "cpu"


class SwapTensor:
    """One saved tensor of a group: device -> d2h -> host -> h2d -> device."""

    def __init__(self, tensor, group_name):
        self.val = tensor
        self.group_name = group_name
        self.state = "device"
        self._keep_on_device = False
        self._duplicate_swap = False
        storage = tensor.untyped_storage()
        self.storage_size = storage.nbytes()
        self.key = (str(tensor.device), storage.data_ptr(), self.storage_size)
        self.host = None

    def protect_if_aliases(self, ptrs):
        if self.val.untyped_storage().data_ptr() in ptrs:
            self._keep_on_device = True

    def async_offload(self):
        if self._keep_on_device or self._duplicate_swap or self.state != "device":
            return
        storage = self.val.untyped_storage()
        if storage.nbytes() != self.storage_size:
            raise RuntimeError("swap: the storage of a saved tensor of %s was resized since it was saved"
                               % self.group_name)
        self.host = get_platform().host_buffer(self.storage_size)
        self.host.untyped_storage().copy_(storage)
        self.state = "d2h"

    def wait_offload(self):
        if self._keep_on_device or self._duplicate_swap or self.state != "d2h":
            return
        self.val.untyped_storage().resize_(0)  # the release: every tensor on this storage loses its memory
        self.state = "host"

    def async_load(self):
        if self.state != "host":
            return
        storage = self.val.untyped_storage()
        storage.resize_(self.storage_size)
        storage.copy_(self.host.untyped_storage())
        self.state = "h2d"

    def wait_load(self):
        if self.state == "h2d":
            self.state = "device"
            self.host = None

    def get_val(self):
        if self.state in ("host", "h2d"):
            raise RuntimeError("swap: a tensor of %s is used before its load completed (state %s)"
                               % (self.group_name, self.state))
        return self.val


class SwapManager:
    """The process-wide swap state (a singleton): groups of SwapTensors and the prefetch wiring."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            inst = super().__new__(cls)
            inst.groups = {}
            inst.keys = {}
            inst.order = []
            inst.current = None
            cls._instance = inst
        return cls._instance

    def ensure_group(self, name):
        if name not in self.groups:
            self.groups[name], self.keys[name] = [], set()
        return self.groups[name]

    def add_storage(self, group_name, swap_tensor):
        """Registers a saved tensor; a storage the group registered already is a duplicate (per group only)."""
        self.ensure_group(group_name)
        if swap_tensor.key in self.keys[group_name]:
            swap_tensor._duplicate_swap = True  # pylint: disable=protected-access
        self.keys[group_name].add(swap_tensor.key)
        self.groups[group_name].append(swap_tensor)
        return len(self.groups[group_name]) - 1

    def take(self, group_name, index):
        """The SwapTensor at index, dropped from its group (the unpack's: it is used once)."""
        sts = self.groups[group_name]
        st, sts[index] = sts[index], None
        return st

    def swap_tensors(self, group_name):
        return [st for st in self.groups.get(group_name, ()) if st is not None]

    def get_current_group_name(self):
        return self.current

    def set_current_group_name(self, name):
        self.current = name

    def protect_alias_tensors(self, group_name, tensors):
        ptrs = {t.untyped_storage().data_ptr() for t in get_platform().tensors_in(tensors)}
        for st in self.swap_tensors(group_name):
            st.protect_if_aliases(ptrs)

    def launch_offload(self, group_name):
        for st in self.swap_tensors(group_name):
            st.async_offload()

    def wait_offload(self, group_name):
        for st in self.swap_tensors(group_name):
            st.wait_offload()

    def launch_load(self, group_name):
        for st in self.swap_tensors(group_name):
            st.async_load()

    def wait_load(self, group_name):
        for st in self.swap_tensors(group_name):
            st.wait_load()

    def release_group_storage(self, group_name):
        """The group's backward is done: its saved tensors are dropped (a new forward starts over)."""
        self.groups[group_name], self.keys[group_name] = [], set()

    def start_forward(self, group_name):
        self.set_current_group_name(group_name)
        self.release_group_storage(group_name)

    def set_forward_prefetch_layer(self, first_layer, second_layer):
        """Names a group for each layer (once), wires first_layer's offload to be waited for in second_layer's
        forward, and second_layer's backward to load first_layer's group ahead. Hooks without kwargs, as
        hyper-parallel registers them."""
        platform = get_platform()
        for m in (first_layer, second_layer):
            if getattr(m, "_swap_group_name", None) is None:
                name = "swap_group_%d" % len(self.order)
                platform.set_attr(m, "_swap_group_name", name)
                self.order.append(name)
                self.ensure_group(name)
        if getattr(first_layer, "_swap_next_group", None) is None:
            platform.set_attr(first_layer, "_swap_next_group", second_layer._swap_group_name)
        if getattr(second_layer, "_swap_prev_group", None) is None:
            platform.set_attr(second_layer, "_swap_prev_group", first_layer._swap_group_name)
        _install(self, platform, first_layer)
        _install(self, platform, second_layer)


def _install(manager, platform, layer):
    """One pre-hook and one forward hook per layer, whatever it was wired as: the forward hook launches the
    layer's own offload, then waits for the offload of the group it prefetches with (hyper-parallel's
    order). In backward, the layer loads its own group and launches the load of the group before it: from a
    full backward pre-hook where the platform has one (torch, as hyper-parallel registers it: torch then
    hands the layer a view of each positional input tensor, whose base is the caller's tensor), else from the
    gradient of the layer's output."""
    if getattr(layer, "_swap_hooked", False):
        return
    platform.set_attr(layer, "_swap_hooked", True)
    backward_pre_hook = getattr(platform, "backward_pre_hook", None)

    def backward():
        name = getattr(layer, "_swap_group_name", None)
        prev = getattr(layer, "_swap_prev_group", None)
        if prev is not None:
            manager.launch_load(prev)
        if name is not None:
            manager.launch_load(name)
            manager.wait_load(name)
    if backward_pre_hook is not None:
        backward_pre_hook(layer, backward)

    def pre(_module, _args):
        name = getattr(layer, "_swap_group_name", None)
        if name is not None:
            manager.start_forward(name)
        else:
            manager.set_current_group_name(None)  # a layer of no group: its saves stay where they are

    def post(_module, _args, output):
        name = getattr(layer, "_swap_group_name", None)
        prev = getattr(layer, "_swap_prev_group", None)
        if name is not None and getattr(layer, "_swap_next_group", None) is not None:
            protect = getattr(manager, "protect_alias_tensors", None)  # absent in older versions
            if protect is not None:
                protect(name, output)
            manager.launch_offload(name)
        if prev is not None:
            manager.wait_offload(prev)
        if backward_pre_hook is None and (name is not None or prev is not None):
            platform.on_grad(output, backward)

    layer.register_forward_pre_hook(pre, prepend=True)
    layer.register_forward_hook(post)


class SaveOnCpu:
    """The pack and unpack of each platform's AsyncSaveOnCpu (a subclass of this and of its framework's
    saved_tensors_hooks): pack makes a SwapTensor of an eligible saved tensor (on device, not a parameter,
    not empty, not MUST_SAVE by the policy) and returns its index (the older versions' shape); unpack
    returns SwapTensor.get_val()."""

    parameter_type = None  # the framework's Parameter class

    def __init__(self, wrapper):
        self.wrapper = wrapper

    def pack(self, t):
        w = self.wrapper
        if w is None:  # async_save_on_cpu: the current group's, no wrapper
            group, params, policy_fn = SwapManager().get_current_group_name(), (), None
        else:  # a wrapper no prefetch chain named (one inside a chained block): the block's group
            group = getattr(w, "_swap_group_name", None) or SwapManager().get_current_group_name()
            params, policy_fn = w.param_ptrs(), w.policy_fn
        s = t.untyped_storage()
        if group is None or not on_device(t) or isinstance(t, self.parameter_type) or s.nbytes() == 0 or \
                s.data_ptr() in params or must_save(policy_fn, t):
            return t
        return (group, SwapManager().add_storage(group, SwapTensor(t, group)))

    def unpack(self, packed):
        if isinstance(packed, tuple):
            return SwapManager().take(*packed).get_val()
        return packed


def must_save(policy_fn, t):
    """The policy (MindFormers passes one) keeps t on device."""
    return policy_fn is not None and getattr(policy_fn(t), "name", "") == "MUST_SAVE"


def tensors_in(obj, tensor_type):
    if isinstance(obj, tensor_type):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in tensors_in(x, tensor_type)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in tensors_in(x, tensor_type)]
    return []


# Older hyper-parallel versions have no protect_alias_tensors (nothing is protected, not even the output):
# HYPER_PARALLEL_STANDIN_NO_PROTECT=1 gives that shape, in which the guard can only refuse releases.
if os.environ.get("HYPER_PARALLEL_STANDIN_NO_PROTECT") == "1":
    del SwapManager.protect_alias_tensors


def swap_wrapper(module, policy_fn=None):
    """The layer wrapped so that its saved tensors are swapped (the platform's wrapper)."""
    return get_platform().swap_wrapper(module, policy_fn)
