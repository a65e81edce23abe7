"""frameworks.py: the frameworks the companion benches run (torch and MindSpore on llama.py's decoders): a model,
its step and digest, the companion's install, the empty hooks of the companion's kinds (the floor), and a
null agent (the companion's own cost). companions.py and floor.py time them; neither imports the other.
"""

import hashlib


class NullAgent:
    """The agent's Python interface with nothing behind it: the companion's own cost."""
    _next = 1 << 50  # far from the agent's handles: both share the process's storage-ops registry

    def save_n(self, _group, ptrs, _nbytes, _flags):
        first = NullAgent._next + 1
        NullAgent._next += len(ptrs)
        return list(range(first, first + len(ptrs)))

    def region_enter(self, _group, _ptrs, _npos, _descs=None):
        return 0

    def describe(self, _group, _ptrs, _descs):
        return 0

    def region_exit(self, group, _out_ptrs, ptrs=(), nbytes=(), flags=(), _desc_ptrs=(), _descs=()):
        return self.save_n(group, ptrs, nbytes, flags) if ptrs else []

    def unpack(self, _handle):
        return 1

    def backward_enter(self, _group):
        return 0

    def backward_exit(self, _group):
        return 0

    def check(self, _call, rc):
        return rc


class Torch:
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch
        torch.set_num_threads(1)
        torch.manual_seed(0)
        import llama
        self.model = llama.torch_model()
        self.layers = [self.model.layers[i] for i in llama.SWAP]
        self.version = "torch " + torch.__version__.split("+")[0]

    def step(self):
        for p in self.model.parameters():
            p.grad = None
        loss = self.model()
        loss.backward()
        return loss

    def digest(self, loss):
        h = hashlib.sha256(loss.detach().numpy().tobytes())
        for p in self.model.parameters():
            h.update(p.grad.numpy().tobytes())
        return h.hexdigest()[:16]

    def companion(self):
        import swapagent.torch as sa
        return sa

    def install_null(self):
        import inspect
        import swapagent.torch as sa
        from swapagent import core
        fw, agent, layers, removers = sa.Torch(True), NullAgent(), [], []
        always = "always_call" in inspect.signature(self.torch.nn.Module.register_forward_hook).parameters
        for i, m in enumerate(self.layers):
            layers.append(core.Layer(agent, fw, m, core.group_name(i), True))
            removers += sa._install(m, layers[-1], always)  # pylint: disable=protected-access
        return core.Handle(layers, removers)

    def install_hooks(self, saved_only=False, wrap=lambda _name, fn: fn):
        """The hooks the torch companion registers, each with an empty body (the pack hook counts, and
        returns t.detach() as the companion does: returning t itself makes a reference cycle through
        every operation that saves its own output, and the graph of every step stays). saved_only: no
        gradient hooks. wrap(name, fn) is what is registered for each hook fn (floor.py times them with it):
        pack, unpack, pre, post, grad."""
        torch = self.torch
        hooks = []
        count = self.packs = [0]

        def pack(t):
            count[0] += 1
            return t.detach()
        pack, unpack, grad = wrap("pack", pack), wrap("unpack", lambda t: t), wrap("grad", lambda _g: None)

        def grad_hooks(obj):
            if saved_only:
                return
            for t in obj if isinstance(obj, (tuple, list)) else (obj,):
                if isinstance(t, torch.Tensor) and t.requires_grad and not t._backward_hooks:  # pylint: disable=protected-access
                    t.register_hook(grad)

        for m in self.layers:
            active = []

            def pre(_m, args, _kwargs, active=active):
                grad_hooks(args)
                ctx = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
                ctx.__enter__()
                active.append(ctx)

            def post(_m, _args, out, active=active):
                active.pop().__exit__(None, None, None)
                grad_hooks(out)
            hooks.append(m.register_forward_pre_hook(wrap("pre", pre), with_kwargs=True))
            hooks.append(m.register_forward_hook(wrap("post", post), always_call=True))
        return Removable(h.remove for h in hooks)


class MindSpore:
    name = "mindspore"

    def __init__(self):
        import mindspore as ms
        self.ms = ms
        ms.set_device("CPU")
        ms.set_context(mode=ms.PYNATIVE_MODE)
        # Synchronous launches: MindSpore's asynchronous pipeline threads spin against the main thread on
        # a machine with few cores, which makes a step 20x slower and its time meaningless.
        ms.runtime.launch_blocking()
        ms.set_seed(0)
        import llama
        self.model = llama.ms_model()
        self.layers = [self.model.layers[i] for i in llama.SWAP]
        self.grad = ms.value_and_grad(self.model, None, self.model.trainable_params())
        self.version = "MindSpore " + ms.__version__
        self.grads = None

    def step(self):
        loss, self.grads = self.grad()
        loss.asnumpy()
        return loss

    def digest(self, loss):
        h = hashlib.sha256(loss.asnumpy().tobytes())
        for g in self.grads:
            h.update(g.asnumpy().tobytes())
        return h.hexdigest()[:16]

    def companion(self):
        import swapagent.mindspore as sa
        return sa

    def install_null(self):
        import swapagent.mindspore as sa
        from swapagent import core
        fw, agent, layers, removers = sa.MindSpore(True), NullAgent(), [], []
        for i, c in enumerate(self.layers):
            layers.append(core.Layer(agent, fw, c, core.group_name(i), True))
            removers += sa._install(c, layers[-1])  # pylint: disable=protected-access
        return core.Handle(layers, removers)

    def install_hooks(self, saved_only=False):
        """The hooks the MindSpore companion registers, each with an empty body (the pack hook counts, and
        returns the alias the companion returns, t.data, for the reason given in Torch.install_hooks).
        saved_only: the Cells' saved-tensor hooks alone."""
        ms = self.ms
        hooks, hooked = [], []
        count = self.packs = [0]

        def pack(t):
            count[0] += 1
            return t.data

        def grad_hooks(obj):
            for t in obj if isinstance(obj, (tuple, list)) else (obj,):
                if isinstance(t, ms.Tensor) and getattr(t, "_requires_grad", False) and \
                        not any(x is t for x in hooked):
                    hooked.append(t)
                    hooks.append(t.register_hook(lambda _g: None))

        def pre(_c, args, _kwargs):
            grad_hooks(args)

        def post(_c, _args, out):
            grad_hooks(out)

        for c in self.layers:
            if not saved_only:
                hooks.append(c.register_forward_pre_hook(pre, with_kwargs=True))
                hooks.append(c.register_forward_hook(post))
            c.register_saved_tensors_hooks(pack, lambda t: t)

        def remove():
            for c in self.layers:
                object.__setattr__(c, "_saved_tensors_pack_hook", None)
                object.__setattr__(c, "_saved_tensors_unpack_hook", None)
            hooked.clear()
        return Removable([h.remove for h in hooks] + [remove])


class Removable:
    def __init__(self, fns):
        self.fns = list(fns)

    def remove(self):
        for f in self.fns:
            f()
